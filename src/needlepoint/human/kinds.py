"""Which human page a benchmark takes: the kind its declaration names (`Declaration.human`, one of
contract/declaration.py HUMAN_KINDS) and the options it is built with for a person. Every module
of this package asks here, so that none checks a benchmark's name: a new benchmark whose samples
have a kind's shape gets the page, the Label Studio round trip and the command by its declaration.
"""

from __future__ import annotations

from typing import Any

from needlepoint.contract.declaration import HUMAN_KINDS, Declaration
from needlepoint.core.errors import DataError

__all__ = [
    "DOCUMENT",
    "IMAGE_PAIR",
    "ONE_BOX",
    "article",
    "declared",
    "either",
    "human_kind",
    "human_options",
    "names_of",
    "pages",
]

ONE_BOX, IMAGE_PAIR, DOCUMENT = HUMAN_KINDS
WHAT = {  # what a person does on each kind of page (the command's help follows the benchmark's title)
    IMAGE_PAIR: "box every target across an image pair, with groups",
    ONE_BOX: "one box for a referring expression",
    DOCUMENT: "read a long document of text and images, answer its question",
}


def pages() -> dict[str, Declaration]:
    """The registered benchmarks that declare a human page, by name, in the registry's order."""
    from needlepoint.contract.registry import declarations

    return {d.name: d for d in declarations() if d.human is not None}


def names_of(*kinds: str) -> list[str]:
    """The names of the benchmarks whose page is of one of `kinds`."""
    return [name for name, d in pages().items() if d.human in kinds]


def either(names: list[str], word: str = "or") -> str:
    """ "a", "a or b", "a, b or c"."""
    return f"{', '.join(names[:-1])} {word} {names[-1]}" if len(names) > 1 else "".join(names)


def declared(bench_name: str) -> Declaration:
    """The declaration of a benchmark with a human page; DataError naming those that have one."""
    known = pages()
    found = known.get(bench_name)
    if found is None:
        raise DataError(f"needlepoint human does not know {bench_name}; use {either(list(known))}")
    if found.human not in HUMAN_KINDS:
        raise DataError(
            f"benchmark {bench_name} declares the human page {found.human!r}, which is none of "
            f"{', '.join(HUMAN_KINDS)}; fix its declaration"
        )
    return found


def human_kind(bench_name: str) -> str:
    """The kind of page a benchmark's samples are answered on."""
    kind = declared(bench_name).human
    assert kind is not None  # declared() refuses a benchmark without a page
    return kind


def human_options(bench_name: str) -> dict[str, Any]:
    """The keyword options a benchmark is built with for a person (its defaults besides)."""
    return dict(declared(bench_name).human_options)


def article(word: str) -> str:
    """`word` after "a" or "an", as it is read aloud: "an MC-Bench", "a Ref-Adv-s", "an MM-NIAH"."""
    spelled = len(word) > 1 and word[:2].isupper()  # an initialism: its first letter's name
    vowel = word[:1] in ("AEFHILMNORSX" if spelled else "AEIOUaeiou")
    return f"{'an' if vowel else 'a'} {word}"

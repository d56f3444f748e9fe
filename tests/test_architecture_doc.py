"""docs/architecture.md and its picture, and the links of the project's pages.

scripts/draw_architecture.py draws the folders of src/needlepoint from their real imports; here it
runs on the package as it stands: every folder must be in the picture and on the page, and every
arrow must point down the layers. README.md, CONTRIBUTING.md and docs/ must link to pages, headings
and files that exist, and cite paths of the repository that exist.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from helpers import REPO

PACKAGE = REPO / "src" / "needlepoint"
PAGE = REPO / "docs" / "architecture.md"
PICTURE = REPO / "docs" / "images" / "architecture.png"
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]


@pytest.fixture(scope="module")
def script() -> ModuleType:
    """scripts/draw_architecture.py (scripts/ is on the tests' path, pyproject.toml)."""
    return importlib.import_module("draw_architecture")


def folders() -> list[str]:
    """The sub-packages of needlepoint, as folder names."""
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def test_the_picture_shows_every_folder_and_every_arrow_points_down(script: ModuleType) -> None:
    arch = script.read_architecture()
    drawing = script.draw(arch)
    try:
        labels = {label for label, _ in drawing.boxes.values()}
        assert [f for f in folders() if f"{f}/" not in labels] == []
        top_level = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
        assert [m for m in top_level if not any(m in label.split(", ") for label in labels)] == []
        assert {(a, b) for a, b, _, _ in drawing.arrows} == set(arch.edges), "one arrow per folder-level import"
        assert len(arch.edges) > 10  # the walk finds the package's imports
        height = {name: y for name, (_, y) in drawing.boxes.items()}
        upward = [(a, b) for a, b, leaves, arrives in drawing.arrows if not height[a] > height[b] or not leaves > arrives]
        assert upward == []
        assert script.png(drawing, arch).startswith(b"\x89PNG")
    finally:
        from matplotlib import pyplot as plt

        plt.close(drawing.figure)


def test_the_drawing_reads_imports_at_any_depth_and_shows_one_that_runs_up(script: ModuleType, tmp_path: Path) -> None:
    """The reader itself, on a made-up package: an import inside a function counts, one under `if
    TYPE_CHECKING:` does not, a relative import resolves; and with the layers declared the other way
    round, the same import draws an arrow that points up, which the test above would catch."""
    package = tmp_path / "src" / "needlepoint"
    for folder in ("low", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("X = 1\n")
    (package / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from needlepoint.high import c\n"
    )
    (package / "high" / "c.py").write_text("def f():\n    from needlepoint.low import a\n    from . import d\n")
    (package / "high" / "d.py").write_text("from ..low.a import X\nfrom needlepoint import low\n")
    table = tmp_path / "layers.py"
    table.write_text('LAYERS: list = [("low", ("needlepoint.low",)), ("high", ("needlepoint.high",))]\n')
    arch = script.read_architecture(package, table)
    assert arch.edges == {("high", "low"): 3}
    assert [(layer.name, layer.modules) for layer in arch.layers] == [("low", 3), ("high", 3)]

    table.write_text('LAYERS = [("high", ("needlepoint.high",)), ("low", ("needlepoint.low",))]\n')
    drawing = script.draw(script.read_architecture(package, table))
    try:
        height = {name: y for name, (_, y) in drawing.boxes.items()}
        assert [(a, b) for a, b, _, _ in drawing.arrows] == [("high", "low")] and height["high"] < height["low"]
    finally:
        from matplotlib import pyplot as plt

        plt.close(drawing.figure)


def test_the_committed_picture_shows_the_package_as_it_is(script: ModuleType) -> None:
    """docs/images/architecture.png was drawn from the layers and imports the package has now
    (the PNG carries them in a text chunk); after moving code, redraw it."""
    from PIL import Image

    with Image.open(PICTURE) as image:
        drawn = image.info.get(script.SUMMARY_KEY)
    assert drawn == script.read_architecture().summary(), (
        "docs/images/architecture.png is stale: run python scripts/draw_architecture.py"
    )


def test_the_architecture_page_names_every_folder_and_shows_the_picture() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert [f for f in folders() if f"`{f}/`" not in text] == []
    assert "](images/architecture.png)" in text and PICTURE.is_file()
    assert "scripts/draw_architecture.py" in text and "tests/test_package.py" in text and "tests/test_writers_only.py" in text


def _outside_code(text: str) -> Iterator[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def anchors(markdown: str) -> set[str]:
    """The heading anchors of a Markdown text, as GitHub makes them: lower case, punctuation other
    than `-` and `_` dropped, spaces as `-`, a repeated heading numbered; code blocks left out."""
    found: set[str] = set()
    for line in _outside_code(markdown):
        if match := re.match(r"#{1,6}\s+(.*)", line):
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1).strip())
            slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
            candidate, n = slug, 0
            while candidate in found:
                n += 1
                candidate = f"{slug}-{n}"
            found.add(candidate)
    return found


def test_the_anchor_rule_matches_githubs() -> None:
    page = (
        "# Scoring saved predictions: `needlepoint score`\n## `--dry-run`: the requests\n```\n# not a heading\n```\n## A\n## A\n"
    )
    assert anchors(page) == {"scoring-saved-predictions-needlepoint-score", "--dry-run-the-requests", "a", "a-1"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_pages_link_to_what_exists(page: Path) -> None:
    """Every relative link and image of the page leads to a file or folder of the repository, and a
    link to a heading (`page.md#heading`) to a heading of that page."""
    broken = []
    for line in _outside_code(page.read_text(encoding="utf-8")):
        for target in re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(target)
            elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text(encoding="utf-8")):
                broken.append(target)
    assert broken == []


CITED = re.compile(r"`((?:src|tests|scripts|docs|examples|perf|\.ci)/[\w./-]*)`")
MODULE = re.compile(r"`([\w/]+\.py)`")


def _module_exists(path: str) -> bool:
    """`core/files.py`, `mc_bench/agentic.py` (inside src/needlepoint or its benchmarks), or a
    bare `files.py` somewhere in the package, the tests or the scripts."""
    if "/" in path:
        return any((root / path).is_file() for root in (REPO, REPO / "src", PACKAGE, PACKAGE / "benchmarks"))
    return any(next(root.rglob(path), None) for root in (PACKAGE, REPO / "tests", REPO / "scripts", REPO / "perf"))


@pytest.mark.parametrize(
    "page",
    [REPO / "README.md", REPO / "CONTRIBUTING.md", PAGE, REPO / "docs" / "evaluating.md"],
    ids=lambda p: p.relative_to(REPO).as_posix(),
)
def test_the_pages_cite_files_that_exist(page: Path) -> None:
    """A path in backticks (`tests/test_package.py`, `core/files.py`, `runner.py`) names a file or
    folder of the repository or of src/needlepoint as it is now, not as it was before a move, and a
    test named in backticks (`test_every_module_imports`) exists."""
    text = page.read_text(encoding="utf-8")
    missing = [p for p in CITED.findall(text) if not (REPO / p).exists()]
    missing += [p for p in MODULE.findall(text) if not _module_exists(p)]
    tests = {
        name for path in (REPO / "tests").rglob("test_*.py") for name in re.findall(r"^def (test_\w+)", path.read_text(), re.M)
    }
    missing += [name for name in re.findall(r"`(test_\w+)`", text) if name not in tests]
    assert missing == []

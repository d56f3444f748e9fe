"""`needlepoint build mm_niah`: MM-NIAH-style sets from an interleaved corpus (docs/build-mm-niah.md).

corpus.py reads OBELICS-format shards, tokens.py counts tokens (cl100k_base, InternVL-1.5 tiles),
needles.py makes the needles, haystack.py gathers and writes one document, builder.py runs the
cells and writes the manifest, blink.py reads BLINK for reasoning-image, cli.py holds the flags.
"""

from pathlib import Path

BUILD_TASKS = ("retrieval-text", "retrieval-image", "counting-text", "counting-image", "reasoning-text", "reasoning-image")
MANIFEST = "build_manifest.json"
SPOOL = ".haystack.spool"
_BUILD_ENTRIES = frozenset(("annotations", "images", SPOOL))


def looks_like_leftover(folder: Path) -> bool:
    """Whether a folder without a manifest is what an interrupted build of an older needlepoint
    left (which wrote in place): only annotations/, images/ and the haystack spool, with the spool
    or the builder's own image folders present. The authors' release has none of these marks."""
    names = {p.name for p in folder.iterdir()}
    marked = SPOOL in names or (folder / "images" / "haystack").is_dir() or (folder / "images" / "needle").is_dir()
    return marked and names <= _BUILD_ENTRIES

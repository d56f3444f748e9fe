"""`needlepoint build mm_niah`: MM-NIAH-style sets from an interleaved corpus (docs/build-mm-niah.md).

corpus.py reads OBELICS-format shards, tokens.py counts tokens (cl100k_base, InternVL-1.5 tiles),
needles.py makes the needles, haystack.py gathers and writes one document, builder.py runs the
cells and writes the manifest, blink.py reads BLINK for reasoning-image, cli.py holds the flags.
"""

BUILD_TASKS = ("retrieval-text", "retrieval-image", "counting-text", "counting-image", "reasoning-text", "reasoning-image")
MANIFEST = "build_manifest.json"

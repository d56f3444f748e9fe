"""The call cache's key on a long MM-NIAH-like conversation, without a release on disk: ms a call of
`conversation_key`, and each candidate digest alone on the same key input.

    PYTHONPATH=<tree>/src python perf/bench_call_key.py [--blocks 15] [--calls 200]

The conversation is 41 text pieces of 700 random words (about 186 KB) between 40 images, the shape
of a long document (perf/bench_mm_niah_stages.py times the same key stage on generated releases).
Prints medians (and min, max) over the blocks; run it under each tree to compare (the tree's key
version is printed). A digest whose module is missing (blake3 is not a dependency) is skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from needlepoint.core.conversation import Conversation


def _conversation() -> Conversation:
    from needlepoint.core.conversation import Conversation, ImageRef, Message

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    parts: list[str | ImageRef] = []
    for i in range(41):
        parts.append(" ".join(rng.choice(words) for _ in range(700)))
        if i < 40:
            parts.append(ImageRef(f"obelics/{i:05d}.jpg", Path(f"/data/obelics/{i:05d}.jpg")))
    return Conversation([Message("user", parts)])


def _ms(fn: Callable[[], object], blocks: int, calls: int) -> tuple[float, float, float]:
    """(median, min, max) ms a call over `blocks` blocks of `calls` calls."""
    per = [timeit.timeit(fn, number=calls) / calls * 1e3 for _ in range(blocks)]
    return statistics.median(per), min(per), max(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200)
    ns = ap.parse_args()
    from needlepoint.core.conversation import Generation
    from needlepoint.core.files import json_line
    from needlepoint.solvers.calls import _KEY_VERSION, _part, conversation_key

    conversation = _conversation()
    generation = Generation()
    messages = [[m.role, [_part(p) for p in m.parts]] for m in conversation.messages]
    raw = json_line([_KEY_VERSION, "chat", "model", "bench", messages, generation.to_dict()])  # what key_of digests
    rows: list[tuple[str, Callable[[], object]]] = [
        (f"conversation_key (key version {_KEY_VERSION})", lambda: conversation_key("model", "bench", conversation, generation)),
        ("sha256", lambda: hashlib.sha256(raw).hexdigest()),
        ("sha1", lambda: hashlib.sha1(raw).hexdigest()),
        ("blake2b (20 bytes)", lambda: hashlib.blake2b(raw, digest_size=20).hexdigest()),
    ]
    try:
        import blake3  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pass
    else:
        rows.append(("blake3", lambda: blake3.blake3(raw).hexdigest()))
    print(f"key input: {len(raw) / 1000:.0f} KB")
    for name, fn in rows:
        median, low, high = _ms(fn, ns.blocks, ns.calls)
        print(f"{name:36s} median {median:.4f} ms (min {low:.4f}, max {high:.4f})")


if __name__ == "__main__":
    main()

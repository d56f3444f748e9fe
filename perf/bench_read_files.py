"""Time the reads of a run's files in this process: MM-NIAH's load of a release, and a run's records
read back, by this tree and (--old-src) another one, interleaved.

    python perf/bench_read_files.py --data DIR [--records FILE] [--small N] [--rounds 3] [--old-src DIR]

DIR is an MM-NIAH release folder (e.g. the one perf/bench_mm_niah_memory.py writes with `--sizes
800 --tokens 65000 --images-per-doc 40 --docs 50`); FILE a records.jsonl (e.g. of a run that
script made). Each round runs each tree in a fresh child process (`PYTHONPATH=<tree>`) that times
`load_release` of every task of the val split and `store.read_records` of FILE, one after the other.
With --small N the records read are N short ones instead (about 2.2 KB, Ref-Adv-s-like), made
from FILE's first record with what it sent cut to one image description and a 540-character text.
Prints seconds per round and tree, as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from measure import REPO, with_bytecode

CHILD = """
import json, sys, time
from pathlib import Path
from needlepoint.benchmarks.mm_niah.aggregate import TASKS
from needlepoint.benchmarks.mm_niah.data import load_release
from needlepoint.core.store import read_records
data, records = sys.argv[1], sys.argv[2]
t = time.perf_counter(); samples = load_release(Path(data), "val", list(TASKS))[0]; load = time.perf_counter() - t
read = n = None
if records:
    t = time.perf_counter(); n = len(read_records(Path(records))); read = time.perf_counter() - t
print(json.dumps({"samples": len(samples), "load_s": load, "records": n, "read_s": read}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="an MM-NIAH release folder")
    parser.add_argument("--records", type=Path, help="a run's records.jsonl")
    parser.add_argument("--small", type=int, help="read N short records made from FILE's first one instead")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old-src", type=Path, help="another tree's src/ (e.g. an export of an earlier commit)")
    ns = parser.parse_args()
    if ns.small and ns.records:
        ns.records = _short_records(ns.records, ns.small)
    trees = [("this tree", REPO / "src"), *([("old", ns.old_src.resolve())] if ns.old_src else [])]
    with_bytecode(*(src for _, src in trees))
    small = f" --small {ns.small}" if ns.small else ""
    print(f"command: python perf/bench_read_files.py --data {ns.data} --records FILE{small} --rounds {ns.rounds}\n")
    print("| round | source | samples | load_release (s) | records | read_records (s) |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in range(1, ns.rounds + 1):
        for label, src in reversed(trees):  # the old tree first in each round
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(ns.data), str(ns.records or "")],
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src)},
                capture_output=True,
                text=True,
                check=True,
            )
            got = json.loads(out.stdout)
            read = "" if got["read_s"] is None else f"{got['read_s']:.3f}"
            print(f"| {r} | {label} | {got['samples']} | {got['load_s']:.3f} | {got['records'] or ''} | {read} |")
    if ns.small and ns.records:
        shutil.rmtree(ns.records.parent)
    return 0


def _short_records(records: Path, n: int) -> Path:
    """A file of `n` short records: `records`' first one, each turn's `sent` cut to one image and
    a 540-character text, under new ids."""
    with records.open("rb") as fh:
        record = json.loads(fh.readline())
    for turn in record.get("turns", []):
        image = {"type": "image", "path": "images/x.jpg", "sha256": "ab" * 32, "width": 640, "height": 480, "bytes": 50000}
        turn["sent"] = [{"role": "user", "content": [image, {"type": "text", "text": "Find the object described. " * 20}]}]
    out = Path(tempfile.mkdtemp(prefix="np-read-files-")) / "records.jsonl"
    with out.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({**record, "id": f"s{i}"}) + "\n")
    return out


if __name__ == "__main__":
    raise SystemExit(main())

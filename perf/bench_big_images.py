"""Peak memory of `needlepoint eval` on 144-megapixel PNGs with --max-image-side 1024.

    python perf/bench_big_images.py [--samples 16] [--side 12000] [--old-src DIR]

Writes a Ref-Adv-s JSONL release whose every sample is a 12000x12000 RGB PNG (a colour gradient
with a grid of rectangles and a little noise: about 144 megapixels, a file of a few MB), each
sample its own file (hard links of one file: the names differ, so nothing is served from a cache).
Then runs the command a user types, report included, at the default concurrency (32), against the
simulated server answering at once, and reads the command's peak RSS with os.wait4:

    needlepoint eval ref_adv_s --data rows.jsonl --images images/ --box-format abs_xyxy \\
        --model m --api-url URL --out RUN --max-image-side 1024 --no-progress

The server notes the pixel size of every image it receives (printed), and the thumbnails are
counted. With --old-src, the same command also runs on another source tree (e.g. an
export of an earlier commit) for a before/after figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measure import with_bytecode


def make_png(path: Path, side: int) -> None:
    """A side x side RGB PNG: gradients, a grid of rectangles, light noise in every eighth row."""
    import numpy as np
    from PIL import Image

    ramp = np.linspace(0, 255, side, dtype=np.float32)
    arr = np.empty((side, side, 3), np.uint8)
    arr[..., 0] = ramp[None, :].astype(np.uint8)
    arr[..., 1] = ramp[:, None].astype(np.uint8)
    arr[..., 2] = 128
    step = max(side // 12, 1)
    for i in range(0, side, step):
        arr[i : i + step // 3, i : i + step // 2] = (230, 40, 40)
    rng = np.random.default_rng(0)
    arr[::8] ^= rng.integers(0, 8, (arr[::8].shape), dtype=np.uint8)
    Image.fromarray(arr).save(path, format="PNG", compress_level=6)


def run(exe: list[str], env: dict[str, str], argv: list[str]) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    child = subprocess.Popen([*exe, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--side", type=int, default=12000)
    parser.add_argument("--old-src", type=Path, help="another source tree's src/ to run the same command with")
    ns = parser.parse_args()
    with_bytecode(Path(__file__).resolve().parents[1] / "src", *([ns.old_src] if ns.old_src else []))
    with tempfile.TemporaryDirectory() as tmp, SizeServer(default='{"bboxes": [[100, 100, 300, 300]]}') as server:
        root = Path(tmp)
        images = root / "images"
        images.mkdir()
        t0 = time.perf_counter()
        # In a child process: a child's ru_maxrss starts at its parent's peak (the memory it is
        # forked from), so this process must never hold the 432 MB of pixels itself.
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); from bench_big_images import make_png; "
        subprocess.run(
            [sys.executable, "-c", code + f"from pathlib import Path; make_png(Path({str(images / 'big-0.png')!r}), {ns.side})"],
            check=True,
        )
        for i in range(1, ns.samples):
            os.link(images / "big-0.png", images / f"big-{i}.png")
        size_mb = (images / "big-0.png").stat().st_size / 1e6
        print(
            f"data: {ns.samples} PNGs of {ns.side}x{ns.side} ({ns.side * ns.side / 1e6:.0f} Mpx, {size_mb:.1f} MB file) "
            f"in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
        rows = root / "rows.jsonl"
        with rows.open("w") as fh:
            for i in range(ns.samples):
                fh.write(
                    json.dumps(
                        {
                            "image": f"big-{i}.png",
                            "normal_caption": f"the red block (case {i})",
                            "solution": [0, 0, 500, 500],
                            "width": ns.side,
                            "height": ns.side,
                        }
                    )
                    + "\n"
                )
        trees = [("this tree", str(Path(__file__).resolve().parents[1] / "src"))]
        if ns.old_src:
            trees.append((f"{ns.old_src}", str(ns.old_src.resolve())))
        print(f"command: python perf/bench_big_images.py --samples {ns.samples} --side {ns.side}\n")
        print("| source | samples | wall (s) | peak RSS (MB) | images sent at | thumbnails |")
        print("|---|---:|---:|---:|---|---:|")
        for label, src in trees:
            out = root / f"run-{len(label)}"
            argv = [
                "eval",
                "ref_adv_s",
                "--data",
                str(rows),
                "--images",
                str(images),
                "--box-format",
                "abs_xyxy",
                "--model",
                "m",
                "--api-url",
                server.url,
                "--out",
                str(out),
                "--max-image-side",
                "1024",
                "--no-progress",
            ]
            env = {**os.environ, "PYTHONPATH": src}
            wall, rss, rc = run([sys.executable, "-m", "needlepoint.cli"], env, argv)
            if rc != 0:
                raise SystemExit(f"{label}: the command failed (exit {rc})")
            records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
            bytes_sent = sorted({r["turns"][0]["request_bytes"] for r in records})
            thumbs = len(list((out / "report" / "thumbs").glob("*.jpg")))
            sizes = ", ".join(f"{w}x{h}" for w, h in sorted(set(server.sizes)))
            server.sizes.clear()
            print(
                f"| {label} | {len(records)} | {wall:.1f} | {rss:.0f} | {sizes} (request {bytes_sent[0] / 1e6:.2f}-"
                f"{bytes_sent[-1] / 1e6:.2f} MB) | {thumbs} |"
            )
    return 0


def _server_class():  # type: ignore[no-untyped-def]
    from needlepoint.models.simulated import SimulatedServer

    class SizeServer(SimulatedServer):
        """The simulated server, noting the pixel size of every image it receives."""

        sizes: list[tuple[int, int]] = []

        async def _chat(self, request):  # type: ignore[no-untyped-def]
            import base64

            from needlepoint.core.images import jpeg_header

            body = await request.json()
            for m in body.get("messages", []):
                for part in m.get("content") if isinstance(m.get("content"), list) else []:
                    if part.get("type") == "image_url":
                        head = jpeg_header(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))
                        self.sizes.append(head[:2] if head else (0, 0))
            return await super()._chat(request)

    return SizeServer


SizeServer = _server_class()


if __name__ == "__main__":
    sys.exit(main())

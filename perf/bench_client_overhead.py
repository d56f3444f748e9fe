"""needlepoint's request pipeline against a raw aiohttp loop doing the same base64 and JSON work.

    python perf/bench_client_overhead.py [--samples 1600] [--in-flight 64,256] [--rounds 3]

Both run in this process, one after the other, against one minimal HTTP server in its own process
(it reads each request body and answers a fixed chat completion at once, so it costs little and
is the same for both). The data is a synthetic Ref-Adv-s parquet release written the way the
Hugging Face release is (row groups of 1,132 rows, pyarrow's default pages), 640x480 JPEGs.

- raw: for each sample, base64 of its JPEG bytes by the standard library (read from the parquet
  file beforehand, so the raw loop does not even pay for reading), the request body (json.dumps
  of the message, the base64 spliced in as needlepoint does), an aiohttp POST, json.loads of the
  answer. `--in-flight` workers. The reference the target names.
- raw, pybase64: the same loop with needlepoint's base64 encoder (pybase64, byte for byte the
  standard library's, many times faster): the stricter reference, what is left of needlepoint's
  own pipeline once both encode alike.
- raw reading parquet: the raw loop (standard base64), but each image read from the parquet
  file as needlepoint reads it (`needlepoint.core.parquet.ParquetTable`), the data access any tool on
  this release must do.
- needlepoint: `runner.run` with the Ref-Adv-s benchmark, the OpenAI-compatible client and a run
  folder: images read from the parquet file as requests are built, the answer parsed, the box
  judged and each record written to records.jsonl before the next sample is taken. Timed from
  the start of `runner.run` to its end (the samples' metadata is loaded before, as the raw loop's
  images are read before).

- needlepoint, images in memory (a diagnostic): the same run with each sample's image handed
  over from memory, as the raw loop's are: what needlepoint's own pipeline costs beside reading
  the file.

Printed per in-flight setting and loop: requests/s (median of --rounds, interleaved, and the
range), this process's CPU time per request, and needlepoint's rate over the loop's (with images
read from the file, and with images in memory). The target is needlepoint >= 80% of raw.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROW_GROUP = 1132
REPLY = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": '```json\n{"bboxes": [[100, 100, 300, 260]]}\n```'},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()

SERVER = r"""
import asyncio, sys
REPLY = sys.stdin.buffer.read()
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(REPLY)
MODELS = b'{"object": "list", "data": []}'
MODELS_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(MODELS)

class Http(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf, self.need, self.get = transport, bytearray(), None, False
    def data_received(self, data):
        self.buf += data
        while True:
            if self.need is None:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buf[:end]).lower()
                self.get = head.startswith(b"get")
                i = head.find(b"content-length:")
                self.need = end + 4 + (int(head[i + 15:].split(b"\r\n")[0]) if i >= 0 else 0)
            if len(self.buf) < self.need:
                return
            del self.buf[:self.need]
            self.need = None
            self.t.write(MODELS_HEAD + MODELS if self.get else HEAD + REPLY)

async def main():
    server = await asyncio.get_running_loop().create_server(Http, "127.0.0.1", 0, backlog=1024)
    print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def make_release(folder: Path, n: int, row_group: int = ROW_GROUP, distinct: int = 64) -> Path:
    """A Ref-Adv-s parquet release of n rows: `distinct` real 640x480 JPEGs (bench_ref_adv_harness's
    textured images), each row's made unique by 4 trailing bytes (after the JPEG's end marker), so
    parquet stores every image in full; written with pyarrow's defaults, as `datasets` writes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(HERE))
    from bench_ref_adv_harness import _image

    rng = np.random.default_rng(0)
    jpegs = [_image(rng, i) for i in range(distinct)]
    rows = [
        {
            "image": {"bytes": jpegs[i % distinct] + i.to_bytes(4, "big"), "path": f"{i:012d}.jpg"},
            "row_idx": i,
            "file_name": f"{i:012d}.jpg",
            "normal_caption": f"the second cup from the right (case {i})",
            "solution": [100.0, 100.0, 300.0, 260.0],
            "width": 640,
            "height": 480,
            "image_source": "coco_val2017",
            "human_authored": True,
            "use_negation": False,
            "distractors": 2 + i % 7,
        }
        for i in range(n)
    ]
    (folder / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "data" / "train-00000-of-00001.parquet", row_group_size=row_group)
    return folder


async def raw_loop(
    url: str,
    jpegs: list[bytes] | None,
    in_flight: int,
    data: Path | None = None,
    encode: Callable[[bytes], bytes] = base64.b64encode,
) -> None:
    """The reference: base64 (`encode`), body, POST, parse; nothing else. With `data` instead of
    `jpegs`, each image is read from the parquet file as needlepoint reads it (its ParquetTable)."""
    import aiohttp

    from needlepoint.core.parquet import ParquetTable

    table = ParquetTable(data / "data" / "train-00000-of-00001.parquet") if data is not None else None
    count = table.num_rows if table is not None else len(jpegs or [])
    queue = iter(range(count))
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), headers=headers) as session:

        async def worker() -> None:
            for i in queue:
                if table is not None:
                    jpeg = table.cached(i) or await asyncio.get_running_loop().run_in_executor(None, table.image_bytes, i)
                else:
                    jpeg = jpegs[i]  # type: ignore[index]
                b64 = encode(jpeg)
                head, tail = (
                    json.dumps(
                        {
                            "model": "m",
                            "messages": [
                                {
                                    "role": "user",
                                    "content": [
                                        {
                                            "type": "text",
                                            "text": f"Locate the object (case {i}). Report bbox coordinates in JSON format.",
                                        },
                                        {"type": "image_url", "image_url": {"url": "@@"}},
                                    ],
                                }
                            ],
                            "temperature": 0.0,
                            "top_p": 1.0,
                            "max_tokens": 1024,
                            "seed": 7,
                        }
                    )
                    .encode()
                    .split(b"@@")
                )
                body = head + b"data:image/jpeg;base64," + b64 + tail
                async with session.post(url + "/chat/completions", data=body) as resp:
                    raw = await resp.read()
                json.loads(raw)["choices"][0]["message"]["content"]

        await asyncio.gather(*(worker() for _ in range(in_flight)))


def needlepoint_run(
    url: str, data: Path, run_dir: Path, in_flight: int, jpegs: list[bytes] | None = None
) -> tuple[int, float, float]:
    """needlepoint's pipeline on the release: the records written, and the wall and CPU seconds of
    `runner.run` alone. The samples' metadata is loaded (a fresh load each time) before the clock
    starts, as the raw loop's images are; the images are read from the parquet file during the run."""
    from needlepoint.benchmarks.ref_adv import RefAdv
    from needlepoint.core.conversation import Generation
    from needlepoint.core.store import RunStore
    from needlepoint.models.openai_compat import OpenAICompatModel
    from needlepoint.run.runner import RunOptions, run
    from needlepoint.solvers import make_solver

    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(data)
    if jpegs is not None:  # the diagnostic variant: each sample's image served from memory, as the raw loop's
        for sample in samples:
            row = sample.image.loader.row
            sample.image = replace(sample.image, loader=_InMemory(jpegs[row]))
    store = RunStore.open(run_dir, {"hash": "bench", "identity": {}})
    model = OpenAICompatModel("m", [url])
    solver = make_solver("default", bench)
    options = RunOptions(concurrency=in_flight, show_progress=False)
    clock: list[float] = []

    async def go() -> None:
        try:
            clock.extend((time.perf_counter(), time.process_time()))
            await run(bench, samples, model, store, Generation(), options, solver)
            clock.extend((time.perf_counter(), time.process_time()))
        finally:
            await model.aclose()

    try:
        asyncio.run(go())
    finally:
        store.close()
    return (run_dir / "records.jsonl").read_bytes().count(b"\n"), clock[2] - clock[0], clock[3] - clock[1]


class _InMemory:
    """An image loader whose bytes are in memory (`cached()` hands them over, as a parquet row read ahead)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __call__(self) -> bytes:
        return self.data

    def cached(self) -> bytes:
        return self.data


LOOPS = ("raw", "raw, pybase64", "raw reading parquet", "needlepoint", "needlepoint, images in memory")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1600)
    parser.add_argument("--in-flight", default="64,256")
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()
    in_flight = [int(v) for v in ns.in_flight.split(",")]
    import pyarrow.parquet as pq
    import pybase64

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(REPLY)
    server.stdin.close()
    url = server.stdout.readline().decode().strip()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = make_release(Path(tmp) / "release", ns.samples)
            column = pq.read_table(data / "data" / "train-00000-of-00001.parquet", columns=["image"]).column(0)
            jpegs = [v["bytes"] for v in column.to_pylist()]
            del column
            results: dict[tuple[int, str], list[tuple[float, float]]] = {}
            for r in range(ns.rounds):
                for k in in_flight:
                    for name in LOOPS:
                        cpu, t0 = time.process_time(), time.perf_counter()
                        if name == "raw":
                            asyncio.run(raw_loop(url, jpegs, k))
                        elif name == "raw, pybase64":
                            asyncio.run(raw_loop(url, jpegs, k, encode=pybase64.b64encode))
                        elif name == "raw reading parquet":
                            asyncio.run(raw_loop(url, None, k, data))
                        done, wall, cpu = len(jpegs), time.perf_counter() - t0, time.process_time() - cpu
                        if name == "needlepoint":
                            done, wall, cpu = needlepoint_run(url, data, Path(tmp) / f"run-{r}-{k}", k)
                        elif name == "needlepoint, images in memory":
                            done, wall, cpu = needlepoint_run(url, data, Path(tmp) / f"run-mem-{r}-{k}", k, jpegs)
                        if done != ns.samples:
                            raise SystemExit(f"{name} finished {done} of {ns.samples} requests")
                        results.setdefault((k, name), []).append((done / wall, cpu / done * 1e6))
                        print(
                            f"round {r + 1} in flight {k} {name}: {done / wall:.0f} requests/s, {cpu / done * 1e6:.0f} us CPU each",
                            file=sys.stderr,
                            flush=True,
                        )
    finally:
        server.terminate()
        server.wait()
    print(
        f"command: python perf/bench_client_overhead.py --samples {ns.samples} --in-flight {ns.in_flight} --rounds {ns.rounds}\n"
    )
    print(
        "| in flight | loop | requests/s | CPU per request (us) | needlepoint / this loop | needlepoint, images in memory / this loop |"
    )
    print("|---:|---|---:|---:|---:|---:|")

    def rate(k: int, name: str) -> float:
        return statistics.median(x for x, _ in results[(k, name)])

    for k in in_flight:
        for name in LOOPS:
            runs = results[(k, name)]
            rates = [x for x, _ in runs]
            ratios = (
                f"{rate(k, 'needlepoint') / rate(k, name):.2f} | {rate(k, 'needlepoint, images in memory') / rate(k, name):.2f}"
            )
            print(
                f"| {k} | {name} | {statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f}) "
                f"| {statistics.median(c for _, c in runs):.0f} | {ratios if name.startswith('raw') else ' | '} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

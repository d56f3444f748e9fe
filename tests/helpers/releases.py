"""Releases on disk, the simulated model's scripts for them, and run settings against local servers."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.core.drawing import render


def prompt_key(sample: Any, bench: RefAdv | None = None) -> str:
    """The text the simulated server looks a sample's answers up by."""
    text: str = (bench or RefAdv(box_format="abs_xyxy")).prompt(sample).messages[0].text
    return text


def write_jsonl_release(folder: Path, rows: list[dict[str, Any]], fmt: str = "PNG") -> Path:
    """The JSONL + images folder layout of the same rows; images re-rendered in `fmt`."""
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    with (folder / "data.jsonl").open("w", encoding="utf-8") as fh:
        for r in rows:
            name = r["file_name"].rsplit(".", 1)[0] + "." + fmt.lower()
            shapes = [(b, "red", "square") for b in r["_boxes"]]
            (images / name).write_bytes(render(int(r["width"]), int(r["height"]), shapes, fmt=fmt))
            public = {k: v for k, v in r.items() if not k.startswith("_") and k != "image"}
            fh.write(json.dumps({**public, "image": name}) + "\n")
    return folder


def small_niah(folder: Path) -> tuple[Path, dict[str, Any], dict[str, list[Any]]]:
    """The MM-NIAH demo set at 6 documents per task (the full demo set is slow on two cores): the
    folder, the run options and the simulated model's script (as the demo's `build` returns them)."""
    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
    from needlepoint.benchmarks.mm_niah.demo import simulated_answer, write_release
    from needlepoint.models.simulated import script_key

    write_release(folder, per_task=6)
    bench = MmNiah(split="val")
    rng = random.Random(5)
    script = {
        script_key(bench.prompt(s)): [simulated_answer(s.task, s.answer, s.context_length, rng)] for s in bench.load(folder)
    }
    return folder, {"split": "val"}, script


def good_ref_reply(row: dict[str, Any]) -> str:
    """A Ref-Adv-s reply naming the row's ground-truth box, fenced as models write it."""
    fence = "`" * 3
    return f"{fence}json\n" + json.dumps([{"bbox_2d": row["solution"], "label": "target"}]) + f"\n{fence}"


def ref_run_config(data: Path, urls: list[str], out: Path, **kw: Any) -> Any:
    """A quiet Ref-Adv-s RunConfig against local servers (fast retries, no report); `kw` overrides."""
    from needlepoint.core.config import RunConfig

    settings: dict[str, Any] = {
        "benchmark": "ref_adv_s",
        "data": data,
        "model": "sim-model",
        "api_urls": urls,
        "options": {"box_format": "abs_xyxy"},
        "generation": {"timeout_s": 2.0},
        "concurrency": 4,
        "out": out,
        "max_retries": 2,
        "backoff_base_s": 0.01,
        "show_progress": False,
        "report": False,
    }
    settings.update(kw)
    return RunConfig(**settings)


def scripted_ref_release(
    tmp_path: Path, n: int = 8, seed: int = 3
) -> tuple[Path, list[dict[str, Any]], list[str], dict[str, list[Any]]]:
    """An n-row Ref-Adv-s release in `tmp_path`/data, with its rows, each sample's prompt key and
    the demo's script for them (right answers and the demo's scripted mistakes)."""
    from needlepoint.benchmarks.ref_adv.demo import answers_for, make_rows, write_release

    rows = make_rows(n, seed=seed)
    data = write_release(tmp_path / "data", rows)
    keys = [prompt_key(s) for s in RefAdv(box_format="abs_xyxy").load(data)]
    script = {k: answers_for(r, i) for i, (k, r) in enumerate(zip(keys, rows))}
    return data, rows, keys, script


def demo_config(plans: dict[str, Any], server: Any, name: str, out: Path, **kw: Any) -> Any:
    """The RunConfig of a run of the `demo_sets` fixture's set `name` against its server: 4 samples
    in flight, no progress line, `kw` for the rest."""
    from needlepoint.core.config import RunConfig
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME

    data, options = plans[name]
    kw.setdefault("concurrency", 4)
    return RunConfig(
        benchmark=name,
        data=data,
        model=SIMULATED_MODEL_NAME,
        api_urls=[server.url],
        options=options,
        out=out,
        show_progress=False,
        **kw,
    )

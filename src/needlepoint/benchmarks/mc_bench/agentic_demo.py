"""The demo of MC-Bench's agentic baseline: the demo set answered by `--solver agentic`, with the
simulated model as reasoner and as a served localizer (`vlm:`), on the demo's one local server.

The simulated reasoner names the ground-truth instances of each sample as phrases, with a fixed
pattern of mistakes (prose first, which triggers the repair turn; a wrong group; a missed image;
an instance named on a negative image); the simulated localizer boxes each phrase at its
ground-truth box (norm_1000_xyxy), jittered for some, and answers one phrase with no box at all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mc_bench.agentic import Target, localizer_request, reasoner_prompt
from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.core.geometry import BoxFormat, xywh_to_xyxy

__all__ = ["LOCALIZER_NAME", "agentic_script", "agentic_config"]

LOCALIZER_NAME = "needlepoint-simulated-localizer"
BOX_FORMAT: BoxFormat = "norm_1000_xyxy"
MISTAKES = {3: "prose", 6: "wrong_group", 8: "missed_image", 11: "named_on_negative", 14: "no_box", 17: "jitter"}


def _norm(box: list[float], size: tuple[float, float], shift: float = 0.0) -> list[int]:
    w, h = size
    return [
        round((box[0] + shift) / w * 1000),
        round((box[1] + shift) / h * 1000),
        round((box[2] + shift) / w * 1000),
        round((box[3] + shift) / h * 1000),
    ]


def agentic_script(data: Path) -> dict[str, list[Any]]:
    """The simulated reasoner's and localizer's replies for the demo set in `data`, keyed as the
    simulated server looks them up (`script_key`)."""
    from needlepoint.models.simulated import script_key

    bench = McBench(box_format=BOX_FORMAT)
    samples = bench.load(data)
    truth = samples.truth
    assert truth is not None
    script: dict[str, list[Any]] = {}
    for i, sample in enumerate(samples):
        mistake = MISTAKES.get(i)
        located: list[tuple[Target, list[float]]] = []
        for position, image_id in enumerate(sample.image_ids):
            boxes = [b for b in truth.boxes if b.image_id == image_id]
            if mistake == "missed_image" and position == 1:
                continue
            for k, b in enumerate(boxes):
                group = 3 - b.category_id if mistake == "wrong_group" and b.category_id in (1, 2) else b.category_id
                located.append(
                    (Target(image=position, group=group, phrase=f"shape {k + 1} in image {position + 1}"), xywh_to_xyxy(b.bbox))
                )
        if mistake == "named_on_negative":
            w, h = sample.geometry.sizes[0]
            located.append((Target(image=0, group=1, phrase="the odd shape in the corner"), [0.0, 0.0, w / 4, h / 4]))
        per_image: dict[str, list[dict[str, Any]]] = {"image_1": [], "image_2": []}
        for t, _ in located:
            per_image[f"image_{t['image'] + 1}"].append({"group": t["group"], "phrase": t["phrase"]})
        answer = "```json\n" + json.dumps(per_image) + "\n```"
        replies = ["The matching shapes are the ones of the described colour.", answer] if mistake == "prose" else [answer]
        script[script_key(reasoner_prompt(sample))] = replies
        for k, (t, box) in enumerate(located):
            size = sample.geometry.sizes[t["image"]]
            if mistake == "no_box" and k == 0:
                reply = "I cannot find that object."
            else:
                reply = json.dumps({"bbox_2d": _norm(box, size, 12.0 if mistake == "jitter" else 0.0)})
            script[script_key(localizer_request(sample, t, BOX_FORMAT))] = [reply]
    return script


def agentic_config(data: Path, options: dict[str, Any], server: Any, runs: Path) -> Any:
    """The RunConfig of the demo set in `data` with `--solver agentic` against the demo's simulated
    `server` (its script and model list are extended for the reasoner and the localizer)."""
    from needlepoint.core.config import RunConfig
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME

    server.script = {**server.script, **agentic_script(data)}
    if LOCALIZER_NAME not in server.models:
        server.models = (*server.models, LOCALIZER_NAME)
    config = RunConfig(
        benchmark="mc_bench",
        data=data,
        model=SIMULATED_MODEL_NAME,
        api_urls=[server.url],
        options={"box_format": BOX_FORMAT},
        solver="agentic",
        solver_options={"localizer": f"vlm:{LOCALIZER_NAME}", "localizer_url": [server.url]},
        out=runs / "mc_bench_agentic",
    )
    print("MC-Bench, --solver agentic: the simulated model as reasoner and as localizer")
    return config

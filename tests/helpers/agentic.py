"""MC-Bench's agentic solver in the tests: the simulated reasoner's and localizer's scripts for a
generated release (each sample's ground-truth instances as phrases, each phrase's box), and the
command line that runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mc_bench.agentic import Target, localizer_request, reasoner_prompt
from needlepoint.benchmarks.mc_bench.benchmark import McBench, McSample
from needlepoint.contract.base import Dataset
from needlepoint.core.geometry import BoxFormat, xywh_to_xyxy
from needlepoint.models.simulated import script_key

REASONER, LOCALIZER = "sim/reasoner", "sim/localizer"
FMT: BoxFormat = "norm_1000_xyxy"


def gt_targets(samples: Any, sample: McSample) -> list[tuple[Target, list[float]]]:
    """Every GT instance of a sample as a target named after its annotation, with its xyxy box
    (`samples`: the Dataset that load returned, which carries the ground truth)."""
    assert samples.truth is not None
    out = []
    for position, image_id in enumerate(sample.image_ids):
        for b in samples.truth.boxes:
            if b.image_id == image_id:
                out.append((Target(image=position, group=b.category_id, phrase=f"the shape {b.id}"), xywh_to_xyxy(b.bbox)))
    return out


def norm_1000(box: list[float], size: tuple[float, float]) -> list[float]:
    """A pixel xyxy box in the 0-1000 scale of an image of `size` (width, height)."""
    w, h = size
    return [round(box[0] / w * 1000, 4), round(box[1] / h * 1000, 4), round(box[2] / w * 1000, 4), round(box[3] / h * 1000, 4)]


def reasoner_reply(targets: list[Target]) -> str:
    """The reasoner's fenced JSON naming `targets` per image."""
    per_image: dict[str, list[dict[str, Any]]] = {"image_1": [], "image_2": []}
    for t in targets:
        per_image[f"image_{t['image'] + 1}"].append({"group": t["group"], "phrase": t["phrase"]})
    return "```json\n" + json.dumps(per_image) + "\n```"


def scripts(bench: McBench, samples: Dataset[McSample]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """The reasoner's script (each sample's GT instances as phrases) and the localizer's (each phrase's GT box)."""
    reasoner: dict[str, list[Any]] = {}
    localizer: dict[str, list[Any]] = {}
    for sample in samples:
        pairs = gt_targets(samples, sample)
        reasoner[script_key(reasoner_prompt(sample))] = [reasoner_reply([t for t, _ in pairs])]
        for t, box in pairs:
            size = sample.geometry.sizes[t["image"]]
            localizer[script_key(localizer_request(sample, t, FMT))] = [json.dumps({"bbox_2d": norm_1000(box, size)})]
    return reasoner, localizer


def agentic_args(folder: Path, reasoner_url: str, localizer_url: str, out: Path, *extra: str) -> list[str]:
    """`eval mc_bench --solver agentic` with the VLM localizer, one retry, no progress line."""
    return [
        "eval",
        "mc_bench",
        "--data",
        str(folder),
        "--model",
        REASONER,
        "--api-url",
        reasoner_url,
        "--solver",
        "agentic",
        "--localizer",
        f"vlm:{LOCALIZER}",
        "--localizer-url",
        localizer_url,
        "--box-format",
        FMT,
        "--out",
        str(out),
        "--no-progress",
        "--max-retries",
        "1",
        *extra,
    ]

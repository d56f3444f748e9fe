"""Agreement between annotators who answered the same samples, and the human rows of a report.

Per pair of human runs of one benchmark, over the samples both answered (skipped and gold samples
left out): MC-Bench's image-level Cohen's kappa (target present in an image or not) and the F1 of
boxes matched one to one at IoU >= 0.5 (a maximum matching) that agree on the group, after each
sample's groups of one person are renamed to the other's as MC-Bench's corrected scorer regroups
(people number groups differently; they must still group alike); kappa is undefined (None) when
both give one label everywhere;
Ref-Adv-s's share of samples whose two boxes overlap at IoU >= 0.5; MM-NIAH's share of identical
answers (case and spacing ignored). Beside each annotator: the time per sample.

The report side (`human_rows`, `human_boards`): a human run is one whose model label starts with
`human:`; its board row stays as any run's, a "humans (mean of k)" row is added (MC-Bench's Table
2; empty, saying why, when the annotators had different plans, sample counts or confidence
settings), and a per-annotator board in the layout of MC-Bench's Table 9 shows each person's headline
numbers, time per sample, whether boxes carried confidences, and the pairwise agreement.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from needlepoint.benchmarks.mm_niah.grid import full_grid, measured_overall
from needlepoint.contract.boards import Board, BoardRow, PublishedRow, Run, at, obj, pct
from needlepoint.contract.registry import declaration
from needlepoint.core.assignment import linear_sum_assignment
from needlepoint.core.geometry import iou, iou_matrix
from needlepoint.core.records import Record
from needlepoint.core.store import RECORDS, read_records

__all__ = [
    "HUMAN_PREFIX",
    "PUBLISHED_HUMANS",
    "PairAgreement",
    "add_human_mean",
    "box_f1",
    "cohen_kappa",
    "human_boards",
    "is_human",
    "pair_agreement",
    "seconds_per_sample",
]

HUMAN_PREFIX = "human:"
MATCH_IOU = 0.5

# The papers' human rows, beside the per-annotator board with --with-published (label, cells).
# MC-Bench: appendix Table 9 (three volunteers) and Table 2 (their mean); Ref-Adv: the paper's
# human experts on a random subset; MM-NIAH: the paper's overall human row (report/published_data).
PUBLISHED_HUMANS: dict[str, list[tuple[str, dict[str, str]]]] = {
    "mc_bench": [
        ("Volunteer 1", {"Acc": "94.3", "AP50": "46.0"}),
        ("Volunteer 2", {"Acc": "92.2", "AP50": "42.8"}),
        ("Volunteer 3", {"Acc": "90.5", "AP50": "35.0"}),
        ("Humans (mean of 3)", {"Acc": "92.3", "AP50": "41.3"}),
    ],
    "ref_adv_s": [
        ("Human Expert (High)", {"Acc@0.5": "90.3"}),
        ("Human Expert (Medium)", {"Acc@0.5": "80.6"}),
    ],
    "mm_niah": [("Human", {"Overall": "98.9"})],
}
PUBLISHED_SOURCES = {
    "mc_bench": "MC-Bench (Xu et al., 2024), Tables 9 and 2",
    "ref_adv_s": "Ref-Adv paper, human experts",
    "mm_niah": "MM-NIAH paper (Wang et al., 2024), test set, overall",
}


def is_human(run: Run) -> bool:
    """Whether the run is a person's (model label `human:NAME`)."""
    return run.model.startswith(HUMAN_PREFIX)


def annotator(run: Run) -> str:
    """The person's name of a human run."""
    return run.model[len(HUMAN_PREFIX) :] if is_human(run) else run.model


def _human_facts(rec: Record) -> dict[str, Any]:
    solver = rec.get("solver")
    return solver if isinstance(solver, dict) else {}


def answered(records: dict[str, Record]) -> dict[str, Record]:
    """The records that count: answered, neither skipped nor a gold (training) sample."""
    out = {}
    for sid, rec in records.items():
        facts = _human_facts(rec)
        if facts.get("skipped") or facts.get("gold") or rec.get("error"):
            continue
        out[sid] = rec
    return out


def seconds_per_sample(records: dict[str, Record]) -> float | None:
    """Mean seconds a person spent per answered sample (None when no record says)."""
    times = [float(t) for r in answered(records).values() if isinstance(t := _human_facts(r).get("seconds"), int | float)]
    return sum(times) / len(times) if times else None


def has_confidences(run: Run) -> bool:
    """Whether the person gave a confidence per box (`--confidence`); without, every MC-Bench box
    scores 1.0 and AP50 cannot rank them."""
    return bool(run.identity.get("solver.confidence") or obj(run.config.get("solver_options")).get("confidence"))


# --- measures --------------------------------------------------------------------------------------


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Cohen's kappa of two raters' yes/no labels of the same items; None without items, and None
    (undefined, not 1.0) when chance agreement is 1: both raters give one and the same label
    everywhere, so there is no variation whose agreement beyond chance could be measured."""
    if len(a) != len(b):
        raise ValueError("cohen_kappa needs two label lists of one length")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    expected = pa * pb + (1 - pa) * (1 - pb)
    if expected == 1.0:
        return None
    return (observed - expected) / (1 - expected)


def matched_boxes(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    threshold: float = MATCH_IOU,
    groups: tuple[Sequence[int], Sequence[int]] | None = None,
) -> int:
    """How many boxes of `a` and `b` pair one to one at IoU >= threshold: a maximum matching
    (`scipy.optimize.linear_sum_assignment` on the pairs that qualify), never a greedy one that
    can pair the wrong two first. With `groups` (each box's group in `a` and in `b`), two boxes
    qualify only when their groups are equal too."""
    if not a or not b:
        return 0
    m = iou_matrix(a, b)
    ok = m >= threshold
    if groups is not None:
        ok &= np.equal.outer(np.asarray(groups[0]), np.asarray(groups[1]))
    if not ok.any():
        return 0
    rows, cols = linear_sum_assignment(-ok.astype(float))
    return int(ok[rows, cols].sum())


def box_f1(
    pairs: Sequence[
        tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]
        | tuple[Sequence[Sequence[float]], Sequence[Sequence[float]], tuple[Sequence[int], Sequence[int]]]
    ],
) -> float | None:
    """F1 of two people's boxes over images, `pairs` holding each image's (boxes of A, boxes of B)
    and, optionally, their groups (then a matched pair must agree on the group): 2 * matched /
    (boxes of A + boxes of B); None when neither drew a box."""
    total = sum(len(p[0]) + len(p[1]) for p in pairs)
    if total == 0:
        return None
    return 2 * sum(matched_boxes(p[0], p[1], groups=p[2] if len(p) > 2 else None) for p in pairs) / total


def _mc_boxes(rec: Record) -> list[tuple[int, int, list[float]]]:
    """A record's MC-Bench boxes as (image 0 or 1, group, xyxy box)."""
    out = []
    for box in rec.get("answer") or []:
        if isinstance(box, dict) and box.get("image") in (0, 1):
            group = box.get("group")
            out.append((int(box["image"]), group if isinstance(group, int) else 0, [float(v) for v in box["bbox"]]))
    return out


def regroup(a: Sequence[tuple[int, int, list[float]]], b: Sequence[tuple[int, int, list[float]]]) -> dict[int, int]:
    """B's groups of one sample renamed to A's, as MC-Bench's corrected scorer regroups a
    prediction onto the ground truth (benchmarks/mc_bench/corrected.py): a Hungarian assignment
    between B's groups and A's, pairing two groups worth the summed IoU of their Hungarian box
    matching on each image; a group of B left without a partner gets an id A does not use (its
    boxes then agree with none). People number groups differently; this forgives only that."""
    groups_a = sorted({g for _, g, _ in a})
    groups_b = list(dict.fromkeys(g for _, g, _ in b))  # in the order first drawn, as the scorer orders them
    if not groups_a or not groups_b:
        return {}
    gain = np.zeros((len(groups_b), len(groups_a)))
    for image in (0, 1):
        for p, gb in enumerate(groups_b):
            boxes_b = [box for i, g, box in b if i == image and g == gb]
            for q, ga in enumerate(groups_a):
                boxes_a = [box for i, g, box in a if i == image and g == ga]
                if boxes_a and boxes_b:
                    m = iou_matrix(boxes_b, boxes_a)
                    r, c = linear_sum_assignment(-m)
                    gain[p, q] += float(m[r, c].sum())
    rows, cols = linear_sum_assignment(-gain)
    renamed = {groups_b[r]: groups_a[c] for r, c in zip(rows, cols)}
    spare = max([*groups_a, *groups_b]) + 1
    for g in groups_b:
        if g not in renamed:
            renamed[g] = spare
            spare += 1
    return renamed


def _mc_pair_boxes(a: Record, b: Record) -> list[tuple[list[list[float]], list[list[float]], tuple[list[int], list[int]]]]:
    """Per image of one sample: A's boxes, B's boxes, and their groups (B's regrouped onto A's)."""
    boxes_a, boxes_b = _mc_boxes(a), _mc_boxes(b)
    renamed = regroup(boxes_a, boxes_b)
    out = []
    for image in (0, 1):
        xa = [(g, box) for i, g, box in boxes_a if i == image]
        xb = [(renamed.get(g, g), box) for i, g, box in boxes_b if i == image]
        out.append(([box for _, box in xa], [box for _, box in xb], ([g for g, _ in xa], [g for g, _ in xb])))
    return out


def _first_box(rec: Record) -> list[float] | None:
    boxes = rec.get("answer") or []
    return [float(v) for v in boxes[0]] if boxes else None


def _same_text(a: Any, b: Any) -> bool:
    def norm(v: Any) -> Any:
        return re.sub(r"\s+", " ", v).strip().casefold() if isinstance(v, str) else v

    return bool(norm(a) == norm(b))


@dataclass(frozen=True)
class PairAgreement:
    """Two annotators' agreement over the samples both answered."""

    a: str
    b: str
    shared: int
    measures: dict[str, float | None]


def pair_agreement(
    benchmark: str, a: dict[str, Record], b: dict[str, Record], names: tuple[str, str] = ("A", "B")
) -> PairAgreement:
    """The agreement measures of `benchmark` between two people's records (by sample id)."""
    a, b = answered(a), answered(b)
    shared = sorted(set(a) & set(b))
    measures: dict[str, float | None] = {}
    kind = _kind(benchmark)
    if kind == "image_pair":
        labels_a: list[bool] = []
        labels_b: list[bool] = []
        boxes: list[tuple[list[list[float]], list[list[float]], tuple[list[int], list[int]]]] = []
        for sid in shared:
            for x, y, groups in _mc_pair_boxes(a[sid], b[sid]):
                labels_a.append(bool(x))
                labels_b.append(bool(y))
                boxes.append((x, y, groups))
        measures["image kappa"] = cohen_kappa(labels_a, labels_b)
        measures["box F1@0.5"] = box_f1(boxes)
    elif kind == "one_box":
        agree = 0
        for sid in shared:
            first, second = _first_box(a[sid]), _first_box(b[sid])
            agree += first is not None and second is not None and iou(first, second) >= MATCH_IOU
        measures["IoU>=0.5 agreement"] = agree / len(shared) if shared else None
    else:
        same = sum(_same_text(a[sid].get("answer"), b[sid].get("answer")) for sid in shared)
        measures["exact agreement"] = same / len(shared) if shared else None
    return PairAgreement(names[0], names[1], len(shared), measures)


# --- report ----------------------------------------------------------------------------------------


def _plan(run: Run) -> str:
    plan = run.identity.get("solver.plan")
    return "" if plan is None else json.dumps(plan, sort_keys=True, default=str)


def mean_refusal(runs: Sequence[Run], samples: Sequence[int]) -> str:
    """Why the annotators' numbers must not be averaged into one "humans (mean of k)" row, or ""
    when they may: different plans (sample sets), different numbers of answered samples, or some
    with box confidences and some without (AP50 of tied and of ranked boxes differ in kind)."""
    reasons = []
    if len({_plan(r) for r in runs}) > 1:
        reasons.append("different plans")
    if len(set(samples)) > 1:
        reasons.append(f"different sample counts ({', '.join(map(str, samples))})")
    if len({has_confidences(r) for r in runs}) > 1:
        reasons.append("box confidences for some, not all")
    return "; ".join(reasons)


def _answered_count(run: Run) -> int:
    try:
        return len(answered(read_records(run.dir / RECORDS)))
    except (OSError, ValueError):
        return -1


def _mean_label(k: int, refusal: str) -> str:
    return f"humans (mean of {k})" if not refusal else f"humans (no mean of {k}: {refusal})"


def add_human_mean(board: Board, runs: Sequence[Run]) -> None:
    """Append "humans (mean of k)" to a board holding two or more human runs' rows: per column
    the mean over the human rows of the same remaining labels (e.g. MC-Bench's protocol). When
    the annotators are not comparable (`mean_refusal`) the row is there, empty, saying why."""
    humans = {str(r.dir): r for r in runs if is_human(r)}
    groups: dict[tuple[str, ...], list[BoardRow]] = {}
    for row in board.rows:
        if row.source in humans and not row.published:
            groups.setdefault(tuple(row.labels[1:]), []).append(row)
    for rest, rows in groups.items():
        if len(rows) < 2:
            continue
        people = [humans[r.source] for r in rows]
        refusal = mean_refusal(people, [_answered_count(r) for r in people])
        values: list[float | None] = []
        for i in range(len(board.columns)):
            cells = [v for r in rows if isinstance(v := r.values[i], int | float)]
            values.append(sum(cells) / len(cells) if len(cells) == len(rows) and not refusal else None)
        board.rows.append(BoardRow([_mean_label(len(rows), refusal), *rest], values, "humans"))


def _kind(benchmark: str) -> str | None:
    """The kind of human page a benchmark declares (contract/declaration.py HUMAN_KINDS)."""
    return declaration(benchmark).human


def _headline(benchmark: str, run: Run) -> dict[str, float | None]:
    m = run.metrics
    kind = _kind(benchmark)
    if kind == "image_pair":
        return {"Acc": pct(at(m, "official", "acc")), "AP50": pct(at(m, "official", "ap50"))}
    if kind == "one_box":  # the declared headline, "acc@0.5" or "corrected/acc@0.5"
        primary = declaration(benchmark).primary_metric or "acc@0.5"
        name = primary.split("/")[-1]
        return {name[:1].upper() + name[1:]: pct(at(m, *primary.split("/")))}
    measured, n, size = measured_overall(m)
    return {
        "Overall": pct(at(m, "overall", "overall")) if full_grid(m) else None,
        "measured cells": pct(measured),
        "cells": None if not size else float(n),
    }


def human_boards(benchmark: str, runs: Sequence[Run], with_published: bool = False) -> list[Board]:
    """The per-annotator board (MC-Bench Table 9's layout: one row per person, then their mean)
    with time per sample and confidences, and a board of pairwise agreement where two or more
    people answered shared samples; nothing when the runs hold no human run."""
    humans = sorted((r for r in runs if is_human(r)), key=lambda r: annotator(r))
    if not humans:
        return []
    heads = [_headline(benchmark, r) for r in humans]
    columns = list(heads[0]) + ["s/sample"]
    records = [read_records(r.dir / RECORDS) for r in humans]
    note = "box confidences: without them every human box scores 1.0 in AP50"
    if _kind(benchmark) == "document":
        note = (
            "Overall: the authors' aggregate, shown only where the plan fills their grid (every task and "
            "context range; they score an empty cell 0); measured cells: the mean over the task x range x "
            "depth cells that hold a sample, and how many cells that is"
        )
    per = Board(
        f"{benchmark}_humans",
        f"{benchmark}: annotators (%, the layout of MC-Bench's Table 9)",
        ["annotator", "samples", "box confidences"],
        columns,
        counts=frozenset({"cells"}),
        note=note,
    )
    counts: list[int] = []
    for run, head, recs in zip(humans, heads, records):
        conf = ("yes" if has_confidences(run) else "no (1.0)") if _kind(benchmark) == "image_pair" else ""
        row = [*head.values(), seconds_per_sample(recs)]
        counts.append(len(answered(recs)))
        per.rows.append(BoardRow([annotator(run), str(counts[-1]), conf], row, str(run.dir)))
    if len(humans) > 1:
        k = len(humans)
        refusal = mean_refusal(humans, counts)
        means: list[float | None] = []
        for i, column in enumerate(columns):
            got = [v for r in per.rows if isinstance(v := r.values[i], int | float)]
            means.append(sum(got) / len(got) if len(got) == k and not refusal and column != "cells" else None)
        per.rows.append(BoardRow([_mean_label(k, refusal), "", ""], means, "humans"))
    if with_published:
        for label, cells in PUBLISHED_HUMANS.get(benchmark, []):
            values = [float(cells[c]) if c in cells else None for c in columns]
            per.rows.append(BoardRow([label, "", ""], values, f"published: {PUBLISHED_SOURCES[benchmark]}", published=True))
    boards = [per]
    pairs = [
        pair_agreement(benchmark, records[i], records[j], (annotator(humans[i]), annotator(humans[j])))
        for i, j in itertools.combinations(range(len(humans)), 2)
    ]
    pairs = [p for p in pairs if p.shared]
    if pairs:
        measure_names = list(pairs[0].measures)
        agree = Board(
            f"{benchmark}_agreement",
            f"{benchmark}: agreement between annotators on shared samples",
            ["annotator A", "annotator B", "shared samples"],
            measure_names,
            note=(
                "kappa: image-level target present or not (undefined when both give one label everywhere); "
                "F1: boxes matched one to one at IoU 0.5 (a maximum matching) and on the group, after B's groups "
                "of each sample are renamed to A's as MC-Bench's corrected scorer regroups"
            )
            if _kind(benchmark) == "image_pair"
            else "",
        )
        for p in pairs:
            shown: list[float | str | None] = [
                ("undefined" if "kappa" in n else None) if (v := p.measures[n]) is None else (100 * v if "kappa" not in n else v)
                for n in measure_names
            ]
            agree.rows.append(BoardRow([p.a, p.b, str(p.shared)], shown, "agreement"))
        boards.append(agree)
    return boards


def published_human_rows(benchmark: str) -> list[PublishedRow]:
    """The papers' human rows of `benchmark` as published rows (for a board in another layout)."""
    return [
        PublishedRow(benchmark, {"model": label, **cells}, PUBLISHED_SOURCES[benchmark])
        for label, cells in PUBLISHED_HUMANS.get(benchmark, [])
    ]

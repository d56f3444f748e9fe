"""Agreement between annotators who answered the same samples, and the human rows of a report.

Per pair of human runs of one benchmark, over the samples both answered (skipped and gold samples
left out): MC-Bench's image-level Cohen's kappa (target present in an image or not) and the F1 of
boxes matched one to one at IoU >= 0.5 (groups ignored: people number groups differently);
Ref-Adv-s's share of samples whose two boxes overlap at IoU >= 0.5; MM-NIAH's share of identical
answers (case and spacing ignored). Beside each annotator: the time per sample.

The report side (`human_rows`, `human_boards`): a human run is one whose model label starts with
`human:`; its board row stays as any run's, a "humans (mean of k)" row is added (MC-Bench's Table
2), and a per-annotator board in the layout of MC-Bench's Table 9 shows each person's headline
numbers, time per sample, whether boxes carried confidences, and the pairwise agreement.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from needlepoint.contract.boards import Board, BoardRow, PublishedRow, Run, at, obj, pct
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
    """Cohen's kappa of two raters' yes/no labels of the same items; None without items, 1.0 when
    both always agree on one label (chance agreement 1: no disagreement to measure)."""
    if len(a) != len(b):
        raise ValueError("cohen_kappa needs two label lists of one length")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    expected = pa * pb + (1 - pa) * (1 - pb)
    if expected == 1.0:
        return 1.0 if observed == 1.0 else 0.0
    return (observed - expected) / (1 - expected)


def matched_boxes(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], threshold: float = MATCH_IOU) -> int:
    """How many boxes of `a` and `b` pair one to one at IoU >= threshold, greedily by IoU."""
    if not a or not b:
        return 0
    m = iou_matrix(a, b)
    pairs = sorted(((float(m[i, j]), i, j) for i in range(len(a)) for j in range(len(b))), reverse=True)
    used_a: set[int] = set()
    used_b: set[int] = set()
    for value, i, j in pairs:
        if value < threshold:
            break
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
    return len(used_a)


def box_f1(pairs: Sequence[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]]) -> float | None:
    """F1 of two people's boxes over images, `pairs` holding each image's (boxes of A, boxes of B):
    2 * matched / (boxes of A + boxes of B); None when neither drew a box."""
    total = sum(len(x) + len(y) for x, y in pairs)
    if total == 0:
        return None
    return 2 * sum(matched_boxes(x, y) for x, y in pairs) / total


def _mc_images(rec: Record) -> tuple[list[list[float]], list[list[float]]]:
    per: tuple[list[list[float]], list[list[float]]] = ([], [])
    for box in rec.get("answer") or []:
        if isinstance(box, dict) and box.get("image") in (0, 1):
            per[int(box["image"])].append([float(v) for v in box["bbox"]])
    return per


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
    if benchmark == "mc_bench":
        labels_a: list[bool] = []
        labels_b: list[bool] = []
        boxes: list[tuple[list[list[float]], list[list[float]]]] = []
        for sid in shared:
            for x, y in zip(_mc_images(a[sid]), _mc_images(b[sid])):
                labels_a.append(bool(x))
                labels_b.append(bool(y))
                boxes.append((x, y))
        measures["image kappa"] = cohen_kappa(labels_a, labels_b)
        measures["box F1@0.5"] = box_f1(boxes)
    elif benchmark == "ref_adv_s":
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


def add_human_mean(board: Board, runs: Sequence[Run]) -> None:
    """Append "humans (mean of k)" to a board holding two or more human runs' rows: per column
    the mean over the human rows of the same remaining labels (e.g. MC-Bench's protocol)."""
    humans = {str(r.dir) for r in runs if is_human(r)}
    groups: dict[tuple[str, ...], list[BoardRow]] = {}
    for row in board.rows:
        if row.source in humans and not row.published:
            groups.setdefault(tuple(row.labels[1:]), []).append(row)
    for rest, rows in groups.items():
        if len(rows) < 2:
            continue
        values: list[float | None] = []
        for i in range(len(board.columns)):
            cells = [v for r in rows if isinstance(v := r.values[i], int | float)]
            values.append(sum(cells) / len(cells) if len(cells) == len(rows) else None)
        board.rows.append(BoardRow([f"humans (mean of {len(rows)})", *rest], values, "humans"))


def _headline(benchmark: str, run: Run) -> dict[str, float | None]:
    m = run.metrics
    if benchmark == "mc_bench":
        return {"Acc": pct(at(m, "official", "acc")), "AP50": pct(at(m, "official", "ap50"))}
    if benchmark == "ref_adv_s":
        return {"Acc@0.5": pct(m.get("acc@0.5"))}
    return {"Overall": pct(at(m, "overall", "overall"))}


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
    per = Board(
        f"{benchmark}_humans",
        f"{benchmark}: annotators (%, the layout of MC-Bench's Table 9)",
        ["annotator", "samples", "box confidences"],
        columns,
        note="box confidences: without them every human box scores 1.0 in AP50",
    )
    for run, head, recs in zip(humans, heads, records):
        conf = ("yes" if has_confidences(run) else "no (1.0)") if benchmark == "mc_bench" else ""
        row = [*head.values(), seconds_per_sample(recs)]
        per.rows.append(BoardRow([annotator(run), str(len(answered(recs))), conf], row, str(run.dir)))
    if len(humans) > 1:
        k = len(humans)
        means: list[float | None] = []
        for i in range(len(columns)):
            got = [v for r in per.rows if isinstance(v := r.values[i], int | float)]
            means.append(sum(got) / len(got) if len(got) == k else None)
        per.rows.append(BoardRow([f"humans (mean of {k})", "", ""], means, "humans"))
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
            note="kappa: image-level target present or not; F1: boxes matched one to one at IoU 0.5, groups ignored",
        )
        for p in pairs:
            values = [None if (v := p.measures[n]) is None else (100 * v if "kappa" not in n else v) for n in measure_names]
            agree.rows.append(BoardRow([p.a, p.b, str(p.shared)], values, "agreement"))
        boards.append(agree)
    return boards


def published_human_rows(benchmark: str) -> list[PublishedRow]:
    """The papers' human rows of `benchmark` as published rows (for a board in another layout)."""
    return [
        PublishedRow(benchmark, {"model": label, **cells}, PUBLISHED_SOURCES[benchmark])
        for label, cells in PUBLISHED_HUMANS.get(benchmark, [])
    ]

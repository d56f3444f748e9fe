"""MC-Bench metrics laid out for people: the paper's Table 2 columns, official and corrected,
then the section 4.4 analyses."""

from __future__ import annotations

from typing import Any

from needlepoint.contract.base import Table, percent
from needlepoint.contract.coverage import coverage_note, has_answers, no_answers_table

STYLE_KEYS = (("ref", "Referring"), ("com", "Comparison"), ("rea", "Reasoning"))


def table2_row(block: dict[str, Any]) -> list[Any]:
    """Acc^ref, Acc^com, Acc^rea, Acc, AP50^ref, AP50^com, AP50^rea, AP50 of one protocol (%)."""
    styles = block.get("by_style", {})
    acc = [percent(styles.get(name, {}).get("acc")) for _, name in STYLE_KEYS]
    ap = [percent(styles.get(name, {}).get("ap50")) for _, name in STYLE_KEYS]
    return [*acc, percent(block.get("acc")), *ap, percent(block.get("ap50"))]


TABLE2_COLUMNS = ["Acc^ref", "Acc^com", "Acc^rea", "Acc", "AP50^ref", "AP50^com", "AP50^rea", "AP50"]


def mc_tables(metrics: dict[str, Any]) -> list[Table]:
    """The headline table (official and corrected) and the analyses; for an incomplete run the title
    says how many requested samples were answered, and a run with nothing answered gets a sentence."""
    title = "MC-Bench (%, paper's Table 2 columns)"
    if not has_answers(metrics):
        return [no_answers_table(title, metrics)]
    note = coverage_note(metrics)
    main = Table(f"{title}; {note}" if note else title, ["protocol", *TABLE2_COLUMNS])
    official = dict(metrics.get("official", {}))
    corrected = dict(metrics.get("corrected", {}))
    corrected.setdefault("by_style", metrics.get("analyses", {}).get("by_style", {}))
    main.rows.append(["official (eval_mc_bench.py)", *table2_row(official)])
    main.rows.append(["corrected", *table2_row(corrected)])
    a = metrics.get("analyses", {})
    sizes = a.get("ap50_by_size", {})
    extra = Table(
        "MC-Bench analyses (corrected protocol)",
        [
            "group-agnostic AP50 %",
            "AP50 small %",
            "AP50 medium %",
            "AP50 large %",
            "groups / positive",
            "boxes / sample",
            "boxes / negative",
        ],
        [
            [
                percent(a.get("group_agnostic_ap50")),
                percent(sizes.get("small")),
                percent(sizes.get("medium")),
                percent(sizes.get("large")),
                _round(a.get("mean_groups_per_positive_sample")),
                _round(a.get("mean_boxes_per_sample")),
                _round(a.get("mean_boxes_per_negative_sample")),
            ]
        ],
    )
    tables = [main, extra]
    regrouping = official.get("regrouping")
    notes = []
    if regrouping == "none":
        notes.append("official regrouping: none (no image with a group-2 box; the authors' script would crash here)")
    ties = corrected.get("ap50_tie_orders")
    if isinstance(ties, dict) and ties.get("orders"):
        notes.append(tie_note(ties))
    notes += metrics.get("notes", [])
    for key, value in metrics.get("parse_errors", {}).items():
        notes.append(f"parse errors {key}: {value}")
    run = metrics.get("run")
    run = run if isinstance(run, dict) else {}
    failures = run.get("failed_by_kind") or metrics.get("failures") or {}  # older metrics.json kept them beside the scores
    for key, value in failures.items():
        notes.append(f"failed requests {key}: {value} (not scored; not parse errors)")
    if notes:
        tables.append(Table("MC-Bench notes", ["note"], [[n] for n in notes]))
    return tables


def tie_note(ties: dict[str, Any]) -> str:
    """One line on a corrected AP50 averaged over tie orders (corrected.py)."""
    return (
        f"corrected AP50: tied scores, so the mean over {ties['orders']} random orders of the images "
        f"(sd {percent(ties.get('sd'))}, {percent(ties.get('min'))} to {percent(ties.get('max'))}); "
        f"in image-id order, as the official protocol takes ties: {percent(ties.get('image_id_order'))}"
    )


def _round(v: Any) -> Any:
    return None if v is None else round(v, 3)

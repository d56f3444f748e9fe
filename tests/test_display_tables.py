"""What the terminal and the boards show: headline tables that fit 80 columns, MM-NIAH's tasks in
the paper's order, ranges without samples marked, answered / requested for an incomplete run and
a sentence for a run with nothing answered."""

from __future__ import annotations

import random
from typing import Any

import pytest

from needlepoint.benchmarks.mc_bench.tables import TABLE2_COLUMNS, mc_tables
from needlepoint.benchmarks.mm_niah.aggregate import aggregate
from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_RANGES, PAPER_TASKS, TASKS
from needlepoint.benchmarks.mm_niah.tables import PRESENT, niah_tables
from needlepoint.benchmarks.ref_adv.benchmark import BINS
from needlepoint.benchmarks.ref_adv.tables import BIN_LABELS, ref_tables
from needlepoint.contract.base import Table
from needlepoint.report.leaderboard import Run, build_boards
from needlepoint.report.terminal import render_tables


def niah_rows(lengths: tuple[int, ...] = (1500, 3000), order: tuple[str, ...] = TASKS) -> list[dict[str, Any]]:
    """Scored MM-NIAH rows of every task at the given context lengths (a set built only there)."""
    rng = random.Random(3)
    return [
        {"task": task, "context_length": length, "placed_depth": depth, "score": float(rng.random() < 0.6)}
        for task in order
        for length in lengths
        for depth in (0.1, 0.5, 0.9)
    ]


def mc_metrics() -> dict[str, Any]:
    styles = {name: {"acc": 0.5, "ap50": 0.123456} for name in ("Referring", "Comparison", "Reasoning")}
    block = {"acc": 0.5, "ap50": 0.123456, "by_style": styles}
    return {"official": block, "corrected": block, "analyses": {"ap50_by_size": {"small": 0.1, "medium": 0.2, "large": 0.3}}}


def ref_metrics() -> dict[str, Any]:
    bins = {label: {"n": 10, "acc@0.5": 0.5} for label, _, _ in BINS}
    return {
        "n": 30,
        "acc@0.5": 0.5,
        "acc@0.75": 0.25,
        "acc@0.9": 0.1,
        "bins": bins,
        "parse_fail": 1,
        "repair_used": 0,
        "failed": 0,
        "by_negation": {"True": {"n": 3, "acc@0.5": 1.0}},
        "by_human_authored": {},
        "by_image_source": {},
    }


def headers_intact(text: str, table: Table) -> None:
    """Every column name is shown whole (over one or two lines), nothing is cut with an ellipsis,
    and no line is wider than 80 columns."""
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines()), max(text.splitlines(), key=len)
    words = text.split()
    for name in table.columns:
        for part in name.replace("^", "^ ").split():
            assert part in words, (part, text)


@pytest.mark.parametrize(
    "tables", [mc_tables(mc_metrics()), ref_tables(ref_metrics()), niah_tables(aggregate(niah_rows((1500, 3000, 9000, 70000))))]
)
def test_headline_tables_fit_80_columns(tables: list[Table]) -> None:
    text = render_tables(tables[:1], 80)
    headers_intact(text, Table("", [c for t in tables[:1] for c in t.columns]))
    for t in tables:  # every table, not only the headline one, is readable at 80 columns
        assert "…" not in render_tables([t], 80)
    # The MC-Bench headline keeps each cell's value on one line (no "12." / "3" split).
    if tables[0].columns[1:] == TABLE2_COLUMNS:
        assert text.count("12.3") == 8 and "AP50^" in text


def test_mm_niah_tasks_come_in_the_papers_order_everywhere(tmp_path: Any) -> None:
    metrics = aggregate(niah_rows(order=tuple(reversed(TASKS))))  # the run met the tasks in another order
    assert list(metrics["tasks"]) != list(PAPER_TASKS)
    want = [*PAPER_TASKS, "overall"]
    for table in niah_tables(metrics)[:2]:
        assert [row[0] for row in table.rows] == want[: len(table.rows)]
    run = Run(tmp_path, {"config": {"benchmark": "mm_niah", "model": "m"}}, {**metrics, "split": "val"})
    boards = {b.key: b for b in build_boards([run])}
    assert boards["mm_niah_tasks"].columns == want
    from needlepoint.benchmarks.mm_niah.heatmap import draw_all

    stems = [p.stem for p in draw_all(metrics, tmp_path / "heatmaps") if p.suffix == ".png"]
    assert stems == want[-1:] + want[:-1]


def test_ranges_without_samples_are_marked_and_the_present_overall_is_shown(tmp_path: Any) -> None:
    metrics = aggregate(niah_rows((1500, 3000)))  # built only at 1k-2k
    main = niah_tables(metrics)[0]
    assert main.columns == ["task", *CONTEXT_RANGES, "overall", PRESENT]
    for row in main.rows:
        cells = dict(zip(main.columns, row))
        assert cells["1k"] is not None and cells["2k"] is not None
        assert all(cells[r] is None for r in CONTEXT_RANGES[2:]), row  # "–", not 0.0
        assert cells["overall"] == pytest.approx(
            100 * (cells["1k"] + cells["2k"]) / 100 / 11, abs=0.06
        )  # the official one, as it was
        assert cells[PRESENT] == pytest.approx((cells["1k"] + cells["2k"]) / 2, abs=0.06)
    text = render_tables([main], 160)
    assert "0.0" not in text.split() and "–" in text.split()
    assert any("no sample in that range" in str(t.rows) for t in niah_tables(metrics))
    # A set with every range present has no extra column.
    full = aggregate(niah_rows((1500, 3000, 5000, 9000, 13000, 17000, 25000, 33000, 41000, 49000, 65000)))
    assert PRESENT not in niah_tables(full)[0].columns
    # The leaderboard leaves an empty range's cell empty.
    run = Run(tmp_path, {"config": {"benchmark": "mm_niah", "model": "m"}}, {**metrics, "split": "val"})
    ranges = next(b for b in build_boards([run]) if b.key == "mm_niah_ranges")
    values = dict(zip(ranges.columns, ranges.rows[0].values))
    assert values["1k"] is not None and values["4k"] is None and values["64k"] is None


def test_incomplete_runs_say_answered_of_requested() -> None:
    run = {"samples": 30, "answered": 14, "failed": 16, "not_requested": 0, "requested": 30}
    for tables in (
        mc_tables({**mc_metrics(), "run": run}),
        ref_tables({**ref_metrics(), "run": run}),
        niah_tables({**aggregate(niah_rows()), "run": run}),
    ):
        assert "answered 14 of 30 requested (16 failed)" in tables[0].title
        assert "answered 14 of 30" in render_tables(tables[:1], 80).replace("\n", " ").replace("  ", " ")
    # Older runs without "requested": answered + failed; a complete run says nothing.
    older = {"samples": 40, "answered": 10, "failed": 2, "not_requested": 28}
    assert (
        "answered 10 of 12 requested (2 failed), 28 of 40 not requested" in ref_tables({**ref_metrics(), "run": older})[0].title
    )
    done = {"samples": 30, "answered": 30, "failed": 0, "not_requested": 0, "requested": 30}
    assert ref_tables({**ref_metrics(), "run": done})[0].title == "Ref-Adv-s"


def test_a_run_with_nothing_answered_shows_a_sentence_not_metrics() -> None:
    only_run = {"run": {"samples": 24, "answered": 0, "failed": 24, "not_requested": 0, "requested": 24}}
    for tables in (mc_tables(only_run), ref_tables(only_run), niah_tables(only_run)):
        assert len(tables) == 1 and tables[0].columns == ["note"]
        assert "No sample was answered (24 of 24 requested failed)" in tables[0].rows[0][0]
        assert "…" not in render_tables(tables, 80)


def test_ref_adv_table_bins_follow_the_benchmark() -> None:
    assert BIN_LABELS == tuple(label for label, _, _ in BINS)

"""The papers' published rows, for `needlepoint report --with-published`.

Only numbers that the specs (`../shared/specs/*.md`) or the reference data notes
(`../shared/data/README.md`) state are here; a column they do not give stays empty. Values are in
the leaderboard's units: percentages with the paper's one decimal, counts as integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["PUBLISHED", "PublishedRow", "published_rows"]

REF_ADV_SOURCE = "Ref-Adv (ICLR 2026), authors' published row on Ref-Adv-s"
MC_BENCH_SOURCE = "MC-Bench (Xu, Zhu, Yang 2024), Table 2"
MM_NIAH_SOURCE = "MM-NIAH (NeurIPS 2024 Datasets and Benchmarks), overall"


@dataclass(frozen=True)
class PublishedRow:
    """One published result: the leaderboard column names it gives, and where it comes from."""

    benchmark: str
    model: str
    setting: str
    values: dict[str, Any] = field(default_factory=dict)
    source: str = ""


PUBLISHED: tuple[PublishedRow, ...] = (
    # specs/ref-adv-s.md and data/README.md (exact fractions 617/1142, 458/1142, 206/1142).
    PublishedRow(
        "ref_adv_s",
        "Qwen2.5-VL-72B-Instruct",
        "direct",
        {"n": 1142, "Acc@0.5": 54.0, "Acc@0.75": 40.1, "Acc@0.9": 18.0, "2-3": 57.0, "4-6": 52.7, ">=7": 41.1, "parse fail": 8},
        REF_ADV_SOURCE,
    ),
    # specs/mc-bench.md: overall Acc and AP50 only; the per-style cells are not in the spec.
    PublishedRow("mc_bench", "Qwen2-VL-72B", "sequence", {"Acc": 71.4, "AP50": 30.7}, MC_BENCH_SOURCE),
    PublishedRow("mc_bench", "GPT-4o + G-DINO (agentic)", "agentic", {"Acc": 77.9, "AP50": 36.2}, MC_BENCH_SOURCE),
    PublishedRow("mc_bench", "humans", "", {"Acc": 92.3, "AP50": 41.3}, MC_BENCH_SOURCE),
    # specs/mm-niah.md: the overall score (mean over the six tasks and the context ranges) only.
    PublishedRow("mm_niah", "Gemini-1.5", "", {"overall": 55.3}, MM_NIAH_SOURCE),
    PublishedRow("mm_niah", "InternVL-1.5", "", {"overall": 42.4}, MM_NIAH_SOURCE),
    PublishedRow("mm_niah", "InternVL-1.5-RAG", "", {"overall": 50.1}, MM_NIAH_SOURCE),
    PublishedRow("mm_niah", "LLaVA-1.6-34B", "", {"overall": 21.1}, MM_NIAH_SOURCE),
    PublishedRow("mm_niah", "humans", "", {"overall": 98.9}, MM_NIAH_SOURCE),
)


def published_rows(benchmark: str) -> list[PublishedRow]:
    """The published rows of one benchmark, in the papers' order."""
    return [r for r in PUBLISHED if r.benchmark == benchmark]

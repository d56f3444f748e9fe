"""A comparison for people: one table per contrast (a run against the first), rates as
percentages with one decimal as the papers print them, p-values to three places."""

from __future__ import annotations

import string

from needlepoint.compare.paired import Comparison, Contrast, MetricDiff
from needlepoint.contract.base import Table

__all__ = ["comparison_tables", "letter", "p_text", "pairing_lines", "table_notes"]


def letter(k: int) -> str:
    """A run's letter: A for the first, B, C, ... (then A1, B1, ... past Z)."""
    letters = string.ascii_uppercase
    return letters[k % 26] + (str(k // 26) if k >= 26 else "")


def pct(value: float | None) -> float | None:
    return None if value is None else round(100.0 * value, 1)


def p_text(p: float | None) -> str | None:
    """A p-value as people read it: three decimals, "< 0.001" below that."""
    if p is None:
        return None
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _interval(m: MetricDiff) -> str | None:
    if m.lo is None or m.hi is None:
        return None
    return f"[{100 * m.lo:+.1f}, {100 * m.hi:+.1f}]"


def pairing_lines(c: Comparison) -> list[str]:
    """Which run is which letter, and how many samples were paired and left out of each."""
    p = c.pairing
    lines = [f"{letter(k)}: {r.name}  ({r.dir})" for k, r in enumerate(p.runs)]
    left = ", ".join(f"{letter(k)} {n}" for k, n in enumerate(p.left_out))
    lines.append(f"paired on {len(p.ids)} samples every run answered; left out of each (answered by it, not by all): {left}")
    failed = [f"{letter(k)} {r.failed}" for k, r in enumerate(p.runs) if r.failed]
    if failed:
        lines.append(f"failed requests (no answer, never paired): {', '.join(failed)}")
    lines.append(
        f"{int(100 * c.level)}% intervals and p-values: paired percentile bootstrap over the {c.unit}, {c.resamples} resamples, "
        f"seed {c.seed} (p never below 1/{c.resamples + 1}); McNemar: exact, on the samples one run alone got right"
    )
    return lines


def table_notes(c: Comparison, contrast: Contrast) -> list[str]:
    """The lines under a contrast's table: what the primary row is and what the adjustment of the
    others is; which rows were left out as repeats of another."""
    n_p, n_mc = contrast.family()
    mc = f" (McNemar's over its {n_mc})" if n_mc else ""
    alpha = f"{1 - c.level:.2g}"
    lines = [
        f"Primary comparison: {c.primary}. Every other row's p is also shown Holm-adjusted ('Holm': Holm's step-down "
        f"method over the {n_p} other rows with a p{mc}): a Holm p below {alpha} keeps the chance of any false "
        f"difference among those rows at most {alpha}."
    ]
    if c.repeats:
        same = ", ".join(f"{name} (= {twin})" for name, twin in c.repeats.items())
        lines.append(f"Left out, as the same numbers as another row in every run: {same}.")
    return lines


def comparison_tables(c: Comparison) -> list[Table]:
    """One table per contrast: each metric's values (%), the difference, its interval and p-value
    (with its Holm adjustment, "primary" on the primary row), and McNemar's p (and Holm's) with the
    samples each run alone got right (share metrics only)."""
    tables = []
    for contrast in c.contrasts:
        a, b = letter(0), letter(contrast.other)
        table = Table(
            f"{b} vs {a} on {len(c.pairing.ids)} paired samples (%; difference {b} - {a})",
            [
                "metric",
                a,
                b,
                f"{b} - {a}",
                f"{int(100 * c.level)}% interval",
                "p",
                "Holm",
                "McNemar p",
                "McNemar Holm",
                f"only {a} right",
                f"only {b} right",
            ],
        )
        for m in contrast.rows:
            mc = m.mcnemar
            table.rows.append(
                [
                    m.name,
                    pct(m.base),
                    pct(m.other),
                    None if m.diff is None else round(100.0 * m.diff, 1),
                    _interval(m) or (m.note or None),
                    p_text(m.p),
                    "primary" if m.primary else p_text(m.p_holm),
                    p_text(mc.p) if mc else None,
                    ("primary" if m.primary else p_text(m.mcnemar_holm)) if mc else None,
                    mc.only_a if mc else None,
                    mc.only_b if mc else None,
                ]
            )
        tables.append(table)
    return tables

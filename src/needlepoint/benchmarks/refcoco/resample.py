"""RefCOCO resampling: an expression is the unit, drawn within its split (the splits are reported
apart and averaged as equals), and every split's Acc@0.5 and the mean over the splits of Acc@t and
the mean IoU recomputed per reading on each draw. A split's Acc@0.5 is a share of expressions right,
declared as such (`share_counts`) so that its interval is a Wilson score interval; the mean over
splits is a mean of shares and keeps its bootstrap interval.

Expressions of one object or image are drawn as independent units, so the intervals are somewhat
narrower than a cluster bootstrap over images would give (docs/protocols/refcoco.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from needlepoint.benchmarks.refcoco.scoring import IOU_KEY, READINGS, THRESHOLDS, _finite
from needlepoint.stats.resampler import Resampler, Restricted, one_row

__all__ = ["RefCocoResampler"]


class RefCocoResampler:
    """Expressions (id, split, IoU under each reading) as bootstrap units."""

    unit = "expression"

    def __init__(self, ids: Sequence[str], splits: Sequence[str], ious: dict[str, Sequence[float]]) -> None:
        self.units = [str(i) for i in ids]
        self.strata: list[str] | None = [str(s) for s in splits]
        self._names = list(dict.fromkeys(self.strata))
        where = {name: k for k, name in enumerate(self._names)}
        self._split = np.asarray([where[s] for s in self.strata], dtype=np.int64)
        self._iou = {r: np.asarray([_finite(v) for v in ious[r]], dtype=np.float64) for r in READINGS}

    @classmethod
    def from_rows(cls, ids: Sequence[str], rows: Sequence[dict[str, Any]]) -> RefCocoResampler:
        """From scoring.sample_rows' neutral rows."""
        return cls(ids, [r["split"] for r in rows], {r: [row[IOU_KEY[r]] for row in rows] for r in READINGS})

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        return one_row(self.metrics_batch(np.asarray(idx, dtype=np.int64)[None, :]))

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        idx = np.asarray(idx, dtype=np.int64)
        rows = idx.shape[0]
        split = self._split[idx]
        sizes = np.stack([(split == k).sum(axis=1) for k in range(len(self._names))], axis=1).astype(np.float64)
        present = sizes > 0
        out: dict[str, np.ndarray] = {}
        for reading in READINGS:
            iou = self._iou[reading][idx]
            figures: dict[str, np.ndarray] = {f"acc@{t}": (iou >= t).astype(np.float64) for t in THRESHOLDS}
            figures["mean_iou"] = iou
            for key, values in figures.items():
                per_split = np.stack([np.where(split == k, values, 0.0).sum(axis=1) for k in range(len(self._names))], axis=1)
                rates = np.divide(per_split, sizes, out=np.full_like(per_split, np.nan), where=present)
                if key == "acc@0.5":  # the cards' per-split figure; the others only as means, to keep the table short
                    for k, name in enumerate(self._names):
                        out[f"splits/{name}/{reading}/{key}"] = rates[:, k]
                counted = present.sum(axis=1)
                mean = np.divide(np.where(present, rates, 0.0).sum(axis=1), counted, out=np.full(rows, np.nan), where=counted > 0)
                out[f"{reading}/{key}"] = mean
        return out

    def share_counts(self) -> dict[str, list[tuple[float, float]]]:
        """Each split's Acc@0.5 under each reading: (expressions right, expressions) of that split."""
        out: dict[str, list[tuple[float, float]]] = {}
        for k, name in enumerate(self._names):
            inside = self._split == k
            for reading in READINGS:
                out[f"splits/{name}/{reading}/acc@0.5"] = [(int((self._iou[reading][inside] >= 0.5).sum()), int(inside.sum()))]
        return out

    def restrict(self, ids: Sequence[str]) -> Resampler:
        return Restricted(self, ids)

"""Ref-Adv-s resampling: a case is the unit, drawn within its distractor bin (the bins are the
authors' strata), and Acc@0.5/0.75/0.9 and the bins' Acc@0.5 recomputed on each draw. All of them
are shares of cases right, declared as such (`share_counts`, stats.shares) so that their intervals
are Wilson score intervals, which hold near 0% and 100%."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from needlepoint.benchmarks.ref_adv.scoring import BINS, THRESHOLDS, bin_label
from needlepoint.stats.resampler import Resampler, Restricted, one_row

__all__ = ["RefAdvResampler"]


class RefAdvResampler:
    """Ref-Adv-s cases (id, IoU of the first box, distractor count) as bootstrap units."""

    unit = "case"

    def __init__(self, ids: Sequence[str], ious: Sequence[float], distractors: Sequence[int]) -> None:
        self.units = [str(i) for i in ids]
        self.strata: list[str] | None = [bin_label(int(d)) for d in distractors]
        iou = np.asarray(ious, dtype=np.float64).reshape(-1)
        d = np.asarray(distractors, dtype=np.int64).reshape(-1)
        # each case as one small code: bit k set when IoU >= THRESHOLDS[k], times its bin (0: none)
        code = np.zeros(len(iou), np.int64)
        for k, t in enumerate(THRESHOLDS):
            code |= (iou >= t).astype(np.int64) << k
        for b, (_, lo, hi) in enumerate(BINS, start=1):
            code[(d >= lo) & ((d <= hi) if hi is not None else True)] += b << len(THRESHOLDS)
        self._code = code
        self._codes = (len(BINS) + 1) << len(THRESHOLDS)
        self._iou, self._d = iou, d

    @classmethod
    def from_rows(cls, ids: Sequence[str], rows: Sequence[dict[str, Any]]) -> RefAdvResampler:
        """From scoring.score_rows' neutral rows (a run's records or the authors' prediction file)."""
        return cls(ids, [r["iou"] for r in rows], [r["distractors"] for r in rows])

    def metrics(self, idx: np.ndarray) -> dict[str, float | None]:
        return one_row(self.metrics_batch(np.asarray(idx, dtype=np.int64)[None, :]))

    def metrics_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        rows, n = idx.shape
        # how many drawn cases of each code per resample: one bincount over all rows
        counts = np.bincount((self._code[idx] + self._codes * np.arange(rows)[:, None]).ravel(), minlength=rows * self._codes)
        counts = counts.reshape(rows, len(BINS) + 1, 1 << len(THRESHOLDS))
        bits = np.arange(1 << len(THRESHOLDS))
        out: dict[str, np.ndarray] = {}
        for k, t in enumerate(THRESHOLDS):
            hits = counts[:, :, (bits >> k) & 1 == 1].sum(axis=(1, 2))
            out[f"acc@{t}"] = hits / n if n else np.full(rows, np.nan)
        for b, (label, _, _) in enumerate(BINS, start=1):
            size = counts[:, b].sum(axis=1)
            hit = counts[:, b, bits & 1 == 1].sum(axis=1)
            # score_rows gives an empty bin 0.0; an empty bin has no rate to put an interval on
            out[f"bins/{label}/acc@0.5"] = np.divide(hit, size, out=np.full(rows, np.nan), where=size > 0)
        return out

    def share_counts(self) -> dict[str, list[tuple[float, float]]]:
        """Every metric is a share of cases right: (cases right, cases) per distractor bin for
        Acc@t (the draw's strata), and the bin's own pair for the bin's Acc@0.5 (stats.shares)."""
        strata = np.asarray(self.strata if self.strata is not None else [""] * len(self.units), dtype=str)
        out: dict[str, list[tuple[float, float]]] = {}
        for t in THRESHOLDS:
            right = self._iou >= t
            out[f"acc@{t}"] = [(int(right[strata == s].sum()), int((strata == s).sum())) for s in dict.fromkeys(strata.tolist())]
        for label, lo, hi in BINS:
            inside = (self._d >= lo) & ((self._d <= hi) if hi is not None else True)
            if inside.any():
                out[f"bins/{label}/acc@0.5"] = [(int((self._iou[inside] >= 0.5).sum()), int(inside.sum()))]
        return out

    def restrict(self, ids: Sequence[str]) -> Resampler:
        return Restricted(self, ids)

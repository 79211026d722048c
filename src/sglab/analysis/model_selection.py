"""Model selection on logged curves (thesis Sec. 4.2.2, Figs. 4.1, 4.2, C.1 and C.3).

All functions read the evaluation records of one run (``metrics.jsonl``: one dict per
evaluation with ``step`` and ``<split>/loss``, ``<split>/exact_match``):

* :func:`loss_accuracy_correlation`: Spearman correlation of a split's loss and
  accuracy across evaluations. On IID data the loss falls as accuracy rises (negative);
  on generalization splits the thesis finds both rising together (Fig. 4.2, C.1).
* :func:`simulate_early_stopping`: early stopping with patience on a monitored metric
  (the usual choice: IID validation loss), replayed on the logged curve; returns the
  checkpoint it would keep.
* :func:`steps_to_fraction`: first step at which a metric reaches a fraction (80%) of
  its final value (convergence speed, Fig. C.3).
* :func:`early_stopping_report`: the OOD accuracy of the early-stopped checkpoint next
  to the final and the best OOD accuracy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from sglab.errors import SglabError

Record = dict[str, Any]


def _series(records: list[Record], key: str) -> tuple[np.ndarray, np.ndarray]:
    points = [(r["step"], r[key]) for r in records if key in r]
    if not points:
        known = sorted({k for r in records for k in r if k.count("/") == 1})
        raise SglabError(f"no evaluation record has {key!r}; logged metrics: {', '.join(known)}")
    steps, values = zip(*points)
    return np.asarray(steps), np.asarray(values, dtype=float)


def loss_accuracy_correlation(records: list[Record], split: str) -> float:
    """Spearman correlation of ``<split>/loss`` and ``<split>/exact_match`` over evaluations.

    NaN when either series is constant (e.g. accuracy stuck at 0).
    """
    _, loss = _series(records, f"{split}/loss")
    _, accuracy = _series(records, f"{split}/exact_match")
    if len(loss) < 3 or np.ptp(loss) == 0 or np.ptp(accuracy) == 0:
        return math.nan
    return float(spearmanr(loss, accuracy).statistic)


def simulate_early_stopping(records: list[Record], monitor: str = "iid_valid/loss",
                            patience: int = 5, mode: str = "min") -> Record:
    """The record early stopping would keep.

    Training stops after ``patience`` consecutive evaluations without a new best of
    ``monitor`` (Kim & Linzen's COGS baseline: patience 5 at 500-step evaluations) and
    the best checkpoint so far is restored. If it never triggers, the best checkpoint
    of the whole run is kept. Returns that evaluation record plus ``stopped_at`` (step
    at which training would have ended; None if it never triggered).
    """
    if mode not in ("min", "max"):
        raise SglabError(f"mode must be 'min' or 'max', got {mode!r}")
    if patience < 1:
        raise SglabError(f"patience must be at least 1, got {patience}")
    sign = 1.0 if mode == "min" else -1.0
    candidates = [r for r in records if monitor in r]
    if not candidates:
        _series(records, monitor)  # raises with the list of logged metrics
    best, since_best = None, 0
    for record in candidates:
        if best is None or sign * record[monitor] < sign * best[monitor]:
            best, since_best = record, 0
        else:
            since_best += 1
            if since_best >= patience:
                return {**best, "stopped_at": record["step"]}
    return {**best, "stopped_at": None}


def steps_to_fraction(records: list[Record], key: str, fraction: float = 0.8) -> int | None:
    """First step where ``key`` reaches ``fraction`` x its final value (None if final <= 0)."""
    steps, values = _series(records, key)
    final = values[-1]
    if final <= 0:
        return None
    reached = np.nonzero(values >= fraction * final)[0]
    return int(steps[reached[0]])


def early_stopping_report(records: list[Record], ood_key: str = "ood_test/exact_match",
                          monitor: str = "iid_valid/loss", patience: int = 5) -> Record:
    """OOD accuracy of the early-stopped checkpoint vs the final and the best one."""
    chosen = simulate_early_stopping(records, monitor, patience)
    steps, ood = _series(records, ood_key)
    return {
        "early_stop_step": chosen["step"], "stopped_at": chosen["stopped_at"],
        "early_stop_ood": float(chosen[ood_key]), "final_ood": float(ood[-1]),
        "best_ood": float(ood.max()), "best_ood_step": int(steps[int(ood.argmax())]),
    }

"""Measures of trained weight masks on the nets they mask (thesis Secs 3.2.3-3.4, App. B.3):
scores of a masked model under several mask sets, per-class true-positive rates and
confusions, sharing along a chain of tasks, and the output layer per output token.

Pure functions on models, tasks and mask tensors. A mask set is ``{parameter name: 0/1
tensor}`` (1 = weight kept), as in :mod:`sglab.analysis.weight_masks`; ``model`` is a masked
model (``sglab.models.masked.MaskedModel``: ``use_masks`` applies a mask set to its frozen
net) and ``task`` an sglab task, scored by :func:`sglab.train.evaluate.evaluate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from sglab.analysis import weight_masks as wm
from sglab.train.evaluate import evaluate, score_split

Masks = dict[str, torch.Tensor]


def all_kept(masks: Masks) -> Masks:
    """A mask set keeping every weight of ``masks``' layers: the unmasked net."""
    return {n: torch.ones_like(m) for n, m in masks.items()}


def evaluate_under_masks(model, task, split: str, masks: Mapping[str, Masks], batch_size: int,
                         max_examples: int | None = None) -> dict[str, dict[str, float]]:
    """``{mask set name: the task's evaluation record on split}``, each mask set applied to
    ``model`` in eval mode (the same examples for every mask set)."""
    records = {}
    for name, chosen in masks.items():
        with model.use_masks(chosen):
            records[name] = evaluate(model.eval(), task, split, batch_size, max_examples)
    return records


def class_scores(model, task, split: str, masks: Mapping[str, Masks], classes: int,
                 batch_size: int = 2000) -> dict[str, dict[str, Any]]:
    """Under each mask set: accuracy, per-class true-positive rates (``tpr``, a list by
    class) and the confusion matrix normalized per true class (thesis Figs 3.7, B.11-B.13)."""
    labels = task.split(split)["labels"]
    out: dict[str, dict[str, Any]] = {"accuracy": {}, "tpr": {}, "confusion": {}}
    for name, chosen in masks.items():
        with model.use_masks(chosen):
            totals = score_split(model.eval(), task, split, batch_size)
        record = task.finalize(split, totals)
        predictions = totals["logits"].argmax(-1)
        out["accuracy"][name] = record[f"{split}/exact_match"]
        out["tpr"][name] = [record[f"{split}/tpr/class={c}"] for c in range(classes)]
        out["confusion"][name] = wm.confusion(predictions, labels, classes)
    return out


def chain_sharing(masks: list[Masks]) -> dict[str, Any]:
    """Per task of a chain (in order) and layer: the share of the task's mask that earlier
    tasks' masks use (``sharing``, thesis Figs 3.4, B.7), the share of the layer earlier
    tasks use (``chance``: what a mask drawn at random would share), the share the masks so
    far occupy (``used``: capacity used) and the task's mask density. Every mask set has
    the layers of the first."""
    layers = list(masks[0])
    out: dict[str, Any] = {"layers": layers, "sharing": [], "chance": [], "used": [],
                           "density": []}
    for t, current in enumerate(masks):
        earlier = masks[:t]
        out["sharing"].append({n: wm.transfer_sharing(current[n], [m[n] for m in earlier])
                               for n in layers})
        out["chance"].append({n: wm.used_fraction([m[n] for m in earlier]) for n in layers})
        out["used"].append({n: wm.used_fraction([m[n] for m in masks[:t + 1]])
                            for n in layers})
        out["density"].append({n: float(current[n].float().mean()) for n in layers})
    return out


def output_rows(reference: torch.Tensor, masks: Mapping[str, torch.Tensor], rows: list[int],
                names: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """An output layer per output token (rows of its weight matrix, named ``names``): the
    share of each row that each mask keeps (``kept``) and, for every mask, the share of the
    weights ``reference`` keeps in the row that the mask removes (``removed``; thesis Fig.
    3.5b: the add-jump mask against the full-data mask)."""
    index = torch.tensor(rows)
    return {"kept": {name: dict(zip(names, (m[index] > 0).float().mean(1).tolist()))
                     for name, m in masks.items()},
            "removed": {name: dict(zip(names, wm.removed_per_row(reference[index],
                                                                  m[index]).tolist()))
                        for name, m in masks.items()}}


__all__ = ["Masks", "all_kept", "chain_sharing", "class_scores", "evaluate_under_masks",
           "output_rows"]

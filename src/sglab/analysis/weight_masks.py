"""Comparing weight masks (thesis Ch. 3, App. B.1-B.2): pure functions on tensors.

A mask set is a dict ``{parameter name: tensor}`` of 0/1 values (1 = weight kept); logits
are the raw mask logits of a mask run. Layers are the masks' keys.
"""

from __future__ import annotations

import torch

from sglab.train.evaluate import evaluate, score_split

Masks = dict[str, torch.Tensor]


def final_mask(logits: Masks) -> Masks:
    """M_i = 1[sigmoid(l_i) > 0.5] (thesis B.1)."""
    return {n: (lg > 0).float() for n, lg in logits.items()}


def apply_masks(weights: Masks, masks: Masks) -> Masks:
    """w * M for every masked weight (weights without a mask are left out)."""
    return {n: weights[n] * masks[n] for n in masks}


def invert(masks: Masks, only: list[str] | None = None, keep: Masks | None = None) -> Masks:
    """1 - M: exactly the removed weights. ``only``: invert these layers and give the others
    the mask ``keep`` (e.g. the full-task mask: hidden-only inversion, Tab. B.2) or, without
    ``keep``, all ones (left unmasked)."""
    out = {}
    for name, mask in masks.items():
        if only is None or name in only:
            out[name] = 1 - mask
        else:
            out[name] = keep[name] if keep is not None else torch.ones_like(mask)
    return out


def count(masks: Masks) -> int:
    """Weights kept, |M| (weights per op, Fig. B.6)."""
    return int(sum(int(m.sum()) for m in masks.values()))


def iou(a: torch.Tensor, b: torch.Tensor) -> float:
    """|A and B| / |A or B| (1 when both are empty)."""
    union = float(((a > 0) | (b > 0)).sum())
    return float(((a > 0) & (b > 0)).sum()) / union if union else 1.0


def iomin(a: torch.Tensor, b: torch.Tensor) -> float:
    """|A and B| / min(|A|, |B|): 1 when one is a subset of the other."""
    smaller = float(min((a > 0).sum(), (b > 0).sum()))
    return float(((a > 0) & (b > 0)).sum()) / smaller if smaller else 1.0


def per_layer(a: Masks, b: Masks, measure=iou) -> dict[str, float]:
    return {n: measure(a[n], b[n]) for n in a}


def union(masks: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """OR of the masks (bool, shaped like ``like``; all False for no masks)."""
    out = torch.zeros_like(like, dtype=torch.bool)
    for mask in masks:
        out |= mask > 0
    return out


def shared_proportion(masks: list[torch.Tensor], i: int) -> float:
    """|M_i and (OR_{j != i} M_j)| / |M_i| (Figs 3.1, 3.3)."""
    mine = masks[i] > 0
    others = union([m for j, m in enumerate(masks) if j != i], mine)
    size = float(mine.sum())
    return float((mine & others).sum()) / size if size else 0.0


def sharing_per_layer(mask_sets: dict[str, Masks]) -> dict[str, dict[str, float]]:
    """{mask name: {layer: shared proportion with the other masks}}."""
    names = list(mask_sets)
    layers = list(mask_sets[names[0]])
    return {name: {layer: shared_proportion([mask_sets[m][layer] for m in names], i)
                   for layer in layers} for i, name in enumerate(names)}


def total_sharing(mask_sets: dict[str, Masks]) -> dict[str, float]:
    """{mask name: shared proportion with the other masks over all its layers together}
    (the totals of thesis Figs B.4-B.5; every mask set has the same layers)."""
    names = list(mask_sets)
    flat = [_flat(mask_sets[name], list(mask_sets[names[0]])) for name in names]
    return {name: shared_proportion(flat, i) for i, name in enumerate(names)}


def transfer_sharing(current: torch.Tensor, earlier: list[torch.Tensor]) -> float:
    """|M_t and (OR_{s<t} M_s)| / |M_t| (thesis Figs 3.4, B.7)."""
    return shared_proportion([current, *earlier], 0) if earlier else 0.0


def used_fraction(masks: list[torch.Tensor]) -> float:
    """|OR_s M_s| / (weights in the layer): the share of a layer's capacity that the masks
    of the tasks so far occupy (0 for no masks)."""
    return float(union(masks, masks[0]).float().mean()) if masks else 0.0


def removed_per_row(reference: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per row of a weight matrix (an output layer's row = one output token): the share of
    the weights ``reference`` keeps that ``mask`` removes, |R_r and not M_r| / |R_r| (thesis
    Fig. 3.5b: the add-jump mask against the full-data mask); 0 for an empty reference row."""
    kept = (reference > 0).flatten(1)
    removed = (kept & ~(mask > 0).flatten(1)).sum(1).float()
    size = kept.sum(1).float()
    return torch.where(size > 0, removed / size.clamp_min(1), torch.zeros_like(size))


def half_masks(masks: Masks, first: bool) -> Masks:
    """The mask on the first ceil(n/2) layers (sorted by name; ``first``) or on the rest,
    the other layers left unmasked (thesis B.1 half-mask test)."""
    names = sorted(masks)
    cut = (len(names) + 1) // 2
    chosen = set(names[:cut] if first else names[cut:])
    return {n: m if n in chosen else torch.ones_like(m) for n, m in masks.items()}


OP_NAMES = ("add", "mul", "none")


def op_confusion(a: torch.Tensor, b: torch.Tensor, op: torch.Tensor,
                 predicted: torch.Tensor) -> torch.Tensor:
    """[2, 3] fractions: rows the true op (add, mul), columns the op the prediction matches
    (add, mul, none). A prediction equal to both results (2+2 = 2*2) counts for both
    (Fig. 3.2), so a row can sum to more than 1."""
    table = torch.zeros(2, 3)
    added, multiplied = (a + b) % 100, (a * b) % 100
    for row in range(2):
        chosen = op == row
        n = max(int(chosen.sum()), 1)
        is_add = predicted[chosen] == added[chosen]
        is_mul = predicted[chosen] == multiplied[chosen]
        table[row, 0] = float(is_add.sum()) / n
        table[row, 1] = float(is_mul.sum()) / n
        table[row, 2] = float((~is_add & ~is_mul).sum()) / n
    return table


def logit_histogram(logits: Masks, bins: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts, bin edges) of sigmoid(l) over all masked weights, ``bins`` bins on [0, 1]
    (Fig. B.3)."""
    values = torch.cat([torch.sigmoid(lg.flatten().float()) for lg in logits.values()])
    return torch.histc(values, bins, 0, 1), torch.linspace(0, 1, bins + 1)


# ----------------------------------------------------------------------------- class removal


def masks_iou(a: Masks, b: Masks) -> float:
    """IoU of two mask sets over all their weights together (mask stability, thesis B.2.1:
    two mask seeds on one net, 93.26 ± 0.96%)."""
    return iou(_flat(a, list(a)), _flat(b, list(a)))


def _flat(masks: Masks, names: list[str]) -> torch.Tensor:
    """The masks of ``names`` as one flat tensor."""
    return torch.cat([masks[n].flatten() for n in names])


def relative_drops(reference: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """Per class (TPR_reference - TPR_masked) / TPR_reference: the relative drop in
    true-positive rate (thesis Fig. 3.7a); 0 for a class the reference never gets right."""
    return torch.where(reference > 0, (reference - masked) / reference.clamp_min(1e-12),
                       torch.zeros_like(reference))


def removal_drops(reference: torch.Tensor, masked: torch.Tensor, removed: int) -> dict[str, float]:
    """The relative drops of a class-removal mask against the full-task mask: the removed
    class's (``target``), the other classes' mean and largest, and the largest other drop
    over the target drop (``max_other_over_target``, thesis Fig. 3.7b; inf when the target
    class does not drop)."""
    drops = relative_drops(reference, masked)
    others = torch.cat([drops[:removed], drops[removed + 1:]])
    target, largest = float(drops[removed]), float(others.max())
    return {"target": target, "others_mean": float(others.mean()), "others_max": largest,
            "max_other_over_target": largest / target if target > 0 else float("inf")}


def confusion(predictions: torch.Tensor, labels: torch.Tensor, classes: int) -> torch.Tensor:
    """[classes, classes]: row = true class, column = predicted class, each row the share of
    that class's examples (thesis Figs B.11-B.13 plot differences of these)."""
    table = torch.zeros(classes, classes)
    table.index_put_((labels, predictions), torch.ones(len(labels)), accumulate=True)
    return table / table.sum(1, keepdim=True).clamp_min(1)


# ----------------------------------------------------------------------------- functional modules
# (Secs 3.2.1-3.2.2, App. B.3.3-B.3.5): a frozen net under its full-task and subtask masks.
# ``model`` is a masked model (``use_masks`` applies a mask set to its frozen net), ``task`` an
# sglab task, scored by :func:`sglab.train.evaluate.evaluate` (its ``split`` and predictions
# for the add/mul confusion).


def weight_layers(masks: Masks) -> list[str]:
    """The masked weight matrices (tensors of two or more dimensions), in the masks' order."""
    return [n for n, m in masks.items() if m.dim() >= 2]


def tried_masks(final: dict[str, Masks], subsets: list[str]) -> dict[str, Masks]:
    """The mask sets a net is tested under, from the final masks of the full task (``full``)
    and of each subtask: none (all ones), the full-task mask and its halves (B.1), and per
    subtask its mask, its inversion (``not X``, Tabs 3.1/B.1) and its inversion in the hidden
    layers only with the full-task mask on the first and last (``not X (hidden)``, Tab. B.2)."""
    full = final["full"]
    layers = list(full)
    tried = {"none": {n: torch.ones_like(m) for n, m in full.items()}, "full": full,
             "full, first half": half_masks(full, first=True),
             "full, second half": half_masks(full, first=False)}
    hidden = [n for n in layers if n not in (layers[0], layers[-1])]  # I/O stay
    for name in subsets:
        tried[name], tried[f"not {name}"] = final[name], invert(final[name])
        tried[f"not {name} (hidden)"] = invert(final[name], only=hidden, keep=full)
    return tried


def accuracy_under_masks(model, task, tried: dict[str, Masks], split: str, groups: list[str],
                         batch_size: int = 2000) -> dict[str, dict[str, float]]:
    """``{mask set: {group: exact match on split}}`` with each mask set applied to ``model``
    (eval mode; groups as the task's metric groups, e.g. ``op=add``)."""
    accuracy = {}
    for name, chosen in tried.items():
        with model.use_masks(chosen):
            record = evaluate(model.eval(), task, split, batch_size)
        accuracy[name] = {g: record[f"{split}/exact_match/{g}"] for g in groups}
    return accuracy


def subtask_mask_measures(model, task, final: dict[str, Masks], logits: dict[str, Masks],
                          subsets: list[str], groups: list[str], split: str) -> dict:
    """One net's measures: accuracy per (mask set of :func:`tried_masks`, group), weights
    kept per final mask, the per-layer shared proportion between the subtask masks (Figs
    3.1/3.3) over the weight matrices, and the histogram of each mask's keep probabilities
    (Fig. B.3). ``final``/``logits``: per mask run (``full`` and each subtask) its final
    masks and its mask logits."""
    layers = weight_layers(final["full"])
    sharing = sharing_per_layer({n: {k: final[n][k] for k in layers} for n in subsets})
    return {"accuracy": accuracy_under_masks(model, task, tried_masks(final, subsets), split,
                                             groups),
            "kept": {n: count(m) for n, m in final.items()},
            "histograms": {n: logit_histogram(lg)[0].tolist() for n, lg in logits.items()},
            "sharing": sharing, "layers": layers}


def op_confusion_under_masks(model, task, masks: dict[str, Masks], split: str
                             ) -> dict[str, torch.Tensor]:
    """Add/mul: per mask set, :func:`op_confusion` of the net's answers on split (Fig. 3.2)."""
    data = task.split(split)
    out = {}
    for name, chosen in masks.items():
        with model.use_masks(chosen):
            digits = score_split(model.eval(), task, split, 1024)["predicted"] - task.digit_ids[0]
        out[name] = op_confusion(data["a"], data["b"], data["op"], digits[:, 0] * 10 + digits[:, 1])
    return out


def mask_set_sharing(final: dict[str, Masks]) -> dict:
    """Over the weight matrices of two or more mask sets (e.g. add and mul): each one's shared
    proportion over all layers together (``total``, Figs B.4-B.5) and per layer
    (``layers``), and the weights each keeps (``kept``)."""
    names = list(final)
    layers = weight_layers(final[names[0]])
    masks = {n: {k: final[n][k] for k in layers} for n in names}
    return {"total": total_sharing(masks), "layers": sharing_per_layer(masks),
            "kept": {n: count(masks[n]) for n in names}}

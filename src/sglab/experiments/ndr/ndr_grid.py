"""The Neural Data Router experiments' grids (model variants, presets, labelled runs) and
their accuracy tables at the selected checkpoint.

Thesis Ch. 5 (App. D.3): the shared-layer Transformer and its gated variants, the NDR,
the ACT rows of Table D.2 and the LSTM classifiers; the CTL grid (forward and backward
presentation, the depth ablation of Table 5.2) and the grids of the tasks split by depth
(arithmetic, ListOps). Every run is an :class:`~sglab.experiments.runs.Arm` labelled with
its variant key (``ndr``, ``ndr@8`` for the 8-step NDR), its model name as the tables
print it and its condition (the CTL direction). Accuracies are read at the checkpoint
with the best OOD-validation accuracy (``FinishedRun.selected``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from sglab.config import deep_merge
from sglab.experiments.runs import Arm, FinishedRun, RunSet, selected

LABELS = {
    "transformer": "Transformer", "rel": "+ rel", "geom": "+ geom.", "rel_gate": "+ rel + gate",
    "abs_rel_gate": "+ abs/rel + gate", "ndr": "NDR", "lstm": "LSTM", "bilstm": "BiLSTM",
    "transformer_act": "Transformer + ACT-A", "rel_act": "+ rel + ACT-A",
    "rel_act_ut": "+ rel + ACT-U", "geom_act": "+ geom. + ACT-A", "geom_act_ut": "+ geom. + ACT-U",
}
IID, OOD, TEST = "iid_valid/exact_match", "ood_valid/exact_match", "ood_test/exact_match"


def model_label(key: str) -> str:
    """``NDR``, ``+ rel + gate``, ``NDR, 8 steps`` (the depth ablation ``ndr@8``)."""
    if key.startswith("ndr@"):
        return f"NDR, {key.split('@')[1]} steps"
    return LABELS.get(key, key)


# ----------------------------------------------------------------------------- model variants


def transformer_variants(d_model: int, n_heads: int, n_layers: int, d_ff: int, dropout: float,
                         gated_d_model: int, gated_heads: int, gated_layers: int,
                         gated_d_ff: int, gated_dropout: float, attention_dropout: float,
                         gate_dropout: float, readout: str) -> dict[str, dict[str, Any]]:
    """Model sections of the five transformer variants (thesis Sec. 5.2, App. D.3.3)."""
    # PyTorch's module inits (unit-scale embeddings) as in the thesis code; the N(0, 0.02)
    # GPT init leaves the copy path of a gated column with a vanishing token identity
    common = {"name": "transformer", "norm": "post", "attention_mask": "bidirectional",
              "shared_layers": True, "activation": "relu", "bias": True,
              "tie_embeddings": False, "readout": readout, "init": "torch"}
    plain = {**common, "d_model": d_model, "n_heads": n_heads, "n_layers": n_layers,
             "d_ff": d_ff, "dropout": dropout}
    gated = {**common, "d_model": gated_d_model, "n_heads": gated_heads,
             "n_layers": gated_layers, "d_ff": gated_d_ff, "dropout": gated_dropout,
             "copy_gate": True, "attention_dropout": attention_dropout}
    return {
        "transformer": {**plain, "pos_encoding": "sinusoidal"},
        "rel": {**plain, "pos_encoding": "relative"},
        # geometric attention without the copy gate (Table 5.1 "+ geom.")
        "geom": {**plain, "pos_encoding": "none", "attention": "geometric"},
        "rel_gate": {**gated, "pos_encoding": "relative", "update_norm": "tanh"},
        "abs_rel_gate": {**gated, "pos_encoding": "none", "attention": "abs_rel_gated",
                         "update_norm": "tanh"},
        "ndr": {**gated, "pos_encoding": "none", "attention": "geometric",
                "update_norm": "layernorm", "gate_dropout": gate_dropout},
    }


def act_variants(models: dict[str, dict[str, Any]], n_layers: int) -> dict[str, dict[str, Any]]:
    """Thesis App. D.1 / Table D.2: the gate-less shared-layer models with adaptive
    computation time over at most ``n_layers`` steps ("A": Graves, "U": Dehghani et al.)."""
    rows = {"transformer_act": ("transformer", "graves"), "rel_act": ("rel", "graves"),
            "rel_act_ut": ("rel", "ut"), "geom_act": ("geom", "graves"),
            "geom_act_ut": ("geom", "ut")}
    return {key: {**models[base], "act": act, "n_layers": n_layers}
            for key, (base, act) in rows.items()}


def lstm_variants(d_model: int, n_layers: int, dropout: float) -> dict[str, dict[str, Any]]:
    return {
        "lstm": {"name": "lstm", "d_model": d_model, "n_layers": n_layers, "dropout": dropout},
        "bilstm": {"name": "lstm", "d_model": 2 * d_model, "n_layers": n_layers,
                   "dropout": dropout, "bidirectional": True},
    }


def train_section(steps: int, batch: int, lr: float, weight_decay: float, grad_clip: float,
                  eval_every: int, **extra) -> dict[str, Any]:
    return {"steps": steps, "batch_size": batch, "lr": lr, "lr_schedule": "constant",
            "warmup_steps": 0, "weight_decay": weight_decay, "grad_clip": grad_clip,
            "eval_interval": eval_every, "log_interval": eval_every,
            "checkpoint_interval": eval_every, "target_metric": "ood_valid/exact_match",
            "target_threshold": 0.99, **extra}


# ----------------------------------------------------------------------------- presets


def ctl_preset(steps: int, gated_steps: int, ndr_steps: int, lstm_steps: int, seeds: list[int],
               d_model: int,
               gated_d_model: int, batch: int, eval_every: int, train_size: int,
               depth_ablation: list[int], ndr_layers: int = 14, plain_layers: int = 11,
               lr: float = 1e-3, dropout: float = 0.1, eval_max_examples: int | None = None,
               act_steps: int | None = None, gated_eval_layers: int | None = None,
               sampling: str = "dataset", gated_heads: int = 1, gated_dropout: float | None = None,
               attention_dropout: float | None = None, gated_lr: float | None = None,
               ndr_lr: float | None = None, lstm_d_model: int | None = None,
               lstm_batch: int | None = None, ablation_conditions: list[str] | None = None,
               gated_ffn: str = "relu", ndr_backward_steps: int | None = None,
               ablation_steps: int | None = None, gated_baseline: dict | None = None,
               variant_steps: dict[str, dict[str, int]] | None = None,
               betas: tuple[float, float] = (0.9, 0.99), baseline_sampling: str | None = None,
               scored_classes: str = "vocabulary", ndr_task: dict[str, Any] | None = None,
               quiet: bool = True) -> dict[str, Any]:
    """CTL grid: thesis Table D.3 shapes, scaled by width, batch and steps; with
    ``act_steps`` also the ACT rows of Table D.2 (14 steps at most, trained that long).
    ``gated_eval_layers``: the copy-gated models train with ``ndr_layers`` steps and are
    evaluated with this many (a gated column that is done copies itself, so extra steps
    are harmless; the thesis's CTL++ NDR trains with 8 and tests with 10).
    ``sampling``: the CTL task's ``train_sampling`` (dataset: the thesis's length mix;
    uniform: fresh sequences, lengths uniform over 1-5). ``gated_ffn``: the copy-gated
    layers' ``copy_gate_ffn`` (relu: Eqs. 5.2, 5.5; gelu_residual: App. E).
    ``gated_baseline``: model fields of "+ rel + gate" and "+ abs/rel + gate" on top of
    the gated models' (their data FFN is 4 d wide as in the thesis code, whatever Table
    D.3 prints). ``variant_steps``: ``{variant: {direction: steps}}``, training steps of
    a variant in one direction (the NDR's backward steps: ``ndr_backward_steps``).
    ``baseline_sampling``: ``train_sampling`` of every model but the NDR and its depth
    ablation, where it differs (the thesis code buckets lengths only in the NDR's sweeps,
    ``ctl_ndr_geometric.yaml`` and ``ctl_ndr_layer_ablation.yaml``; its baselines, gated
    ones included, train on mixed-length batches). ``scored_classes``: the CTL task's field
    (``labels``: every classifier scores the 8 symbols only, as the thesis code's heads).
    ``ndr_task``: task fields of the NDR and its depth ablation alone (e.g. one length per
    batch, as the thesis code's NDR sweeps sample)."""
    models = transformer_variants(
        d_model=d_model, n_heads=4, n_layers=plain_layers, d_ff=2 * d_model, dropout=dropout,
        gated_d_model=gated_d_model, gated_heads=gated_heads, gated_layers=ndr_layers,
        gated_d_ff=2 * gated_d_model,
        gated_dropout=dropout if gated_dropout is None else gated_dropout,
        attention_dropout=dropout if attention_dropout is None else attention_dropout,
        gate_dropout=0.1, readout="last")
    variants = {key: {"model": spec} for key, spec in models.items()}
    for key in ("rel_gate", "abs_rel_gate", "ndr"):
        variants[key]["model"]["copy_gate_ffn"] = gated_ffn
        variants[key]["train"] = {"steps": ndr_steps if key == "ndr" else gated_steps,
                                  "weight_decay": 0.01}
        if gated_eval_layers:
            variants[key]["model"]["eval_steps"] = gated_eval_layers
        if key != "ndr":
            variants[key]["model"].update({"d_ff": 4 * gated_d_model, **(gated_baseline or {})})
    if act_steps:
        for key, spec in act_variants(models, n_layers=ndr_layers).items():
            variants[key] = {"model": spec, "train": {"steps": act_steps}}
    for key in variants:
        own = {"ndr": ndr_lr, "rel_gate": gated_lr, "abs_rel_gate": gated_lr}.get(key)
        variants[key].setdefault("train", {})["lr"] = own or lr
    for key, spec in lstm_variants(d_model=lstm_d_model or 2 * gated_d_model, n_layers=1,
                                   dropout=0.5).items():
        variants[key] = {"model": spec, "train": {"steps": lstm_steps, "weight_decay": 0.0,
                                                  "lr": 1e-3, "batch_size": lstm_batch or batch},
                         "extra": {"task": {"boundary_tokens": False}}}
    if ndr_task:
        variants["ndr"].setdefault("extra", {}).setdefault("task", {}).update(ndr_task)
    if baseline_sampling:
        for key, spec in variants.items():
            if key != "ndr":
                spec.setdefault("extra", {}).setdefault("task", {})["train_sampling"] = \
                    baseline_sampling
    return {
        "task": {"name": "ctl", "train_size": train_size, "train_sampling": sampling,
                 "scored_classes": scored_classes},
        "train": train_section(steps, batch, 1e-3, 0.0025, 5.0, eval_every, threads=1,
                               eval_max_examples=eval_max_examples, betas=betas,
                               early_stop_metric="ood_valid/exact_match",
                               early_stop_threshold=0.998),
        "variants": variants,
        "conditions": {"forward": {"direction": "forward"}, "backward": {"direction": "backward"}},
        "seeds": seeds, "depth_ablation": depth_ablation,
        "ablation_train_steps": ablation_steps or ndr_steps,
        "ablation_conditions": ablation_conditions,
        "condition_steps": {**({"ndr": {"backward": ndr_backward_steps}}
                                 if ndr_backward_steps else {}), **(variant_steps or {})},
        "n_classes": 8,
        "routing_condition": "backward", "quiet": quiet,
    }


def depth_task_preset(task: dict, steps: int, gated_steps: int, lstm_steps: int, seeds: list[int],
                      d_model: int, n_heads: int, n_layers: int, gated_d_model: int,
                      gated_heads: int, gated_layers: int, lstm_d_model: int, lstm_layers: int,
                      batch: int, lr: float, gated_lr: float, eval_every: int, readout: str,
                      gate_dropout: float, eval_steps: int | None = None,
                      eval_max_examples: int | None = None, dropout: float = 0.1,
                      baseline_dropout: float | None = None, baseline_readout: str | None = None,
                      gated_ff_multiplier: int = 4, weight_decay: float = 0.0025,
                      gated_weight_decay: float = 0.01, lstm_weight_decay: float = 0.0,
                      gated_batch: int | None = None, ndr_model: dict[str, Any] | None = None,
                      lstm_task: dict[str, Any] | None = None,
                      min_lr: float | None = None,
                      variant_train: dict[str, dict[str, Any]] | None = None,
                      quiet: bool = True) -> dict[str, Any]:
    """Grid for a task split by depth (thesis Tables D.4 / D.5 shapes). ``dropout``: the
    gated transformers' (and the others' unless ``baseline_dropout``); attention dropout
    0.1; ``baseline_readout``: the gate-less transformers' readout column where it differs
    from the gated models' ``readout``; ``weight_decay``: the gate-less transformers';
    ``gated_batch``: the gated transformers' batch size where it differs from ``batch``;
    ``ndr_model``: model fields of the NDR alone (e.g. its FFN, as ``ctl_preset``'s);
    ``lstm_task``: task fields of the LSTMs alone (they never see the <B>/<E> frame);
    ``min_lr``: every run's learning rate decays from its own ``lr`` to this over its steps
    (a cosine; None: constant, as the thesis code); ``variant_train``: train fields of one
    variant on top of the rest (``{"bilstm": {"steps": 3000}}``)."""
    models = transformer_variants(
        d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=4 * d_model,
        dropout=dropout if baseline_dropout is None else baseline_dropout,
        gated_d_model=gated_d_model, gated_heads=gated_heads, gated_layers=gated_layers,
        gated_d_ff=gated_ff_multiplier * gated_d_model, gated_dropout=dropout,
        attention_dropout=0.1, gate_dropout=gate_dropout, readout=readout)
    variants = {key: {"model": spec} for key, spec in models.items()
                if key not in ("rel_gate", "geom")}  # rows of Tables 5.3 / 5.4
    for key in ("transformer", "rel"):
        variants[key]["model"]["readout"] = baseline_readout or readout
    variants["ndr"]["model"].update(ndr_model or {})
    for key in ("abs_rel_gate", "ndr"):
        variants[key]["train"] = {"steps": gated_steps, "lr": gated_lr,
                                  "weight_decay": gated_weight_decay,
                                  **({"batch_size": gated_batch} if gated_batch else {})}
        if eval_steps:
            variants[key]["model"]["eval_steps"] = eval_steps
    for key, spec in lstm_variants(lstm_d_model, lstm_layers, dropout=0.1).items():
        variants[key] = {"model": spec, "train": {"steps": lstm_steps, "lr": 1e-3,
                                                  "weight_decay": lstm_weight_decay},
                         "extra": {"task": {"boundary_tokens": False, **(lstm_task or {})}}}
    for key, fields in (variant_train or {}).items():
        variants[key].setdefault("train", {}).update(fields)
    return {
        "task": task,
        "train": train_section(steps, batch, lr, weight_decay, 1.0, eval_every, threads=1,
                               eval_max_examples=eval_max_examples,
                               **({} if min_lr is None else
                                  {"lr_schedule": "cosine", "min_lr": min_lr})),
        "variants": variants, "conditions": {"all": {}}, "seeds": seeds, "n_classes": 10,
        "quiet": quiet,
    }


# ----------------------------------------------------------------------------- labelled runs


def _dotted(prefix: str, section: dict[str, Any]) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"prefix.a.b": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in section.items():
        if isinstance(value, dict):
            flat.update(_dotted(f"{prefix}.{key}", value))
        else:
            flat[f"{prefix}.{key}"] = value
    return flat


def row_keys(params: dict[str, Any]) -> list[str]:
    """The table rows: every variant, then the depth-ablation NDRs (``ndr@<steps>``)."""
    return [*params["variants"], *(f"ndr@{s}" for s in params.get("depth_ablation", []))]


def ndr_arms(params: dict[str, Any], condition_label: str) -> list[Arm]:
    """Every variant x condition x seed, then the depth ablation (Table 5.2: the NDR with
    this many steps in training and at test time). The NDR comes first so that its runs
    (the slowest to converge) start first."""
    grid = [(variant, variant, condition)
            for variant in sorted(params["variants"], key=lambda v: v != "ndr")
            for condition in params["conditions"]]
    grid += [(f"ndr@{steps}", "ndr", condition)
             for steps in params.get("depth_ablation", [])
             for condition in params.get("ablation_conditions") or params["conditions"]]
    arms = []
    for key, variant, condition in grid:
        spec = params["variants"][variant]
        base = deep_merge({"task": params["task"], "model": spec["model"],
                           "train": deep_merge(params["train"], spec.get("train", {}))},
                          spec.get("extra", {}))
        overrides = _dotted("task", params["conditions"][condition])
        steps_here = params.get("condition_steps", {}).get(key, {}).get(condition)
        if steps_here:  # e.g. a longer budget for the NDR in the backward direction
            overrides["train.steps"] = steps_here
        if key.startswith("ndr@"):
            steps = int(key.split("@")[1])
            overrides.update({"model.n_layers": steps, "model.eval_steps": steps})
            if params.get("ablation_train_steps"):
                overrides["train.steps"] = params["ablation_train_steps"]
        labels = {"variant": key, "model": model_label(key), condition_label: condition}
        arms += [Arm(labels, base, overrides, seed) for seed in params["seeds"]]
    return arms


# ----------------------------------------------------------------------------- tables


def _mean_std(runs: RunSet, get: Callable[[FinishedRun], Any]) -> str:
    """Mean ± std over the runs that have the value (``-`` when none has it)."""
    return runs.where(lambda run: get(run) is not None).mean_std(get, digits=3)


def accuracy_table(params: dict[str, Any], runs: RunSet, condition_label: str
                   ) -> dict[str, Any]:
    """One row per model (the depth ablation last), per condition IID, OOD-validation
    and test accuracy at the selected checkpoint and test accuracy at the last step."""
    conditions = list(params["conditions"])
    fields: dict[str, Callable[[FinishedRun], Any]] = {
        "IID": selected(IID), "OOD valid": selected(OOD), "test": selected(TEST),
        "final-step test": lambda run: run.final.get(TEST)}
    rows = []
    for key in row_keys(params):
        # the depth ablation may run some conditions only
        cells = [runs.where(variant=key, **{condition_label: c}) for c in conditions]
        chosen = [run for cell in cells for run in cell]
        rows.append([model_label(key),
                     *(_mean_std(cell, get) for get in fields.values() for cell in cells),
                     ", ".join(str(run.selected["step"]) for run in chosen),
                     f"{statistics.mean(run.summary.get('seconds') or 0 for run in chosen):.0f}"])
    return {"title": "Accuracy at the checkpoint with the best OOD-validation accuracy "
                     "(thesis model selection; mean ± std over seeds), and test accuracy at "
                     "the last step",
            "columns": ["model", *(f"{field} {c}" for field in fields for c in conditions),
                        "selected step", "train seconds"],
            "rows": rows,
            "note": f"chance = 1/{params['n_classes']} = {1 / params['n_classes']:.3f}; "
                    f"seeds: {params['seeds']}"}


def group_table(params: dict[str, Any], runs: RunSet, condition_label: str,
                group: str) -> dict[str, Any]:
    """Test accuracy at the selected checkpoint by ``group`` (length, depth)."""
    conditions = list(params["conditions"])
    prefix = f"{TEST}/{group}="
    values = list(runs.group_means(prefix, record=lambda run: run.selected))
    rows = [[model_label(key), condition,
             *(_mean_std(cell, selected(f"{prefix}{value}")) for value in values)]
            for (key, condition), cell in runs.group_by("variant", condition_label).items()]
    rows.sort(key=lambda row: (row[0], conditions.index(row[1])))
    return {"title": f"Test accuracy by {group}",
            "columns": ["model", "condition", *(f"{group}={v}" for v in values)],
            "rows": rows}

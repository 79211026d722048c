"""The Neural Data Router experiments' grids (their preset parameters, labelled runs) and
their accuracy tables at the selected checkpoint.

Thesis Ch. 5 (App. D.3): the shared-layer Transformer and its gated variants, the NDR,
the ACT rows of Table D.2 and the LSTM classifiers; the CTL grid (forward and backward
presentation, the depth ablation of Table 5.2) and the grids of the tasks split by depth
(arithmetic, ListOps). A preset (``ndr-*.yaml``, :class:`NDRParams`) names every variant's
run sections; every run is an :class:`~sglab.experiments.runs.Arm` labelled with
its variant key (``ndr``, ``ndr@8`` for the 8-step NDR), its model name as the tables
print it and its condition (the CTL direction). Accuracies are read at the checkpoint
with the best OOD-validation accuracy (``FinishedRun.selected``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sglab.config import build_run_config, deep_merge
from sglab.errors import SglabError
from sglab.experiments.runs import Arm, FinishedRun, RunSet, selected
from sglab.experiments.spec import ExperimentParams

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


# ----------------------------------------------------------------------------- parameters


class Variant(BaseModel):
    """The run sections of one model of the grid (a row of Tables 5.1-5.4)."""

    model_config = ConfigDict(extra="forbid")
    model: dict[str, Any]  # the model section (its fields depend on the model)
    train: dict[str, Any] = Field(default_factory=dict)  # train fields over the preset's train
    task: dict[str, Any] = Field(default_factory=dict)  # task fields over the preset's task


class DepthAblation(BaseModel):
    """Table 5.2: the NDR with fewer steps, in training and at test time."""

    model_config = ConfigDict(extra="forbid")
    steps: list[int]  # one NDR per entry, with this many steps (run key ``ndr@<steps>``)
    conditions: list[str] | None = None  # the conditions it runs in (None: every condition)
    train_steps: int | None = None  # its training steps (None: the NDR variant's)
    # the report also tests each with this many steps more than it trained with (its one
    # layer applied longer; Table 5.2's rows and claims keep the training depth)
    extra_test_steps: list[Annotated[int, Field(ge=1)]] = [2, 4]


class NDRParams(ExperimentParams):
    """The parameters of an NDR experiment's preset."""

    task: dict[str, Any]  # the task section every run starts from
    train: dict[str, Any]  # the train section every run starts from
    variants: dict[str, Variant]  # model key (ndr, rel_gate, lstm, ...) -> its run sections
    conditions: dict[str, dict[str, Any]]  # condition (CTL: direction) -> its task fields
    condition_steps: dict[str, dict[str, int]] = Field(
        default_factory=dict)  # variant -> condition -> training steps in that condition
    depth_ablation: DepthAblation | None = None  # Table 5.2's shallower NDRs (None: none)
    n_classes: int  # output classes of the task (chance accuracy is 1 / n_classes)
    routing_condition: str | None = None  # the NDR's condition shown step by step (None: first)

    @model_validator(mode="after")
    def _runs_build(self) -> NDRParams:
        """Every variant in every condition is a valid run config; the conditions and
        variants named elsewhere exist."""
        if "ndr" not in self.variants:
            raise ValueError("the grid has no 'ndr' variant")
        named = [*(self.depth_ablation.conditions or [] if self.depth_ablation else []),
                 *([self.routing_condition] if self.routing_condition else []),
                 *(c for steps in self.condition_steps.values() for c in steps)]
        unknown = sorted(set(named) - set(self.conditions))
        if unknown:
            raise ValueError(f"unknown conditions {unknown}; conditions: {list(self.conditions)}")
        if set(self.condition_steps) - set(self.variants):
            raise ValueError(f"condition_steps names unknown variants "
                             f"{sorted(set(self.condition_steps) - set(self.variants))}")
        for key, variant in self.variants.items():
            for condition, fields in self.conditions.items():
                try:
                    build_run_config(_sections(self.task, self.train, variant.model_dump()),
                                     _dotted("task", fields))
                except SglabError as exc:
                    raise ValueError(f"variant {key!r} in {condition!r}: "
                                     + str(exc).replace("\n", " ")) from None
        return self


# ----------------------------------------------------------------------------- labelled runs


def _sections(task: dict[str, Any], train: dict[str, Any], variant: dict[str, Any]
              ) -> dict[str, Any]:
    """A variant's run config: the preset's task and train sections with its own on top."""
    return {"task": deep_merge(task, variant.get("task", {})), "model": variant["model"],
            "train": deep_merge(train, variant.get("train", {}))}


def _dotted(prefix: str, section: dict[str, Any]) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"prefix.a.b": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in section.items():
        if isinstance(value, dict):
            flat.update(_dotted(f"{prefix}.{key}", value))
        else:
            flat[f"{prefix}.{key}"] = value
    return flat


def ablation_steps(params: dict[str, Any]) -> list[int]:
    """The steps of the depth-ablation NDRs (none without a depth ablation)."""
    return list((params.get("depth_ablation") or {}).get("steps", []))


def ablation_conditions(params: dict[str, Any]) -> list[str]:
    """The conditions the depth-ablation NDRs run in."""
    return list((params.get("depth_ablation") or {}).get("conditions")
                or params["conditions"])


def row_keys(params: dict[str, Any]) -> list[str]:
    """The table rows: every variant, then the depth-ablation NDRs (``ndr@<steps>``)."""
    return [*params["variants"], *(f"ndr@{s}" for s in ablation_steps(params))]


def ndr_arms(params: dict[str, Any], condition_label: str) -> list[Arm]:
    """Every variant x condition x seed, then the depth ablation (Table 5.2: the NDR with
    this many steps in training and at test time). The NDR comes first so that its runs
    (the slowest to converge) start first."""
    grid = [(variant, variant, condition)
            for variant in sorted(params["variants"], key=lambda v: v != "ndr")
            for condition in params["conditions"]]
    grid += [(f"ndr@{steps}", "ndr", condition)
             for steps in ablation_steps(params) for condition in ablation_conditions(params)]
    train_steps = (params.get("depth_ablation") or {}).get("train_steps")
    arms = []
    for key, variant, condition in grid:
        base = _sections(params["task"], params["train"], params["variants"][variant])
        overrides = _dotted("task", params["conditions"][condition])
        steps_here = params.get("condition_steps", {}).get(key, {}).get(condition)
        if steps_here:  # e.g. a longer budget for the NDR in the backward direction
            overrides["train.steps"] = steps_here
        if key.startswith("ndr@"):
            steps = int(key.split("@")[1])
            overrides.update({"model.n_layers": steps, "model.block.eval_steps": steps})
            if train_steps:
                overrides["train.steps"] = train_steps
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


def test_at_steps(run: FinishedRun, steps: int) -> float:
    """Test accuracy of ``run``'s selected checkpoint with its shared layer applied ``steps``
    times, on every test input (evaluations during training may score a subset)."""
    from sglab.train.evaluate import evaluate

    model = run.model("best").with_eval_steps(steps)
    return evaluate(model, run.task, TEST.split("/")[0], run.config.train.eval_batch_size)[TEST]


def test_steps_table(params: dict[str, Any], runs: RunSet, condition_label: str
                     ) -> dict[str, Any] | None:
    """Test accuracy of each depth-ablation NDR at its training depth and with
    ``depth_ablation.extra_test_steps`` more steps (mean, then every seed); None without a
    depth ablation."""
    extra = (params.get("depth_ablation") or {}).get("extra_test_steps") or []
    rows = []
    for steps in ablation_steps(params):
        for condition in ablation_conditions(params):
            cell = runs.where(variant=f"ndr@{steps}", **{condition_label: condition})
            if not cell:
                continue
            row = [model_label(f"ndr@{steps}"), condition]
            for n in (steps, *(steps + e for e in extra)):
                values = [run.measure(f"test at {n} steps",
                                      lambda run, n=n: test_at_steps(run, n)) for run in cell]
                row.append(f"{statistics.mean(values):.3f} ("
                           + " / ".join(f"{v:.3f}" for v in values) + ")")
            rows.append(row)
    if not rows:
        return None
    return {"title": "Depth-ablation NDRs tested with more steps than they trained with",
            "columns": ["model", condition_label, "test, training depth",
                        *(f"test, {e} steps more" for e in extra)],
            "rows": rows,
            "note": f"mean (seeds {params['seeds']}) over every test input, at the "
                    "checkpoint with the best OOD-validation accuracy (the accuracy table "
                    "reads the evaluation made there, which may score a subset); the extra "
                    "steps apply the same trained layer again (nothing retrained)"}


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


def selection_points(evaluations: list[dict[str, Any]], select_on: str = OOD,
                     test: str = TEST) -> dict[str, tuple[int, float]] | None:
    """(step, test accuracy) of one run at the checkpoints that different selection rules
    keep: ``first best`` (sglab's: the first evaluation with the best ``select_on``),
    ``last best`` (the authors' code: the last one with that value,
    ``paper/lib/cross_validate_stats.py``), ``final`` (the last evaluation) and ``peak test``
    (the best test accuracy seen, which no rule may select: how much a rule leaves).
    None when no evaluation carries both metrics."""
    records = [r for r in evaluations if select_on in r and test in r]
    if not records:
        return None
    best = max(r[select_on] for r in records)
    at_best = [r for r in records if r[select_on] == best]
    peak = max(records, key=lambda r: r[test])
    return {name: (record["step"], record[test]) for name, record in
            (("first best", at_best[0]), ("last best", at_best[-1]), ("final", records[-1]),
             ("peak test", peak))}


def selection_table(runs: RunSet, keys: list[str], condition_label: str, condition: str
                    ) -> dict[str, Any] | None:
    """Test accuracy of each seed of ``keys`` in ``condition`` at the checkpoints of
    :func:`selection_points`; None when none of them trained."""
    rows = []
    for key in keys:
        for run in runs.where(variant=key, **{condition_label: condition}):
            points = selection_points(run.evaluations)
            if points is None:
                continue
            rows.append([model_label(key), run.seed,
                         *(f"{test:.3f} @ {step:,}" for step, test in points.values())])
    if not rows:
        return None
    return {"title": f"Test accuracy by the checkpoint kept ({condition})",
            "columns": ["model", "seed", *(f"test, {name}" for name in
                                           ("first best OOD valid", "last best OOD valid",
                                            "final step", "peak during training"))],
            "rows": rows,
            "note": "accuracy @ step, from the evaluations made during training (these may "
                    "score a subset of each split); the claims read the first best"}

"""The Neural Data Router (thesis Ch. 5): length generalization on CTL, arithmetic, ListOps.

Each experiment trains the NDR (geometric attention + copy gate, shared layers) and
the baselines of thesis Tables 5.1, 5.3 and 5.4 -- the shared-layer Transformer with
sinusoidal positions, + relative attention (Transformer-XL), + geometric attention
without the gate (CTL), + rel + copy gate (tanh update), + gated abs/rel attention +
copy gate, LSTM / BiLSTM classifiers, and on CTL the ACT models of Table D.2 -- on
generated data whose test split is longer or deeper than anything in training. As in the
thesis, the checkpoint with the best OOD validation accuracy is selected and its test
accuracy reported (the Trainer keeps that checkpoint as ``best.pt``; its metrics come from
the same evaluation record). Presets and claims: ``ndr-ctl.yaml``, ``ndr-arithmetic.yaml``,
``ndr-listops.yaml`` beside this module (parameters: :class:`~sglab.experiments.ndr.
ndr_grid.NDRParams`).
The report shows the accuracy table and, for the NDR, attention maps and gate
activity step by step for one test input; on CTL also where each gated model's readout
column reads from, by input length (Sec. 5.2.1; both in
:mod:`sglab.experiments.ndr.ndr_routing`). The grids are built in
:mod:`sglab.experiments.ndr.ndr_grid`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglab import registry
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured, PerSeed, per_seed
from sglab.experiments.ndr.ndr_grid import (
    IID,
    TEST,
    NDRParams,
    ablation_conditions,
    ablation_steps,
    accuracy_table,
    group_table,
    model_label,
    ndr_arms,
    row_keys,
    selection_table,
    test_steps_table,
)
from sglab.experiments.ndr.ndr_routing import (
    gates_open_in_order,
    readout_by_length,
    readout_figure,
    readout_table,
    routing_figures,
    routing_probe,
)
from sglab.experiments.runs import Arm, FinishedRun, RunSet, selected
from sglab.report.plots import Panel, learning_curves, metric_line


class NDRExperiment(Experiment):
    """Shared machinery; the subclasses set the task's claims (presets: the spec file)."""

    params_model = NDRParams
    condition_label = "condition"  # the label naming a condition (CTL: its direction)

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        return ndr_arms(params, self.condition_label)

    def cell(self, runs: RunSet, key: str, condition: str) -> RunSet:
        """The seeds of one row key (``ndr``, ``ndr@8``) in one condition, in seed order."""
        return runs.where(variant=key, **{self.condition_label: condition})

    def seed_values(self, runs: RunSet, key: str, condition: str, metric: str = TEST) -> PerSeed:
        """``metric`` at the selected checkpoint, one value per seed."""
        return per_seed(self.cell(runs, key, condition).values(selected(metric)))

    # ------------------------------------------------------------------ figures
    def curves_figure(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict:
        panels = []
        for condition in params["conditions"]:
            lines = [metric_line(run.evaluations, TEST, model_label(key) if index == 0 else None,
                                 color)
                     for color, key in enumerate(params["variants"])
                     for index, run in enumerate(self.cell(runs, key, condition))]
            panels.append(Panel(condition, lines, hlines=[(1 / params["n_classes"], None)],
                                ylim=(-0.02, 1.02)))
        return learning_curves(out_dir, "curves", panels, ylabel="test accuracy (longer / "
                               "deeper inputs)", caption="Test accuracy during training, one "
                               "line per seed; dotted: chance.")

    @staticmethod
    def routing_condition(params: dict[str, Any]) -> str:
        """The condition whose routing the report shows (the preset's, else the first)."""
        return params.get("routing_condition") or next(iter(params["conditions"]))

    def routing_run(self, params: dict[str, Any], runs: RunSet) -> FinishedRun:
        """The first seed of the NDR in the condition whose routing the report shows."""
        return self.cell(runs, "ndr", self.routing_condition(params))[0]

    def routing_section(self, params: dict[str, Any], runs: RunSet, out_dir: Path,
                        title: str) -> dict[str, Any]:
        run = self.routing_run(params, runs)
        probe = routing_probe(run)
        return {"title": title, "text": probe.describe(),
                "figures": routing_figures(probe, run[self.condition_label], out_dir)}


# ----------------------------------------------------------------------------- CTL

#: Table 5.2's depth ablation: (claim id prefix, steps); 12 steps generalize, fewer do not.
DEPTH_CLAIMS = [("ndr-needs-depth-4", 4), ("ndr-needs-depth-6", 6), ("ndr-needs-depth-8", 8),
                ("ndr-needs-depth-10", 10), ("ndr-depth-12-generalizes", 12)]
SELECTED = "at the checkpoint with the best OOD-validation accuracy, per seed"
#: The gated models of Table 5.1, whose readout the report traces (Sec. 5.2.1).
GATED = ("rel_gate", "abs_rel_gate", "ndr")


class NDRCTL(NDRExperiment):
    name = "ndr-ctl"
    condition_label = "direction"

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        directions = list(params["conditions"])
        variants = params["variants"]

        def accuracies(*keys: str, iid: bool = False) -> dict[str, PerSeed]:
            """``{"<model> <direction>": test accuracy per seed}`` (and ``... IID``)."""
            values = {}
            for key in keys:
                for c in directions:
                    values[f"{model_label(key)} {c}"] = self.seed_values(runs, key, c)
                    if iid:
                        values[f"{model_label(key)} {c} IID"] = self.seed_values(runs, key, c, IID)
            return values

        def test_accuracy(*keys: str, iid: bool = False) -> Measured | NotMeasured:
            missing = [model_label(k) for k in keys if k not in variants]
            if missing:
                return NotMeasured(f"this preset trains no {', '.join(missing)}")
            return Measured(accuracies(*keys, iid=iid),
                            "test accuracy (9-10 functions)"
                            + (" and IID accuracy (2-5 functions)" if iid else "")
                            + f" {SELECTED}")

        act_rows = ("transformer_act", "rel_act", "rel_act_ut", "geom_act", "geom_act_ut")
        measured = {
            "ndr-generalizes-both-directions": test_accuracy("ndr"),
            "transformers-fail-on-longer": test_accuracy("transformer", "rel", "geom", iid=True),
            "rel-gate-forward-only": test_accuracy("rel_gate"),
            "abs-rel-gate-both-directions": test_accuracy("abs_rel_gate"),
            "lstm-forward-bilstm-both": test_accuracy("lstm", "bilstm"),
            "act-is-no-copy-gate": test_accuracy(*act_rows),
        }
        measured.update(self._depth_measures(params, runs))
        measured["ndr-gates-open-in-order"] = gates_open_in_order(
            routing_probe(self.routing_run(params, runs)))
        sections = [
            {"title": "Accuracy (Tables 5.1, 5.2)",
             "tables": [accuracy_table(params, runs, self.condition_label),
                        group_table(params, runs, self.condition_label, "length")],
             "text": "IID = held-out sequences of 2-5 functions; OOD valid = 6-8 functions "
                     "(model selection); test = 9-10 functions. Every row is read at its own "
                     "best OOD-validation checkpoint.",
             "figures": [self.curves_figure(params, runs, out_dir)]},
            self.test_steps_section(params, runs),
            self.routing_section(params, runs, out_dir, "Routing of the NDR (Fig. 5.3)"),
            self.readout_section(params, runs, out_dir),
            self.selection_section(params, runs),
        ]
        return {"measured": measured, "sections": [s for s in sections if s]}

    def test_steps_section(self, params: dict[str, Any], runs: RunSet
                           ) -> dict[str, Any] | None:
        """Whether each shallower NDR of Table 5.2 learned a general step that lacks only
        steps at test: its one layer applied longer on the same test set."""
        table = test_steps_table(params, runs, self.condition_label)
        if table is None:
            return None
        return {"title": "The depth ablation with more steps at test",
                "text": "Table 5.2 and its claims test each NDR with as many steps as it "
                        "trained with. Here the same checkpoints apply their one shared layer "
                        "more times on the same test inputs: where accuracy rises to the full "
                        "NDR's, the layer learned on 1-5 functions is a general step and the "
                        "shallow NDR fails longer inputs for lack of steps, not of learning.",
                "tables": [table]}

    def readout_section(self, params: dict[str, Any], runs: RunSet, out_dir: Path
                        ) -> dict[str, Any] | None:
        """Sec. 5.2.1's analysis: where the readout column of each gated model reads from,
        by number of functions, every seed, in the routing condition (backward)."""
        condition = self.routing_condition(params)
        curves = {model_label(key): [
            (run.seed, run.measure("readout by length",
                                   lambda run: readout_by_length(run.model("best"), run.task)))
            for run in self.cell(runs, key, condition)]
            for key in GATED if key in params["variants"]}
        if not curves:
            return None
        return {"title": "Where the readout column reads (Sec. 5.2.1)",
                "text": "The thesis found that + rel + gate 'learns to attend to the last "
                        "operation based on relative position information. Since the result is "
                        "read from the last column, this position changes with the sequence "
                        "length. The model thus fails to generalize to such arbitrary offsets' "
                        "(backward), while + abs/rel + gate 'effectively manages to use the "
                        "absolute position for the prediction'. A readout that holds at every "
                        "length keeps its attention on the answer's column (the function applied "
                        "last) as inputs grow; shown at the last step, with + abs/rel + gate's "
                        "switch there (Eq. D.7: 1 reads by relative offset, 0 by absolute "
                        "position).",
                "tables": [readout_table(curves)],
                "figures": [readout_figure(curves, condition, out_dir)]}

    def selection_section(self, params: dict[str, Any], runs: RunSet
                          ) -> dict[str, Any] | None:
        """How the gated models' test accuracy depends on the checkpoint kept, in the
        routing condition (backward): the selection rules and the training length."""
        table = selection_table(runs, [k for k in GATED if k in params["variants"]],
                                self.condition_label, self.routing_condition(params))
        if table is None:
            return None
        return {"title": "Which checkpoint is kept",
                "text": "The thesis trains every model 'for a fixed number of n_iters "
                        "iterations' and reports the test accuracy of 'the best checkpoint "
                        "according to the validation performance' (App. D); the authors' code "
                        "keeps the last of equally good checkpoints, sglab the first, and the "
                        "presets may stop a run early. Where test accuracy falls as training "
                        "goes on while OOD validation holds, the rule and the training length "
                        "decide the reported number.",
                "tables": [table]}

    def _depth_measures(self, params: dict[str, Any], runs: RunSet
                        ) -> dict[str, Measured | NotMeasured]:
        """Table 5.2: an NDR with fewer steps (in training and test) than the full one, per
        depth and direction; not measured where the preset does not run that one."""
        steps_run, ablated = ablation_steps(params), ablation_conditions(params)
        full = params["variants"]["ndr"]["model"]["n_layers"]
        measured: dict[str, Measured | NotMeasured] = {}
        for prefix, steps in DEPTH_CLAIMS:
            for c in params["conditions"]:
                claim_id = f"{prefix}-{c}"
                if steps not in steps_run or c not in ablated:
                    measured[claim_id] = NotMeasured(
                        f"this preset's depth ablation runs {steps_run or 'no'} steps "
                        f"({', '.join(ablated)}), not {steps} steps {c}")
                    continue
                shallow = f"ndr@{steps}"
                measured[claim_id] = Measured(
                    {f"NDR, {steps} steps {c}": self.seed_values(runs, shallow, c),
                     f"NDR, {steps} steps {c} IID": self.seed_values(runs, shallow, c, IID),
                     f"NDR {c}": self.seed_values(runs, "ndr", c)},
                    f"test accuracy (9-10 functions; IID: 2-5) {SELECTED}; NDR: the {full}-step "
                    "NDR")
        return measured


registry.register_experiment(NDRCTL())


# ----------------------------------------------------------------------------- arithmetic, ListOps


class DepthExperiment(NDRExperiment):
    """Arithmetic and ListOps: one condition, claims on the test accuracies of the models."""

    paper_table: dict[str, tuple[float, float]]  # thesis (IID, test) per variant

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        task = self.name.split("-")[1]
        condition = next(iter(params["conditions"]))
        baselines = [k for k in params["variants"] if k != "ndr"]

        def per_model(keys: list[str], metric: str, suffix: str = "") -> dict[str, PerSeed]:
            return {f"{model_label(k)}{suffix}": self.seed_values(runs, k, condition, metric)
                    for k in keys}

        measured = {
            f"ndr-best-on-deeper-{task}": Measured(
                per_model(["ndr", *baselines], TEST),
                f"test accuracy (the deepest split) {SELECTED}"),
            f"ndr-fits-iid-{task}": Measured(per_model(["ndr"], IID, " IID"),
                                             f"IID accuracy (training depths) {SELECTED}"),
            f"baselines-fit-iid-{task}": Measured(per_model(baselines, IID, " IID"),
                                                  f"IID accuracy (training depths) {SELECTED}"),
        }
        table = accuracy_table(params, runs, self.condition_label)
        table["rows"] = [row + [f"{self.paper_table[k][0]:.2f} / {self.paper_table[k][1]:.2f}"
                                if k in self.paper_table else "-"]
                         for k, row in zip(row_keys(params), table["rows"])]
        table["columns"] = [*table["columns"], "thesis IID / test"]
        sections = [
            {"title": "Accuracy",
             "tables": [table, group_table(params, runs, self.condition_label, "depth")],
             "text": self.split_text(params),
             "figures": [self.curves_figure(params, runs, out_dir)]},
            self.routing_section(params, runs, out_dir, "Routing of the NDR"),
        ]
        return {"measured": measured, "sections": sections}

    def split_text(self, params: dict[str, Any]) -> str:
        task = params["task"]
        return (f"Depths: train {task.get('train_depths', (1, 5))}, OOD valid (model selection) "
                f"{task.get('ood_valid_depths', (6, 6))}, test {task.get('test_depths', (7, 8))}; "
                f"at most {task.get('max_tokens', 50)} tokens.")


class NDRArithmetic(DepthExperiment):
    name = "ndr-arithmetic"
    paper_table = {"lstm": (0.99, 0.74), "bilstm": (0.98, 0.82), "transformer": (0.98, 0.47),
                   "rel": (1.00, 0.77), "abs_rel_gate": (1.00, 0.80), "ndr": (1.00, 0.98)}


class NDRListOps(DepthExperiment):
    name = "ndr-listops"
    paper_table = {"lstm": (0.99, 0.71), "bilstm": (1.00, 0.57), "transformer": (0.98, 0.74),
                   "rel": (0.98, 0.79), "abs_rel_gate": (1.00, 0.90), "ndr": (1.00, 0.99)}


registry.register_experiment(NDRArithmetic())
registry.register_experiment(NDRListOps())

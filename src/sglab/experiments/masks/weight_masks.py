"""Functional modules of frozen networks found with differentiable weight masks
(thesis Ch. 3, Tab. 3.1 / B.1, Figs 3.1-3.3).

Two stages: the base nets train on the full task; then, on each finished net, masks
train on the full task (``full``, the check that masking keeps the net working) and on
each subtask (an operation for ``masks-add-mul``, a pair for ``masks-double-add``). The
analysis evaluates every final mask and its inversion (exactly the removed weights) on
every subtask, counts kept weights and the per-layer shared proportion between the
subtask masks, and for add/mul which operation the net performs under each mask.

An edited variant (``masks-double-add``: ``FNN sanity``, thesis App. B.3.1, Fig. B.2) trains
no net of its own: its masks train on a copy of another variant's finished net with one
pair's input and output weights copied onto the other's (``model.base_edit``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from sglab.analysis import weight_masks as wm
from sglab.errors import SglabError
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured, per_seed
from sglab.experiments.runs import Arm, FinishedRun, RunSet, format_mean_std
from sglab.experiments.spec import ExperimentParams
from sglab.registry import register_experiment
from sglab.report.plots import Line, Panel, grouped_bars, line_figure

SPLIT = "iid_test"
BASE_MIN = 0.9  # masks are compared on nets that solve every subtask


def train_settings(steps: int, batch: int, lr: float, eval_every: int) -> dict[str, Any]:
    # thesis B.3.2: Adam, clip 1, constant lr; masks: lr 1e-2, no weight decay, no warmup
    return {"steps": steps, "batch_size": batch, "lr": lr, "lr_schedule": "constant",
            "warmup_steps": 0, "weight_decay": 0.0, "grad_clip": 1.0,
            "eval_interval": eval_every, "log_interval": eval_every,
            "checkpoint_interval": eval_every, "eval_batch_size": 2000}


def base_arm(params: dict[str, Any], labels: dict[str, str], task: dict[str, Any],
             model: dict[str, Any], seed: int) -> Arm:
    """A net to mask: trained normally at lr 1e-3 for ``params["base_steps"]``."""
    train = train_settings(params["base_steps"], params["batch"], 1e-3,
                           max(params["base_steps"] // 4, 1))
    return Arm({"role": "base", **labels}, {"task": task, "model": model, "train": train},
               seed=seed)


def mask_arm(params: dict[str, Any], base: FinishedRun, labels: dict[str, str],
             task: dict[str, Any], seed: int, **model: Any) -> Arm:
    """A mask on finished run ``base`` (β ``params["beta"]``, lr 1e-2, ``params["mask_steps"]``
    steps); ``model``: further fields of the ``masked`` model."""
    config = {"task": task,
              "model": {"name": "masked", "base_run": base.run_id, "beta": params["beta"],
                        **model},
              "train": train_settings(params["mask_steps"], params["batch"], 1e-2,
                                      max(params["mask_steps"] // 2, 1))}
    return Arm({"role": "mask", **labels}, config, seed=seed)


def weak_base(base: float, what: str, minimum: float = BASE_MIN) -> str | None:
    """Why the claims cannot be judged when the unmasked nets reach only ``base`` (<
    ``minimum``) on ``what`` (masks are compared on nets that solve the task); None if they
    can."""
    if base >= minimum:
        return None
    return (f"the unmasked nets reach only {base:.3f} {what} (the claims need >= "
            f"{minimum}); train them longer (a larger preset)")


def guarded(claims: Mapping[str, Measured | NotMeasured], base: float, what: str,
            minimum: float = BASE_MIN) -> dict[str, Measured | NotMeasured]:
    """The claims (``{claim id: Measured | NotMeasured}``), or each as not measured when the
    unmasked nets reach only ``base`` (< ``minimum``) on ``what``."""
    reason = weak_base(base, what, minimum)
    if reason is None:
        return dict(claims)
    return {claim_id: NotMeasured(reason) for claim_id in claims}


def claim_variant(claim_id: str) -> tuple[str, str]:
    """``mask-specializes[LSTM forced]`` -> (``mask-specializes``, ``LSTM forced``)."""
    name, _, variant = claim_id.partition("[")
    if not variant.endswith("]"):
        raise SglabError(f"claim {claim_id!r} names no model variant (claim-id[VARIANT])")
    return name, variant[:-1]


class WeightMaskParams(ExperimentParams):
    hidden: list[int]  # the FNN's hidden sizes
    lstm_hidden: int  # the LSTM's hidden size per layer
    lstm_layers: int  # the LSTM's layers
    base_steps: int  # training steps of a base net (lr 1e-3)
    mask_steps: int  # training steps of a mask (lr 1e-2)
    beta: float  # the mask regularizer beta = batch x alpha (thesis B.3.2)
    valid_size: int  # examples in the task's validation split
    batch: int = 128  # batch size of the nets and the masks (thesis B.3.2)
    lstm_base_steps: int | None = None  # the LSTM variants' base steps (None: base_steps)
    lstm_mask_steps: int | None = None  # the LSTM variants' mask steps (None: mask_steps)
    lstm_beta: float | None = None  # the LSTM variants' beta (None: beta)


class AddMulParams(WeightMaskParams):
    models: list[Literal["FNN", "LSTM", "LSTM forced"]]  # the nets compared, one arm each


class DoubleAddParams(WeightMaskParams):
    # the nets compared; FNN sanity masks the FNN's nets, edited (App. B.3.1)
    models: list[Literal["FNN", "FNN sanity", "LSTM", "LSTM forced"]]


class WeightMaskExperiment(Experiment):
    task: str
    subsets: dict[str, str]  # mask name -> task.subset
    groups: dict[str, str]  # mask name -> metric group it is tested on
    passes: str = "single"
    outputs: int
    # variant -> (variant whose nets it masks, model.base_edit): no base nets of its own
    edited: dict[str, tuple[str, str]] = {}

    def task_config(self, params, subset: str) -> dict[str, Any]:
        return {"name": self.task, "subset": subset, "valid_size": params["valid_size"]}

    def model(self, params, variant: str) -> dict[str, Any]:
        if variant == "FNN":
            return {"name": "fnn", "hidden": params["hidden"], "outputs": self.outputs,
                    "passes": self.passes}
        # the thesis code's LSTM (RobertCsordas/modules, profiles add_mul and tuple): 2
        # layers of 256
        lstm = {"name": "lstm", "d_model": params["lstm_hidden"],
                "n_layers": params["lstm_layers"], "dropout": 0.0,
                "outputs": self.outputs, "input_mode": "repeat", "repeat_steps": self.steps}
        return lstm | ({"schedule": "forced"} if variant == "LSTM forced" else {})

    @staticmethod
    def variant_param(params, variant: str, key: str) -> Any:
        """``params[key]`` for ``variant``; the recurrent variants take ``lstm_<key>`` when
        the preset sets it: ``lstm_base_steps`` (their steps are cheap, and they learn
        multiplication slower), ``lstm_mask_steps`` (their masks prune more slowly) and
        ``lstm_beta`` (the thesis code's double addition: beta
        4e-4 for the FNN's masks, 1e-4 for the LSTM's)."""
        own = params.get(f"lstm_{key}") if variant.startswith("LSTM") else None
        return params[key] if own is None else own

    def base_variant(self, variant: str) -> str:
        """The variant whose nets ``variant``'s masks train on (itself unless edited)."""
        return self.edited[variant][0] if variant in self.edited else variant

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        """The base nets (the masks follow in a second stage, see :meth:`stages`); an
        edited variant reuses the nets of the variant it edits."""
        models = params["models"]
        for variant in models:
            if self.base_variant(variant) not in models:
                raise SglabError(f"models: {variant!r} masks the nets of "
                                 f"{self.base_variant(variant)!r}; list that variant too")
        return [base_arm({**params, "base_steps": self.variant_param(params, variant,
                                                                     "base_steps")},
                         {"model": variant}, self.task_config(params, "all"),
                         self.model(params, variant), seed)
                for variant in models if variant not in self.edited
                for seed in params["seeds"]]

    def mask_arms(self, params: dict[str, Any], bases: RunSet) -> list[Arm]:
        """Per base net: the full-task and subtask masks of each variant that masks it."""
        return [mask_arm({**params, "beta": self.variant_param(params, variant, "beta"),
                          "mask_steps": self.variant_param(params, variant, "mask_steps")}, base,
                         {"model": variant, "mask": mask},
                         self.task_config(params, subset), base.seed,
                         **({"base_edit": self.edited[variant][1]}
                            if variant in self.edited else {}))
                for base in bases for variant in params["models"]
                if self.base_variant(variant) == base["model"]
                for mask, subset in {"full": "all", **self.subsets}.items()]

    def stages(self, params):
        return [lambda previous: self.arms(params),
                lambda previous: self.mask_arms(params, previous.where(role="base"))]

    # ------------------------------------------------------------------ measures
    def measures(self, base: FinishedRun, masks: dict[str, FinishedRun]) -> dict[str, Any]:
        """Accuracy per (mask, tested group), kept weights, per-layer sharing, histograms
        (:func:`sglab.analysis.weight_masks.subtask_mask_measures`) on the full-task mask
        run's model (the edited net for an edited variant)."""
        model = masks["full"].model()
        task = masks["full"].task
        final = {name: run.model().final_masks() for name, run in masks.items()}
        logits = {name: run.model().mask_logits() for name, run in masks.items()}
        out = wm.subtask_mask_measures(model, task, final, logits, list(self.subsets),
                                       list(self.groups.values()), SPLIT)
        out.update(self.extra_measures(model, task, final))
        return out

    def extra_measures(self, model, task, final) -> dict[str, Any]:
        return {}

    def per_seed(self, runs: RunSet, variant: str) -> list[dict[str, Any]]:
        """The measures of ``variant``'s masks, one entry per base net (seed)."""
        masks = runs.where(role="mask", model=variant)
        return [self.measures(base, {m: masks.where(lambda r, s=base.seed: r.seed == s,
                                                    mask=m)[0]
                                     for m in ["full", *self.subsets]})
                for base in runs.where(role="base", model=self.base_variant(variant))]

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        sections = []
        measured = {variant: self.per_seed(runs, variant) for variant in params["models"]}
        for variant, seeds in measured.items():
            section = self.variant_section(params, variant, seeds, out_dir)
            sections.append(section)
            if variant in self.edited:
                unedited = measured[self.base_variant(variant)]
                self.add_comparison(section, variant, seeds, unedited, out_dir)
        values = {variant: self.checked_values(variant, measured) for variant in measured}
        claims: dict[str, Measured | NotMeasured] = {}
        for claim_id in self.spec.claims:
            name, variant = claim_variant(claim_id)
            if variant not in values:
                claims[claim_id] = NotMeasured(
                    f"{variant} is not among this preset's models ({', '.join(params['models'])})")
            else:
                claims[claim_id] = values[variant][name]
        return {"measured": claims, "sections": sections}

    def checked_values(self, variant: str, measured: dict[str, list[dict[str, Any]]]
                       ) -> dict[str, Measured | NotMeasured]:
        """``{claim name: its values}`` for ``variant``, each not measured when a base net
        (for an edited variant: the edited or the unedited one) did not learn the task."""
        seeds = measured[variant]
        if variant in self.edited:
            unedited = measured[self.base_variant(variant)]
            return guarded(self.edited_values(variant, seeds, unedited),
                           min(self.base_accuracy(seeds), self.base_accuracy(unedited)),
                           "exact match on a subtask (edited or not)")
        return guarded(self.claim_values(variant, seeds), self.base_accuracy(seeds),
                       "exact match on a subtask")

    def claim_values(self, variant: str, seeds: list[dict[str, Any]]) -> dict[str, Measured]:
        """The values of ``variant``'s claims (claim name without the variant -> values)."""
        return self.common_values(seeds)

    def edited_values(self, variant: str, seeds: list[dict[str, Any]],
                      unedited: list[dict[str, Any]]) -> dict[str, Measured]:
        """The values of an edited variant's claims (``unedited``: the measures of the nets
        it edits)."""
        return self.common_values(seeds)

    def sharing_means(self, seeds) -> dict[str, float]:
        """Per weight layer: the shared proportion, mean over the subtask masks and seeds."""
        return {layer: statistics.mean(s["sharing"][n][layer] for s in seeds
                                       for n in self.subsets) for layer in seeds[0]["layers"]}

    def add_comparison(self, section, variant, seeds, unedited, out_dir) -> None:
        """The shared proportion per layer of an edited variant beside the nets it edits
        (e.g. thesis Fig. B.2 beside Fig. 3.3): a table and a bar figure."""
        base = self.base_variant(variant)
        means = {base: self.sharing_means(unedited), variant: self.sharing_means(seeds)}
        layers = seeds[0]["layers"]
        section["tables"].append({
            "title": f"Shared proportion per layer [%], {base} vs {variant} (mean over the "
                     "subtask masks, mean ± std over seeds)",
            "columns": ["masks on", *layers],
            "rows": [[name, *(format_mean_std([100 * statistics.mean(
                s["sharing"][n][layer] for n in self.subsets) for s in measured], 1)
                for layer in layers)] for name, measured in ((base, unedited),
                                                             (variant, seeds))]})
        section["figures"].append(grouped_bars(
            out_dir, f"sharing-{base}-vs-{variant}".replace(" ", "-"),
            {name: {layer: 100 * v for layer, v in values.items()}
             for name, values in means.items()},
            title=f"Shared proportion per layer, {base} vs {variant}", ylabel="shared [%]",
            ylim=(0, 100), caption=f"Shared proportion of the subtask masks per layer, mean "
                                   f"over the masks and seeds: on the {base} nets and on their "
                                   f"edited copies ({variant}; thesis Fig. B.2 vs Fig. 3.3)."))

    def variant_section(self, params, variant, seeds, out_dir) -> dict[str, Any]:
        names = list(self.subsets)
        columns = ["none", "full"] + [c for n in names for c in (n, f"not {n}")]
        table = {"title": f"Accuracy on {SPLIT} [%] per tested subtask (rows) and mask "
                          "(columns; not = inverted), mean ± std over seeds",
                 "columns": ["tested", *columns],
                 "rows": [[group, *(format_mean_std([100 * s["accuracy"][c][group]
                                                     for s in seeds], 1) for c in columns)]
                          for group in self.groups.values()]}
        hidden_cols = [f"not {n} (hidden)" for n in names]
        hidden_table = {"title": "Hidden-only inversion (I/O layers under the full-task mask) "
                                 "[%] (Tab. B.2)", "columns": ["tested", *hidden_cols],
                        "rows": [[g, *(format_mean_std([100 * s["accuracy"][c][g]
                                                        for s in seeds], 1)
                                       for c in hidden_cols)] for g in self.groups.values()]}
        half_cols = ["none", "full, first half", "full, second half"]
        half_table = {"title": "Half masks: the full-task mask on the first ceil(n/2) or the "
                               "other layers only [%] (thesis B.1)",
                      "columns": ["tested", *half_cols],
                      "rows": [[g, *(format_mean_std([100 * s["accuracy"][c][g] for s in seeds],
                                                     1) for c in half_cols)]
                               for g in self.groups.values()]}
        layers = seeds[0]["layers"]
        sharing_table = {"title": "Shared proportion per layer [%] (Figs 3.1/3.3)",
                         "columns": ["mask", *layers],
                         "rows": [[n, *(format_mean_std([100 * s["sharing"][n][layer]
                                                         for s in seeds], 1)
                                        for layer in layers)] for n in names]}
        kept_table = {"title": "Weights kept by each mask", "columns": ["mask", "kept weights"],
                      "rows": [[n, format_mean_std([s["kept"][n] for s in seeds], 0)]
                               for n in ["full", *names]]}
        figure = grouped_bars(out_dir, f"sharing-{variant.replace(' ', '-')}", {
            n: {layer: statistics.mean(100 * s["sharing"][n][layer] for s in seeds)
                for layer in layers} for n in names},
            title="Shared proportion per layer", ylabel="shared [%]", ylim=(0, 100),
            caption="Proportion of a subtask mask's weights that the other subtask's mask "
                    "also keeps, per layer (mean over seeds; thesis Figs 3.1, 3.3).")
        centers = [(i + 0.5) / 500 for i in range(500)]
        histogram = line_figure(out_dir, f"mask-probabilities-{variant.replace(' ', '-')}", [
            Panel(f"{variant}, seed {seeds_runs}", [Line(centers, seeds[0]["histograms"][n], n, i)
                                                  for i, n in enumerate(["full", *names])],
                  log_y=log) for log, seeds_runs in ((False, "0"), (True, "0, log"))],
            title="Mask probabilities", xlabel="sigmoid(l)", ylabel="weights",
            caption="Histogram of the keep probabilities sigmoid(l) of the final mask logits, "
                    "500 bins, first seed, linear and log counts (thesis Fig. B.3).")
        size = params["hidden"] if variant.startswith("FNN") else \
            f"{params['lstm_layers']} x {params['lstm_hidden']}"
        edit = (f" The masks train on the {self.base_variant(variant)} nets with "
                f"model.base_edit={self.edited[variant][1]}: {self.edit_text}"
                if variant in self.edited else "")
        return {"title": f"{variant}: masks on their own and the other subtask",
                "text": f"{len(seeds)} seed(s); {variant} {size}, base "
                        f"{self.variant_param(params, self.base_variant(variant), 'base_steps')} "
                        f"steps, masks {self.variant_param(params, variant, 'mask_steps')} steps, beta "
                        f"{self.variant_param(params, variant, 'beta')}."
                        + edit,
                "tables": [table, hidden_table, half_table, sharing_table, kept_table,
                           *self.extra_tables(seeds)], "figures": [figure, histogram]}

    def base_accuracy(self, seeds) -> float:
        """The lowest exact match of the unmasked nets on a subtask."""
        return min(s["accuracy"]["none"][g] for s in seeds for g in self.groups.values())

    def extra_tables(self, seeds) -> list[dict[str, Any]]:
        return []

    def io_hidden(self, seeds) -> tuple[list[float], list[float]]:
        """Mean shared proportion of the subtask masks in the first and last layers and in
        the hidden layers, one value per seed."""
        io = [statistics.mean([s["sharing"][n][layer] for n in self.subsets
                               for layer in (s["layers"][0], s["layers"][-1])]) for s in seeds]
        hidden = [statistics.mean([s["sharing"][n][layer] for n in self.subsets
                                   for layer in s["layers"][1:-1]]) for s in seeds]
        return io, hidden

    @staticmethod
    def accuracy(seeds, mask: str, group: str):
        """Exact match on ``group`` under ``mask``, per seed."""
        return per_seed(s["accuracy"][mask][group] for s in seeds)

    @staticmethod
    def relative(seeds, mask: str, group: str):
        """Exact match on ``group`` under ``mask`` over the unmasked net's, per seed."""
        return per_seed(s["accuracy"][mask][group] / max(s["accuracy"]["none"][group], 1e-9)
                        for s in seeds)

    def common_values(self, seeds) -> dict[str, Measured]:
        """The claims on accuracy under the full-task, subtask and inverted masks (Tabs
        3.1/B.1/B.2), for subtasks a and b tested on their groups (``add`` on ``op=add``)."""
        (a, b), (ga, gb) = list(self.subsets), [self.groups[n] for n in self.subsets]
        acc = lambda mask, group: self.accuracy(seeds, mask, group)  # noqa: E731
        rel = lambda mask, group: self.relative(seeds, mask, group)  # noqa: E731
        context = f"exact match on {SPLIT}; X/none: over the unmasked net's"
        return {
            "full-mask-keeps-accuracy": Measured(
                {f"{m} on {g}": acc(m, g) for m in ("none", "full") for g in (ga, gb)}
                | {f"full/none on {g}": rel("full", g) for g in (ga, gb)}, context),
            "mask-specializes": Measured(
                {f"{a} on {ga}": acc(a, ga), f"{a}/none on {ga}": rel(a, ga),
                 f"{a} on {gb}": acc(a, gb), f"{b} on {gb}": acc(b, gb),
                 f"{b}/none on {gb}": rel(b, gb), f"{b} on {ga}": acc(b, ga)}, context),
            "inverted-mask-fails-own": Measured(
                {f"not {a} on {ga}": acc(f"not {a}", ga), f"not {b} on {gb}": acc(f"not {b}", gb)},
                f"exact match on {SPLIT}; not X: the weights X's mask removes"),
            "inverted-mask-keeps-other": Measured(
                {f"not {a} on {gb}": acc(f"not {a}", gb), f"not {b} on {ga}": acc(f"not {b}", ga),
                 f"none on {gb}": acc("none", gb), f"none on {ga}": acc("none", ga)},
                f"exact match on {SPLIT}; not X: the weights X's mask removes; none: unmasked"),
            "hidden-inversion": Measured(
                {f"not {m} (hidden) on {g}": acc(f"not {m} (hidden)", g)
                 for m in (a, b) for g in (ga, gb)},
                f"exact match on {SPLIT}; not X (hidden): X's mask inverted in the hidden layers, "
                "the full-task mask on the first and last"),
            "sharing": Measured(dict(zip(("I/O sharing", "hidden sharing"),
                                         map(per_seed, self.io_hidden(seeds)))),
                                "shared proportion of the subtask masks, mean over both masks "
                                "and over the first and last (I/O) or the other weight layers"),
        }


class AddMul(WeightMaskExperiment):
    name = "masks-add-mul"
    params_model = AddMulParams
    task, outputs, steps = "add_mul", 2, 3
    subsets = {"add": "add", "mul": "mul"}
    groups = {"add": "op=add", "mul": "op=mul"}

    def extra_measures(self, model, task, final) -> dict[str, Any]:
        return {"confusion": wm.op_confusion_under_masks(
            model, task, {name: final[name] for name in ("add", "mul")}, SPLIT)}

    def extra_tables(self, seeds):
        rows = [[f"{name} mask", f"{op} inputs", *(format_mean_std(
            [100 * float(s["confusion"][name][r, c]) for s in seeds], 1) for c in range(3))]
            for name in ("add", "mul") for r, op in enumerate(("add", "mul"))]
        return [{"title": "Operation performed [%] (Fig. 3.2; 2+2 = 2*2 counts for both)",
                 "columns": ["mask", "tested on", *wm.OP_NAMES], "rows": rows}]

    @staticmethod
    def performed(seeds, mask: str, inputs: str) -> Measured:
        """Under ``mask``, on the examples of op ``inputs``: the share of answers that are
        the sum, the product, or neither, per seed."""
        row = ("add", "mul").index(inputs)
        return Measured({f"{mask} mask: {op} {'performed ' if op != 'none' else ''}on {inputs} "
                         "inputs": per_seed(float(s["confusion"][mask][row, column])
                                            for s in seeds)
                         for column, op in enumerate(wm.OP_NAMES)},
                        f"share of the {inputs} examples of {SPLIT} whose answer is a + b, a * b "
                        "(mod 100) or neither (2+2 = 2*2 counts for both)")

    def claim_values(self, variant, seeds) -> dict[str, Measured]:
        common = self.common_values(seeds)
        add_mask, mul_mask = self.performed(seeds, "add", "mul"), self.performed(seeds, "mul", "add")
        kept = {op: per_seed(s["kept"][op] for s in seeds) for op in ("add", "mul")}
        return {
            **{name: common[name] for name in ("full-mask-keeps-accuracy", "mask-specializes",
                                               "inverted-mask-fails-own")},
            "inverted-masks-limited-separation": common["inverted-mask-keeps-other"],
            "io-shared-more-than-hidden": common["sharing"],
            "mul-uses-more-weights": Measured(
                {"add kept": kept["add"], "mul kept": kept["mul"],
                 "mul/add kept": per_seed(s["kept"]["mul"] / max(s["kept"]["add"], 1)
                                          for s in seeds)},
                "weights kept by the final add and mul masks, all masked tensors"),
            "add-mask-adds-mul-inputs": add_mask, "add-mask-answers-none": add_mask,
            "mul-mask-multiplies-add-inputs": mul_mask, "mul-mask-answers-none": mul_mask,
        }


class DoubleAdd(WeightMaskExperiment):
    name = "masks-double-add"
    params_model = DoubleAddParams
    task, outputs, passes, steps = "double_add", 4, "per_pair", 6
    subsets = {"pair1": "pair1", "pair2": "pair2"}
    groups = {"pair1": "pair=1", "pair2": "pair=2"}
    # App. B.3.1: the FNN's nets with pair 1's input and output weights copied onto pair 2's
    edited = {"FNN sanity": ("FNN", "copy_pair_io")}
    edit_text = ("pair 1's input and output weights copied onto pair 2's, so the hidden "
                 "layers cannot tell the pairs apart (thesis App. B.3.1, Fig. B.2).")

    def claim_values(self, variant, seeds) -> dict[str, Measured]:
        common = self.common_values(seeds)
        return {**{name: common[name] for name in ("full-mask-keeps-accuracy", "mask-specializes",
                                                   "inverted-mask-fails-own")},
                "inverted-mask-keeps-other-pair": common["inverted-mask-keeps-other"],
                "hidden-inversion-separates-pairs": common["hidden-inversion"],
                "no-io-sharing": common["sharing"]}

    def edited_values(self, variant, seeds, unedited) -> dict[str, Measured]:
        common = self.common_values(seeds)
        base = self.base_variant(variant)
        edited, plain = self.sharing_means(seeds), self.sharing_means(unedited)
        hidden = seeds[0]["layers"][1:-1]
        io, hidden_mean = self.io_hidden(seeds)
        sanity = Measured(
            {f"{variant} hidden, per layer": [edited[layer] for layer in hidden],
             f"{base} hidden, per layer": [plain[layer] for layer in hidden],
             f"{variant} hidden": per_seed(hidden_mean), f"{variant} I/O": per_seed(io)},
            "shared proportion of the pair masks; per layer: the hidden weight layers "
            f"({', '.join(hidden)}), mean over both masks and the seeds; {variant} hidden and "
            "I/O: mean over both masks and those layers (the first and last), per seed")
        return {**{name: common[name] for name in ("full-mask-keeps-accuracy", "mask-specializes",
                                                   "inverted-mask-fails-own")},
                "sanity-sharing-near-total": sanity}


register_experiment(AddMul())
register_experiment(DoubleAdd())

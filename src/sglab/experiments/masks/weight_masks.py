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
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from sglab.analysis import weight_masks as wm
from sglab.errors import SglabError
from sglab.experiments.base import Experiment
from sglab.experiments.legacy_claims import at_least, at_most, claim, greater_than, not_measurable
from sglab.experiments.runs import Arm, FinishedRun, RunSet, format_mean_std
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


def sizes(hidden, base_steps, mask_steps, seeds, beta, valid, batch=128) -> dict[str, Any]:
    return {"hidden": hidden, "base_steps": base_steps, "mask_steps": mask_steps,
            "seeds": seeds, "beta": beta, "valid_size": valid, "batch": batch}


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


def guarded(claims: list, base: float, what: str, minimum: float = BASE_MIN) -> list:
    """The claims, or each as not measurable when the unmasked nets reach only ``base``
    (< ``minimum``) on ``what``: masks are compared on nets that solve the task."""
    if base >= minimum:
        return claims
    reason = (f"the unmasked nets reach only {base:.3f} {what} (the claims need >= "
              f"{minimum}); train them longer (a larger preset)")
    return [not_measurable(c.id, c.statement, reason) for c in claims]


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
        if variant.startswith("LSTM"):
            return params.get(f"lstm_{key}", params[key])
        return params[key]

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
        """Accuracy per (mask, tested group), kept weights, per-layer sharing."""
        model = masks["full"].model()
        task = masks["full"].task
        final = {name: run.model().final_masks() for name, run in masks.items()}
        layers = list(final["full"])
        ones = {n: torch.ones_like(m) for n, m in final["full"].items()}
        tried = {"none": ones, "full": final["full"],  # and its half masks (thesis B.1)
                 "full, first half": wm.half_masks(final["full"], first=True),
                 "full, second half": wm.half_masks(final["full"], first=False)}
        for name in self.subsets:
            tried[name], tried[f"not {name}"] = final[name], wm.invert(final[name])
            hidden = [n for n in layers if n not in (layers[0], layers[-1])]  # I/O stay
            tried[f"not {name} (hidden)"] = wm.invert(final[name], only=hidden,
                                                       keep=final["full"])
        accuracy = {}
        for name, chosen in tried.items():
            with model.use_masks(chosen):
                record = task.evaluate(model.eval(), SPLIT, 2000)
            accuracy[name] = {g: record[f"{SPLIT}/exact_match/{g}"] for g in self.groups.values()}
        subtask = {n: final[n] for n in self.subsets}
        weight_layers = [n for n in layers if final["full"][n].dim() >= 2]
        sharing = wm.sharing_per_layer({n: {k: m[k] for k in weight_layers}
                                        for n, m in subtask.items()})
        histograms = {name: wm.logit_histogram(run.model().mask_logits())[0].tolist()
                      for name, run in masks.items()}
        out = {"accuracy": accuracy, "kept": {n: wm.count(m) for n, m in final.items()},
               "histograms": histograms,
               "sharing": sharing, "layers": weight_layers}
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
        claims, sections = [], []
        measured = {variant: self.per_seed(runs, variant) for variant in params["models"]}
        for variant, seeds in measured.items():
            section = self.variant_section(params, variant, seeds, out_dir)
            sections.append(section)
            if variant in self.edited:
                unedited = measured[self.base_variant(variant)]
                self.add_comparison(section, variant, seeds, unedited, out_dir)
                checked = self.edited_claims(params, variant, seeds, unedited)
            else:
                checked = self.checked_claims(params, variant, seeds)
            claims += [replace(c, id=f"{c.id}[{variant}]") for c in checked]
        return {"claims": claims, "sections": sections}

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

    def edited_claims(self, params, variant, seeds, unedited) -> list:
        """The claims on an edited variant (``unedited``: the measures of the nets it edits),
        judged only when both the edited and the unedited nets solve every subtask."""
        return []

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

    def checked_claims(self, params, variant, seeds) -> list:
        """The claims, or (when a base net did not learn the task) each as not measurable."""
        return guarded(self.claims(params, variant, seeds), self.base_accuracy(seeds),
                       "exact match on a subtask")

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

    def common_claims(self, params, seeds) -> list:
        (a, b), (ga, gb) = list(self.subsets), [self.groups[n] for n in self.subsets]
        acc = lambda mask, group: [s["accuracy"][mask][group] for s in seeds]  # noqa: E731
        own, other, inv = params["own_min"], params["other_max"], params["inverted_max"]
        # accuracy relative to the unmasked net (thesis B.3.3: a full-task mask keeps
        # > 95% of it); the own-subtask masks are held to the same share
        rel = lambda mask, group: [s["accuracy"][mask][group] / max(s["accuracy"]["none"][group],  # noqa: E731
                                                                   1e-9) for s in seeds]
        return [
            claim("full-mask-keeps-accuracy", "A mask trained on the full task keeps more than "
                  "95% of the unmasked accuracy (B.3.3).",
                  {f"none on {g}": acc("none", g) for g in (ga, gb)} |
                  {f"full/none on {g}": rel("full", g) for g in (ga, gb)},
                  [at_least(f"full/none on {g}", 0.95) for g in (ga, gb)]),
            claim("mask-specializes", f"A {a} mask solves {a} (relative to the unmasked net) "
                  f"but not {b}, and vice versa (Tab. 3.1/B.1).",
                  {f"{a}/none on {ga}": rel(a, ga), f"{a} on {gb}": acc(a, gb),
                   f"{b}/none on {gb}": rel(b, gb), f"{b} on {ga}": acc(b, ga)},
                  [at_least(f"{a}/none on {ga}", own), at_least(f"{b}/none on {gb}", own),
                   at_most(f"{a} on {gb}", other), at_most(f"{b} on {ga}", other)]),
            claim("inverted-mask-fails-own", "An inverted mask fails on its own subtask "
                  "(Tab. 3.1/B.1).", {f"not {a} on {ga}": acc(f"not {a}", ga),
                                      f"not {b} on {gb}": acc(f"not {b}", gb)},
                  [at_most(f"not {a} on {ga}", inv), at_most(f"not {b} on {gb}", inv)]),
        ]


class AddMul(WeightMaskExperiment):
    name = "masks-add-mul"
    title = "Weight masks: addition vs multiplication share I/O, specialize inside (Tab. B.1)"
    description = ("An FNN learns (a op b) mod 100 for op in {+, *}; masks for + and * alone "
                   "solve their own op, not the other, and their inversions fail on their op.")
    task, outputs, steps = "add_mul", 2, 3
    subsets = {"add": "add", "mul": "mul"}
    groups = {"add": "op=add", "mul": "op=mul"}
    thresholds = {"own_min": 0.9, "other_max": 0.1, "inverted_max": 0.3}
    presets = {
        "quick": {**sizes([64, 64], 400, 200, [0], 1e-4, 500), **thresholds,
                  "models": ["FNN", "LSTM"], "lstm_hidden": 16, "lstm_layers": 1},
        # the LSTM's steps are cheap and 10,000 left it at 90.6% on multiplication (one seed);
        # 2 layers as the thesis code; its masks kept 65% of the weights after 2,000 steps
        "default": {**sizes([400, 400, 200], 10000, 2000, [0, 1, 2], 1e-4, 2000), **thresholds,
                    "models": ["FNN", "LSTM"], "lstm_hidden": 128, "lstm_layers": 2,
                    "lstm_base_steps": 20000, "lstm_mask_steps": 6000},
        # the LSTM: 2 layers of 256 (thesis code, profile add_mul)
        "paper": {**sizes([2000] * 4, 20000, 20000, list(range(10)), 1e-4, 10000), **thresholds,
                  "models": ["FNN", "LSTM"], "lstm_hidden": 256, "lstm_layers": 2},
    }

    def extra_measures(self, model, task, final) -> dict[str, Any]:
        data = task.split(SPLIT)
        confusion = {}
        for name in ("add", "mul"):
            with model.use_masks(final[name]):
                digits = task.predict(model.eval(), SPLIT) - task.digit_ids[0]
            confusion[name] = wm.op_confusion(data["a"], data["b"], data["op"],
                                              digits[:, 0] * 10 + digits[:, 1])
        return {"confusion": confusion}

    def extra_tables(self, seeds):
        rows = [[f"{name} mask", f"{op} inputs", *(format_mean_std(
            [100 * float(s["confusion"][name][r, c]) for s in seeds], 1) for c in range(3))]
            for name in ("add", "mul") for r, op in enumerate(("add", "mul"))]
        return [{"title": "Operation performed [%] (Fig. 3.2; 2+2 = 2*2 counts for both)",
                 "columns": ["mask", "tested on", *wm.OP_NAMES], "rows": rows}]

    def claims(self, params, variant, seeds):
        values = {"mul/add kept": [s["kept"]["mul"] / max(s["kept"]["add"], 1) for s in seeds]}
        performed = {"add performed on mul inputs": [float(s["confusion"]["add"][1, 0])
                                                     for s in seeds],
                     "mul performed on mul inputs": [float(s["confusion"]["add"][1, 1])
                                                     for s in seeds]}
        none = {"none on mul inputs": [float(s["confusion"]["add"][1, 2]) for s in seeds]}
        io, hidden = self.io_hidden(seeds)
        return [*self.common_claims(params, seeds),
                claim("io-shared-more-than-hidden", "The add and mul masks share more weights "
                      "in the input/output layers than in the hidden layers (Fig. 3.1).",
                      {"I/O sharing": io, "hidden sharing": hidden},
                      [greater_than("I/O sharing", "hidden sharing")]),
                claim("mul-uses-more-weights", "Multiplication uses more weights than addition "
                      "(thesis: 3.8x).", values, [greater_than("mul/add kept", 1.0)]),
                claim("add-mask-adds-mul-inputs", "Under the add mask the FNN adds the inputs "
                      "of multiplication examples (Fig. 3.2).", performed,
                      [greater_than("add performed on mul inputs",
                                    "mul performed on mul inputs")])
                if variant == "FNN" else
                claim("add-mask-answers-none", "Under the add mask the LSTM mostly performs "
                      "neither operation on multiplication examples (Fig. 3.2).",
                      performed | none, [greater_than("none on mul inputs",
                                                      "add performed on mul inputs")])]


class DoubleAdd(WeightMaskExperiment):
    name = "masks-double-add"
    title = "Weight masks: two identical additions do not share weights (Tab. 3.1)"
    description = ("An FNN (one pass per pair) learns (a+b, c+d) mod 100; a pair's mask "
                   "solves its pair only, and its inversion keeps the other pair.")
    task, outputs, passes, steps = "double_add", 4, "per_pair", 6
    subsets = {"pair1": "pair1", "pair2": "pair2"}
    groups = {"pair1": "pair=1", "pair2": "pair=2"}
    # sanity_min: hidden-layer sharing of the FNN sanity masks (App. B.3.1; measured at
    # 400-400-200, 1 seed: 0.88 and 0.92; at 800-800-400, 2 seeds: 0.94 and 0.95);
    # sanity_margin: how far above the unedited FNN's (0.43 and 0.64; 0.21 and 0.42) it
    # must be
    thresholds = {"own_min": 0.9, "other_max": 0.1, "inverted_max": 0.3, "kept_min": 0.7,
                  "sanity_min": 0.8, "sanity_margin": 0.2}
    # App. B.3.1: the FNN's nets with pair 1's input and output weights copied onto pair 2's
    edited = {"FNN sanity": ("FNN", "copy_pair_io")}
    edit_text = ("pair 1's input and output weights copied onto pair 2's, so the hidden "
                 "layers cannot tell the pairs apart (thesis App. B.3.1, Fig. B.2).")
    presets = {
        "quick": {**sizes([64, 64], 400, 200, [0], 4e-4, 500), **thresholds,
                  "models": ["FNN", "FNN sanity", "LSTM forced"], "lstm_hidden": 16,
                  "lstm_layers": 1},
        # 800-800-400: at 400-400-200 the pair masks share 40-68% of their hidden weights
        # and an inverted pair mask keeps only 49-59% of the other pair (smaller nets share
        # more, B.3.3; README); 2 seeds to fit 30 minutes
        "default": {**sizes([800, 800, 400], 10000, 2000, [0, 1], 4e-4, 2000), **thresholds,
                    "models": ["FNN", "FNN sanity"], "lstm_hidden": 128, "lstm_layers": 1},
        # beta 4e-4 is the FNN's (B.3.5); the thesis code's LSTM (sweep tuple_rnn): 2 layers
        # of 256, beta 1e-4
        "paper": {**sizes([2000] * 4, 20000, 20000, list(range(10)), 4e-4, 10000), **thresholds,
                  "models": ["FNN", "FNN sanity", "LSTM", "LSTM forced"], "lstm_hidden": 256,
                  "lstm_layers": 2, "lstm_beta": 1e-4},
    }

    def claims(self, params, variant, seeds):
        keeps = {"not pair1 on pair=2": [s["accuracy"]["not pair1"]["pair=2"] for s in seeds],
                 "not pair2 on pair=1": [s["accuracy"]["not pair2"]["pair=1"] for s in seeds]}
        io, hidden = self.io_hidden(seeds)
        return [*self.common_claims(params, seeds),
                claim("no-io-sharing", "The pair masks share no weights in the first and last "
                      "layers and little in the hidden ones (Fig. 3.3).",
                      {"I/O sharing": io, "hidden sharing": hidden},
                      [at_most("I/O sharing", 0.05)]),
                claim("inverted-mask-keeps-other-pair", "Inverting a pair's mask keeps the "
                      "other pair working (thesis 94/100/96%).", keeps,
                      [at_least(n, params["kept_min"]) for n in keeps])]

    def edited_claims(self, params, variant, seeds, unedited):
        base = self.base_variant(variant)
        edited, plain = self.sharing_means(seeds), self.sharing_means(unedited)
        layers = seeds[0]["layers"]
        hidden = layers[1:-1]
        values = {f"{variant} {layer}": edited[layer] for layer in hidden} | \
            {f"{base} {layer}": plain[layer] for layer in hidden} | \
            {f"{variant} I/O": statistics.mean(self.io_hidden(seeds)[0])}
        rules = [at_least(f"{variant} {layer}", params["sanity_min"]) for layer in hidden] + \
            [at_least(f"{variant} {layer}", f"{base} {layer}", params["sanity_margin"])
             for layer in hidden] + [at_most(f"{variant} I/O", 0.05)]
        sanity = claim("sanity-sharing-near-total", "With pair 1's input and output weights "
                       "copied onto pair 2's, the pair masks share almost all of their hidden "
                       "weights (far more than on the unedited net) and still none in the first "
                       "and last layers, which hold identical but separate copies (App. B.3.1, "
                       "Fig. B.2); shared proportions are means over both masks and the seeds.",
                       values, rules)
        accuracy = min(self.base_accuracy(seeds), self.base_accuracy(unedited))
        return guarded([*self.common_claims(params, seeds), sanity], accuracy,
                       "exact match on a subtask (edited or not)")


register_experiment(AddMul())
register_experiment(DoubleAdd())

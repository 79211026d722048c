"""How much the add and mul masks share, against the mask regularizer β and the network
size (thesis App. B.3.3, Figs B.4-B.5).

Per size and seed an FNN trains on the full add/mul task; on each finished net, for every β
of the grid, masks train on the full task, on addition and on multiplication. The analysis
reads each mask's final accuracy per operation, counts the weights the add and mul masks
share over all layers, picks β per size by B.3.3's rule (the largest β whose full-task mask
keeps at least 95% of the unmasked accuracy on both operations) and compares the sharing
across β and across sizes.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from sglab.analysis import weight_masks as wm
from sglab.errors import SglabError
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured
from sglab.experiments.masks.weight_masks import base_arm, guarded, mask_arm
from sglab.experiments.runs import Arm, FinishedRun, RunSet, format_mean_std
from sglab.experiments.spec import ExperimentParams
from sglab.registry import register_experiment
from sglab.report.plots import annotated_heatmap, grouped_bars

SPLIT = "iid_test"
OPS = ("add", "mul")
MASKS = {"full": "all", "add": "add", "mul": "mul"}  # mask name -> task.subset


def beta_label(beta: float) -> str:
    return f"{beta:g}"


def valid_run(betas: list[str], valid: list[str]) -> int:
    """Grid steps covered by the run of consecutive valid betas that ends at the largest
    valid one (the chosen beta): 0 when the beta below it is not valid."""
    index = betas.index(valid[-1])
    start = index
    while start > 0 and betas[start - 1] in valid:
        start -= 1
    return index - start


def size_label(hidden: list[int]) -> str:
    return "-".join(map(str, hidden))


def task_config(params: dict[str, Any], subset: str) -> dict[str, Any]:
    """The add/mul task, trained on ``subset`` (all, add or mul)."""
    return {"name": "add_mul", "subset": subset, "valid_size": params["valid_size"]}


class MaskSharingParams(ExperimentParams):
    sizes: list[list[int]]  # the FNNs' hidden sizes, one net per size and seed
    betas: list[float]  # the mask regularizers beta, ascending; masks train at each
    base_steps: int  # training steps of a net (lr 1e-3)
    mask_steps: int  # training steps of a mask (lr 1e-2)
    valid_size: int  # examples in the task's validation split
    batch: int = 128  # batch size of the nets and the masks (thesis B.3.2)
    # B.3.3: a beta is valid while its full-task mask keeps this share of the unmasked
    # exact match on both operations (mean over seeds); the largest valid one is chosen
    keep_min: float = 0.95


class MaskSharing(Experiment):
    name = "masks-sharing"
    params_model = MaskSharingParams

    def check(self, params: dict[str, Any]) -> None:
        if len(params["sizes"]) < 2 or len(params["betas"]) < 2:
            raise SglabError("masks-sharing needs at least two sizes and two betas "
                             f"(got {list(params['sizes'])} and {params['betas']})")
        if any(b < 0 for b in params["betas"]) or sorted(params["betas"]) != params["betas"]:
            raise SglabError(f"betas must be non-negative and ascending, got {params['betas']}")

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        """The nets, one per size and seed (the masks follow, see :meth:`stages`)."""
        self.check(params)
        return [base_arm(params, {"size": size}, task_config(params, "all"),
                         {"name": "fnn", "hidden": hidden, "outputs": 2}, seed)
                for hidden in params["sizes"] for size in [size_label(hidden)]
                for seed in params["seeds"]]

    def mask_arms(self, params: dict[str, Any], bases: RunSet) -> list[Arm]:
        return [mask_arm({**params, "beta": beta}, base,
                         {"size": base["size"], "beta": beta_label(beta), "mask": mask},
                         task_config(params, subset), base.seed)
                for base in bases for beta in params["betas"] for mask, subset in MASKS.items()]

    def stages(self, params):
        return [lambda previous: self.arms(params),
                lambda previous: self.mask_arms(params, previous.where(role="base"))]

    # ------------------------------------------------------------------ measures
    @staticmethod
    def accuracy(run: FinishedRun) -> dict[str, float]:
        """Final exact match per operation (a mask run evaluates under its final mask)."""
        return {op: float(run.final[f"{SPLIT}/exact_match/op={op}"]) for op in OPS}

    @staticmethod
    def sharing(add: FinishedRun, mul: FinishedRun) -> dict[str, Any]:
        """Shared proportion of the add and of the mul mask over all weight layers
        (|M_add ∧ M_mul| / |M_add|, the total of Figs B.4-B.5) and per layer, and the
        weights each keeps (:func:`sglab.analysis.weight_masks.mask_set_sharing`)."""
        return wm.mask_set_sharing({"add": add.model().final_masks(),
                                    "mul": mul.model().final_masks()})

    def cell(self, base: FinishedRun, masks: RunSet) -> dict[str, Any]:
        """One net and one β: the accuracies relative to the unmasked net, sharing, kept."""
        none = self.accuracy(base)
        runs = {m: masks.only(mask=m) for m in MASKS}
        acc = {m: self.accuracy(r) for m, r in runs.items()}
        return {"none": none, "accuracy": acc,
                "full_keeps": min(acc["full"][op] / max(none[op], 1e-9) for op in OPS),
                **self.sharing(runs["add"], runs["mul"])}

    def measured(self, params, runs: RunSet) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """{size: {β label: [one cell per seed]}}."""
        masks = runs.where(role="mask")
        out: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for size in map(size_label, params["sizes"]):
            for base in runs.where(role="base", size=size):
                mine = masks.where(lambda r, s=base.seed: r.seed == s, size=size)
                for beta in params["betas"]:
                    out.setdefault(size, {}).setdefault(beta_label(beta), []).append(
                        self.cell(base, mine.where(beta=beta_label(beta))))
        return out

    @staticmethod
    def valid_betas(params, cells: dict[str, list[dict[str, Any]]]) -> list[str]:
        """The betas whose full-task mask keeps ``keep_min`` of the unmasked accuracy on
        both operations (mean over seeds); B.3.3 chooses the largest of them."""
        return [beta_label(b) for b in params["betas"]
                if statistics.mean(c["full_keeps"] for c in cells[beta_label(b)])
                >= params["keep_min"]]

    @staticmethod
    def compared_sizes(valid: dict[str, list[str]]) -> list[str]:
        """The sizes the claims compare: those with a valid beta. A size whose full-task mask
        fails at every beta is left out (B.3.3 finds no beta for it; the thesis's advice is a
        net large enough to mask)."""
        return [size for size in valid if valid[size]]

    @classmethod
    def weakest_net(cls, measured: dict[str, dict[str, list[dict[str, Any]]]],
                    valid: dict[str, list[str]]) -> float:
        """The lowest exact match of an unmasked net on an operation, over the sizes the
        claims compare (all sizes when none can be masked): a size left out of the claims
        does not decide whether they can be judged."""
        compared = cls.compared_sizes(valid) or list(measured)
        return min(c["none"][op] for size in compared for cells in measured[size].values()
                   for c in cells for op in OPS)

    # ------------------------------------------------------------------ report
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        measured = self.measured(params, runs)
        sizes = [size_label(h) for h in params["sizes"]]
        betas = [beta_label(b) for b in params["betas"]]
        valid = {size: self.valid_betas(params, measured[size]) for size in sizes}
        chosen = {size: (valid[size] or [None])[-1] for size in sizes}
        share = {size: {b: statistics.mean(c["total"]["add"] for c in measured[size][b])
                        for b in betas} for size in sizes}
        keeps = {size: {b: statistics.mean(c["full_keeps"] for c in measured[size][b])
                        for b in betas} for size in sizes}
        rows = [[size, b + (" (chosen)" if b == chosen[size] else ""),
                 *self.row(measured[size][b])] for size in sizes for b in betas]
        table = {"title": "Per size and beta, mean ± std over seeds: exact match of the "
                          "unmasked net, the full-task mask's share of it (worse operation), "
                          "the add and mul masks on both operations, their total shared "
                          "proportion [%] and the weights they keep",
                 "columns": ["hidden sizes", "beta", "unmasked add / mul", "full / unmasked",
                             "add mask on add / mul", "mul mask on mul / add",
                             "add shared [%]", "mul shared [%]", "kept add", "kept mul"],
                 "rows": rows}
        layers = {size: list(measured[size][chosen[size]][0]["layers"]["add"])
                  for size in sizes if chosen[size]}
        layer_table = {
            "title": "Shared proportion of the add mask per weight layer [%] at each size's "
                     "chosen beta (mean over seeds)",
            "columns": ["hidden sizes", "beta", "per layer, input to output"],
            "rows": [[size, chosen[size], " / ".join(
                f"{100 * statistics.mean(c['layers']['add'][layer] for c in cells):.1f}"
                for layer in layers[size])]
                for size in layers for cells in [measured[size][chosen[size]]]]}
        heatmap = annotated_heatmap(
            out_dir, "sharing-vs-beta",
            [("add mask's shared proportion [%]", [[100 * share[s][b] for b in betas]
                                                    for s in sizes]),
             ("full-task mask / unmasked [%]", [[100 * keeps[s][b] for b in betas]
                                                 for s in sizes])],
            xticklabels=betas, yticklabels=sizes, xlabel="beta", ylabel="hidden sizes",
            title="Sharing against beta and size", fmt="{:.0f}", vmin=0, vmax=100,
            shaded=[[b not in valid[s] for b in betas] for s in sizes],
            caption="Left: the add mask's shared proportion with the mul mask over all layers "
                    "(the colour of thesis Fig. B.4); right: the full-task mask's exact match "
                    "over the unmasked net's (worse operation). Hatched: the full-task mask "
                    f"keeps less than {100 * params['keep_min']:g}% (B.3.3: beta too large, "
                    "or the net cannot be masked). Means over seeds.")
        by_size = grouped_bars(
            out_dir, "sharing-vs-size",
            {"add mask": {f"{s} (beta {chosen[s]})": 100 * share[s][chosen[s]] for s in layers}},
            title="Shared proportion of the add mask per size", ylabel="shared [%]",
            ylim=(0, 100), caption="The add mask's shared proportion over all layers at each "
                                   "size's chosen beta (thesis Fig. B.5), mean over seeds.")
        claims = guarded(self.claims(params, valid, share), self.weakest_net(measured, valid),
                         "exact match on an operation")
        text = (f"{len(params['seeds'])} seed(s) per size; nets {params['base_steps']} steps, "
                f"masks {params['mask_steps']} steps. Beta per size by B.3.3's rule (the "
                f"largest beta whose full-task mask keeps >= {100 * params['keep_min']:g}% of "
                "the unmasked exact match on both operations): "
                + ", ".join(f"{s} {chosen[s] or 'none'}" for s in sizes) + ".")
        return {"measured": claims,
                "sections": [{"title": "Sharing against beta and network size", "text": text,
                              "tables": [table, layer_table], "figures": [heatmap, by_size]}]}

    @staticmethod
    def row(cells: list[dict[str, Any]]) -> list[str]:
        """The table cells of one size and beta (mean ± std over seeds)."""
        def ms(get, digits=3):
            return format_mean_std([get(c) for c in cells], digits)

        return [f"{ms(lambda c: c['none']['add'])} / {ms(lambda c: c['none']['mul'])}",
                ms(lambda c: c["full_keeps"]),
                f"{ms(lambda c: c['accuracy']['add']['add'])} / "
                f"{ms(lambda c: c['accuracy']['add']['mul'])}",
                f"{ms(lambda c: c['accuracy']['mul']['mul'])} / "
                f"{ms(lambda c: c['accuracy']['mul']['add'])}",
                ms(lambda c: 100 * c["total"]["add"], 1), ms(lambda c: 100 * c["total"]["mul"], 1),
                ms(lambda c: c["kept"]["add"], 0), ms(lambda c: c["kept"]["mul"], 0)]

    def claims(self, params, valid: dict[str, list[str]],
               share: dict[str, dict[str, float]]) -> dict[str, Measured | NotMeasured]:
        """B.4: beta transfers between sizes, and neither the full-task mask's accuracy (the
        figure's y-axis) nor the add mask's sharing (its colour) is very sensitive to it;
        B.5: larger nets share less. Values per size are lists in size order, over the
        :meth:`compared_sizes`."""
        betas = [beta_label(b) for b in params["betas"]]
        usable = self.compared_sizes(valid)
        skipped = [s for s in valid if s not in usable]
        note = (f"left out, no beta keeps its full-task mask valid: {', '.join(skipped)}"
                if skipped else "")
        ids = ["beta-transfers-across-sizes", "accuracy-insensitive-to-beta",
               "sharing-insensitive-to-beta", "sharing-falls-with-size"]
        if len(usable) < 2:
            reason = f"{len(usable)} size(s) with a valid beta, the comparison needs two" + \
                (f" ({note})" if note else "")
            return {claim_id: NotMeasured(reason) for claim_id in ids}
        chosen = {s: valid[s][-1] for s in usable}
        steps = [betas.index(chosen[s]) for s in usable]
        sizes = {"sizes": usable}
        context = (f"sizes {', '.join(usable)}, each at the betas its full-task mask keeps >= "
                   f"{100 * params['keep_min']:g}% of the unmasked exact match (means over "
                   "seeds)" + (f"; {note}" if note else ""))
        at_choice = [share[s][chosen[s]] for s in usable]
        return {
            "beta-transfers-across-sizes": Measured(
                sizes | {"chosen beta": [chosen[s] for s in usable],
                         "spread [grid steps]": max(steps) - min(steps)}, context),
            "accuracy-insensitive-to-beta": Measured(
                sizes | {"valid range [grid steps]": [valid_run(betas, valid[s]) for s in usable],
                         "valid betas": [", ".join(valid[s]) for s in usable]}, context),
            "sharing-insensitive-to-beta": Measured(
                sizes | {"add shared, max - min over valid betas":
                         [max(share[s][b] for b in valid[s]) - min(share[s][b] for b in valid[s])
                          for s in usable],
                         "add shared over valid betas": [[share[s][b] for b in valid[s]]
                                                         for s in usable]}, context),
            "sharing-falls-with-size": Measured(
                sizes | {"add shared at the chosen beta": at_choice,
                         "add shared, smaller net": at_choice[:-1],
                         "add shared, next larger net": at_choice[1:]}, context),
        }


register_experiment(MaskSharing())

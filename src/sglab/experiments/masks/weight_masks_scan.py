"""SCAN under weight masks: the splits' training sets need only part of a net that solves
all of SCAN (thesis Sec. 3.3, Fig. 3.5, App. B.3.7).

Protocol, as the thesis describes it (line numbers of the thesis text):

* One encoder-decoder Transformer per seed is trained on the IID ``simple`` split's
  training set (Sec. 3.3, l. 699: "We pretrain the model on the IID data"; B.3.7,
  l. 1967: "We train the network weights on the IID dataset (the 'simple' split), and only
  the masks on the rest of the data splits"), always teacher-forced, with sinusoidal
  positions, EOS on the input and a start token (l. 1963). Sizes l. 1963: d_model 100,
  d_ff 200, 4 heads, 3 encoder and 3 decoder layers; batch 256, gradient clipping 5,
  25k steps for the net and for each mask (l. 1965). The authors' Transformer has an
  output layer of its own, so the base here has ``tie_embeddings: false``.
* The net is frozen; for each split one mask trains on that split's training set (mask
  lr 1e-2, β = 1e-3 for Transformers, l. 1965; word embeddings never masked, l. 1969).
  The ``simple`` split's mask is the full-data mask ("masks trained on the full problem",
  Fig. 3.5a caption, l. 689).
* Each mask is tested on its split's test set (exact sequence match, greedy decoding)
  beside the full-data mask on the same test set (Fig. 3.5a). The training sets hold
  every rule SCAN needs, so a drop means the net needs weights specific to the
  held-out combinations (l. 699: the gap "in Fig. 3.5a"; l. 1967).
* The add-jump mask's output layer: "Almost half of the weights corresponding to
  'I_JUMP' are removed" (l. 703-709, Fig. 3.5b, shown there for the LSTM). Here: per
  output token, the share of the weights the full-data mask keeps in that token's row of
  ``output.weight`` that the split mask removes.

* The baseline of Fig. B.8 (l. 1967, 1979): per seed and split a net of the same size and
  training trained directly on the split's training set, without masks (the standard
  setup of Lake and Baroni), tested on the split's test set.

Claims (judged only when the unmasked nets reach 0.9 on the ``simple`` test set): the
full-data mask keeps > 95% of the unmasked accuracy (B.3.3, l. 1898); each split's mask is
well below the full-data mask on that split's test set (Fig. 3.5a); under the add-jump mask
I_JUMP loses almost half of its output weights, more than any other action (Fig. 3.5b); the
split's mask on the IID-trained net scores above the net trained directly on the split
(Fig. B.8: "the remaining weights still perform significantly better").

``network: lstm`` runs the same protocol on the Lake-Baroni LSTM encoder-decoder
(``lstm_seq2seq``; the net of Fig. 3.5b, l. 703-709): 2 layers, embedding 16, hidden 200,
dropout 0.5, teacher forcing 0.5 (l. 1963 and the weight-mask code), mask β 3e-5
(l. 1965, ``sweeps/scan.yaml``) in ``paper``.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator

from sglab.analysis import mask_measures as mm
from sglab.analysis import weight_masks as wm
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured, per_seed
from sglab.experiments.masks.weight_masks import guarded
from sglab.experiments.runs import Arm, FinishedRun, RunSet, format_mean_std
from sglab.experiments.spec import ExperimentParams
from sglab.registry import register_experiment
from sglab.report.plots import grouped_bars
from sglab.tasks.scan import ACTIONS, FIXED_SPLITS
from sglab.tasks.seq2seq import EOS
from sglab.train.evaluate import evaluate

FULL = "simple"  # the IID split: its mask is the full-data mask
JUMP = "addprim_jump"
OUTPUT = "output.weight"  # the decoder's output layer (tie_embeddings: false)
TOKENS = (*ACTIONS, EOS)
VALID_KEEP = 0.95  # B.3.3: a valid full-data mask keeps > 95% of the unmasked accuracy


def split_test_set(split: str) -> str:
    """The split's test set: ``iid_test`` for the random ``simple`` split, else ``ood_test``."""
    return "iid_test" if split == FULL else "ood_test"


class ScanParams(ExperimentParams):
    network: Literal["transformer", "lstm"]  # which net the protocol runs on
    model: dict[str, Any]  # the Transformer's model section
    lstm_model: dict[str, Any]  # the Lake-Baroni LSTM's model section (network: lstm)
    beta: float  # mask beta for the Transformer (the penalty is beta / batch * sum(l))
    lstm_beta: float  # mask beta for the LSTM
    base_steps: int  # training steps of each Transformer net
    lstm_base_steps: int  # training steps of each LSTM net
    mask_steps: int  # training steps of each mask
    batch: int  # batch size of nets and masks
    splits: list[str]  # the splits masked (and trained directly); simple gives the full mask
    eval_examples: int | None  # test examples scored (the first of the shuffled set); all
    base_lr: float  # the nets' Adam learning rate
    mask_lr: float  # the masks' Adam learning rate
    grad_clip: float  # gradient clipping (B.3.7: 5)
    base_schedule: Literal["constant", "cosine"]  # the nets' learning-rate schedule
    # the masks' train.loss_reduction: row_sum is the authors' code's loss (summed over an
    # example's target tokens), the loss against which the thesis's beta is set; on
    # token_mean the same beta weighs the mean target length (15.4 tokens on simple) more
    mask_loss: Literal["token_mean", "row_sum"] = "token_mean"
    # mask the nets' LayerNorm gains and biases too, as the authors' code does
    mask_norms: bool = False
    length_groups: int  # the nets' batches grouped by length into this many groups

    @field_validator("splits")
    @classmethod
    def _known_splits(cls, splits: list[str]) -> list[str]:
        unknown = [s for s in splits if s not in FIXED_SPLITS]
        if unknown or FULL not in splits or len(set(splits)) != len(splits):
            raise ValueError(f"splits must be distinct names out of {', '.join(FIXED_SPLITS)} "
                             f"and include {FULL!r} (the full-data mask every split is "
                             "compared with)")
        return splits


def train_settings(params: dict[str, Any], steps: int, lr: float, evaluations: int,
                   schedule: str = "constant", loss_reduction: str = "token_mean", *,
                   batch: int | None = None, warmup: int = 0,
                   betas: tuple[float, float] | None = None) -> dict[str, Any]:
    """Adam without weight decay, clip ``params["grad_clip"]`` (B.3.7: 5 on SCAN), cosine down
    to lr / 10 or constant; ``evaluations`` during the run on the first ``eval_examples`` of
    the (shuffled) test set, the last on all. ``batch`` (default ``params["batch"]``), a linear
    ``warmup`` (default none) and Adam ``betas`` (default: the trainer's) where a phase
    differs (Tab. B.3)."""
    every = max(steps // evaluations, 1)
    decay = {"min_lr": lr / 10} if schedule == "cosine" else {}
    adam = {"betas": list(betas)} if betas is not None else {}
    return {"steps": steps, "batch_size": batch or params["batch"], "lr": lr, **decay, **adam,
            "lr_schedule": schedule, "warmup_steps": warmup, "weight_decay": 0.0,
            "loss_reduction": loss_reduction,
            "grad_clip": params["grad_clip"], "eval_interval": every, "log_interval": every,
            "checkpoint_interval": every, "eval_batch_size": 512,
            "eval_max_examples": params["eval_examples"]}


def mask_loss_words(params: dict[str, Any]) -> str:
    """How the masks' task loss is reduced, for the report."""
    return {"row_sum": "a loss summed over each example's target tokens (the authors' code)",
            "token_mean": "a loss averaged over target tokens"}[params.get("mask_loss", "token_mean")]


def network(params: dict[str, Any]) -> tuple[dict[str, Any], float, int]:
    """The net's model section, the masks' beta and the nets' steps for
    ``params["network"]``."""
    if params["network"] == "lstm":
        return params["lstm_model"], params["lstm_beta"], params["lstm_base_steps"]
    return params["model"], params["beta"], params["base_steps"]


def describe_network(params: dict[str, Any]) -> str:
    model = network(params)[0]
    if params["network"] == "lstm":
        return (f"LSTM encoder-decoder (Lake and Baroni), {model['n_layers']} layers of "
                f"{model['d_model']}, embeddings {model['embedding_width']}, dropout "
                f"{model['dropout']:g}, teacher forcing {model['teacher_forcing']:g}")
    return (f"Transformer d_model {model['d_model']}, d_ff {model['d_ff']}, {model['n_heads']} "
            f"heads, {model['n_layers']}+{model['n_layers']} layers, separate output layer")


def accuracy(seeds: list[dict[str, Any]], split: str, mask: str) -> list[float]:
    """Exact match on ``split``'s test set under ``mask`` (none / full / split), per seed."""
    return [seed["accuracy"][split][mask] for seed in seeds]


class ScanMasks(Experiment):
    name = "masks-scan"
    params_model = ScanParams

    # ------------------------------------------------------------------ runs
    def arms(self, params: dict[str, Any]) -> list[Arm]:
        """The base nets on the ``simple`` training set (masks follow, see :meth:`stages`)
        and, for Fig. B.8, nets trained the same way directly on each other split."""
        model, _, steps = network(params)
        train = train_settings(params, steps, params["base_lr"], 4, params["base_schedule"])

        def config(split: str) -> dict[str, Any]:
            task = {"name": "scan", "split": split, "length_groups": params["length_groups"]}
            return {"task": task, "model": model, "train": train}

        return [Arm({"role": "base"}, config(FULL), seed=seed) for seed in params["seeds"]] + [
            Arm({"role": "direct", "split": split}, config(split), seed=seed)
            for seed in params["seeds"] for split in params["splits"] if split != FULL]

    def mask_arms(self, params: dict[str, Any], bases: RunSet) -> list[Arm]:
        """One mask per base net and split, trained on the split's training set."""
        train = train_settings(params, params["mask_steps"], params["mask_lr"], 1,
                               loss_reduction=params["mask_loss"])
        return [Arm({"role": "mask", "split": split},
                    {"task": {"name": "scan", "split": split},
                     "model": {"name": "masked", "base_run": base.run_id,
                               "beta": network(params)[1],
                               "mask_norms": params["mask_norms"]},
                     "train": train}, seed=base.seed)
                for base in bases for split in params["splits"]]

    def stages(self, params):
        return [lambda previous: self.arms(params),
                lambda previous: self.mask_arms(params, previous.where(role="base"))]

    # ------------------------------------------------------------------ measures
    def measures(self, params: dict[str, Any], masks: dict[str, FinishedRun],
                 direct: dict[str, FinishedRun]) -> dict[str, Any]:
        """Exact match on every split's test set with no mask, the full-data mask and the
        split's own mask, and of the net trained directly on the split; kept weights; the
        output layer per token."""
        model = masks[FULL].model()
        final = {split: run.model().final_masks() for split, run in masks.items()}
        ones = mm.all_kept(final[FULL])
        scores = {}
        for split, run in masks.items():
            tried = {"none": ones, "full": final[FULL]}
            if split != FULL:
                tried["split"] = final[split]
            test = split_test_set(split)
            records = mm.evaluate_under_masks(model, run.task, test, tried, 512,
                                              params["eval_examples"])
            scores[split] = {name: r[f"{test}/exact_match"] for name, r in records.items()}
            if split in direct:  # the same examples, the net trained on the split (Fig. B.8)
                net = direct[split]
                record = evaluate(net.model().eval(), net.task, test, 512,
                                  params["eval_examples"])
                scores[split]["direct"] = record[f"{test}/exact_match"]
        index = masks[FULL].task.vocab.index
        rows = mm.output_rows(final[FULL][OUTPUT], {s: m[OUTPUT] for s, m in final.items()},
                              [index[t] for t in TOKENS], list(TOKENS))
        return {"accuracy": scores, "kept": {s: wm.count(m) for s, m in final.items()},
                "weights": sum(m.numel() for m in ones.values()),
                "output_kept": rows["kept"],
                "output_removed": {s: r for s, r in rows["removed"].items() if s != FULL}}

    def per_seed(self, params: dict[str, Any], runs: RunSet) -> list[dict[str, Any]]:
        out = []
        for base in runs.where(role="base"):
            mine = runs.where(lambda r, b=base: r.labels["role"] == "mask"
                              and r.config.model.base_run == b.run_id)
            direct = runs.where(lambda r, b=base: r.labels["role"] == "direct" and r.seed == b.seed)
            out.append(self.measures(params, {s: mine.only(split=s) for s in params["splits"]},
                                     {s: direct.only(split=s) for s in params["splits"]
                                      if s != FULL}))
        return out

    # ------------------------------------------------------------------ report
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        seeds = self.per_seed(params, runs)
        splits = params["splits"]
        others = [s for s in splits if s != FULL]

        def cell(values: list[float]) -> str:
            return format_mean_std([100 * v for v in values], 1)

        accuracy_table = {
            "title": "Exact match [%] on each split's test set: the unmasked net, the "
                     "full-data mask (trained on simple) and the split's own mask (trained "
                     "on the split's training set), and a net trained directly on the split "
                     "without masks; mean ± std over seeds (Figs. 3.5a, B.8)",
            "columns": ["split", "test set", "no mask", "full-data mask", "split mask",
                        "trained on the split"],
            "rows": [[split, split_test_set(split), cell(accuracy(seeds, split, "none")),
                      cell(accuracy(seeds, split, "full")),
                      *((cell(accuracy(seeds, split, "split")),
                         cell(accuracy(seeds, split, "direct"))) if split != FULL
                        else ("(= full-data)", "(= no mask)"))]
                     for split in splits]}
        accuracy_figure = grouped_bars(out_dir, "scan-mask-accuracy", {
            label: {split: statistics.mean(100 * v for v in accuracy(seeds, split, mask))
                    for split in splits if mask in seeds[0]["accuracy"][split]}
            for label, mask in (("no mask", "none"), ("full-data mask", "full"),
                                ("split mask", "split"), ("trained on the split", "direct"))},
            title="Test accuracy per split under the masks", ylabel="exact match [%]",
            ylim=(0, 105),
            caption="Exact match on each split's test set: the net trained on the IID split, "
                    "the full-data mask, the mask trained on the split's own training set, and "
                    "a net trained directly on the split without masks (mean over seeds; "
                    "thesis Figs. 3.5a, B.8).")
        output_table = {
            "title": "Output layer per token [%]: weights of the token's row the full-data mask "
                     "keeps, and the share of those that each split's mask removes "
                     "(Fig. 3.5b)",
            "columns": ["token", "kept by full-data mask",
                        *(f"removed by {s} mask" for s in others)],
            "rows": [[token, cell([s["output_kept"][FULL][token] for s in seeds]),
                      *(cell([s["output_removed"][o][token] for s in seeds]) for o in others)]
                     for token in TOKENS]}
        figures = [accuracy_figure]
        if others:
            figures.append(grouped_bars(out_dir, "scan-output-removed", {
                f"{o} mask": {t: statistics.mean(100 * s["output_removed"][o][t] for s in seeds)
                              for t in TOKENS} for o in others},
                title="Output weights removed per token", ylabel="removed [%]", ylim=(0, 100),
                caption="Share of the weights the full-data mask keeps in each output token's "
                        "row of the output layer that the split's mask removes (mean over "
                        "seeds; thesis Fig. 3.5b, there for the LSTM)."))
        kept_table = {"title": f"Weights kept by each mask (of {seeds[0]['weights']:,} masked)",
                      "columns": ["mask", "kept"],
                      "rows": [[s, format_mean_std([x["kept"][s] for x in seeds], 0)]
                               for s in splits]}
        shown = params["eval_examples"]
        tested = "all examples" if shown is None else f"the first {shown} (shuffled) examples"
        _, beta, steps = network(params)
        text = (f"{len(seeds)} seed(s); {describe_network(params)}; base {steps} steps on "
                f"simple, masks {params['mask_steps']} steps, batch {params['batch']}, beta "
                f"{beta:g} on {mask_loss_words(params)}, K = 4. Test sets: {tested}.")
        section = {"title": "SCAN splits under weight masks", "text": text,
                   "tables": [accuracy_table, output_table, kept_table], "figures": figures}
        return {"measured": self.measured(params, seeds), "sections": [section]}

    @staticmethod
    def measured(params: dict[str, Any], seeds: list[dict[str, Any]]
                 ) -> dict[str, Measured | NotMeasured]:
        """The claims' values: per seed, and per (seed, split) for the splits besides
        simple (seeds outer, splits inner)."""
        others = [s for s in params["splits"] if s != FULL]
        pairs = [(i, s) for i in range(len(seeds)) for s in others]

        def by_pair(mask: str) -> list[float]:
            return [accuracy(seeds, s, mask)[i] for i, s in pairs]

        def by_split(label: str, mask: str) -> dict[str, Any]:
            return {f"{label.format(s)} on {s}": per_seed(accuracy(seeds, s, mask))
                    for s in others}

        tested = (f"exact match on each split's test set; per (seed, split) over seeds "
                  f"{params['seeds']} and splits {others}")
        rel = [f / max(n, 1e-9) for f, n in zip(accuracy(seeds, FULL, "full"),
                                                accuracy(seeds, FULL, "none"))]
        no_split = NotMeasured("the preset masks no split besides simple")
        measured: dict[str, Measured | NotMeasured] = {
            "full-mask-keeps-accuracy": Measured(
                {"unmasked on simple": per_seed(accuracy(seeds, FULL, "none")),
                 "full-data mask / unmasked on simple": per_seed(rel)},
                "exact match on the simple test set")}
        if not others:
            measured["split-mask-loses-accuracy"] = no_split
        elif min(rel) <= VALID_KEEP:
            # B.3.3: a mask that no longer solves the full task is not a valid reference;
            # the split masks, pruned as far, may lose their test set for the same reason
            measured["split-mask-loses-accuracy"] = NotMeasured(
                f"the full-data mask keeps only {min(rel):.1%} of the unmasked accuracy on "
                f"simple (B.3.3's validity rule: more than {VALID_KEEP:.0%}); a smaller beta "
                "or fewer mask steps")
        else:
            measured["split-mask-loses-accuracy"] = Measured(
                {"full-data mask per (seed, split)": by_pair("full"),
                 "split mask per (seed, split)": by_pair("split"),
                 **by_split("full-data mask", "full"), **by_split("{} mask", "split")}, tested)
        if JUMP in params["splits"]:
            removed = [s["output_removed"][JUMP] for s in seeds]
            measured["jump-output-weights-removed"] = Measured(
                {"I_JUMP removed": per_seed([r["I_JUMP"] for r in removed]),
                 "largest other action removed": per_seed(
                     [max(r[a] for a in ACTIONS if a != "I_JUMP") for r in removed])},
                "share of the weights the full-data mask keeps in each action's row of the "
                "output layer that the add-jump mask removes")
        else:
            measured["jump-output-weights-removed"] = NotMeasured(
                f"the preset has no {JUMP} mask")
        measured["pretraining-beats-direct-training"] = Measured(
            {"split mask per (seed, split)": by_pair("split"),
             "trained on the split per (seed, split)": by_pair("direct"),
             **by_split("{} mask", "split"), **by_split("trained on the split", "direct")},
            tested) if others else no_split
        return guarded(measured, min(accuracy(seeds, FULL, "none")),
                           "exact match on the simple test set")


register_experiment(ScanMasks())

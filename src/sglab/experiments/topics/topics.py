"""How transformers learn topic structure (Li, Li & Risteski, ICML 2023).

A one-layer, one-head encoder f(X) = W_E^T (W_V W_E X) Attn(W_E X) + b (no FFN, no
LayerNorm, no residual, no W_O, tied decoder, output bias) trained with masked
language modelling on topic-model documents (T = 10 topics of v = 10 words).

Run groups:
  embedding         learned embeddings, everything trained jointly (cross-entropy);
                    the Gram matrix E = W_E^T W_E should be block-structured.
  attention         one-hot embeddings (frozen), W_Q, W_K, W_V and b trained from a
                    small initialization (cross-entropy) with Adam at 0.003/0.01/0.03 and
                    SGD at 0.01/0.03 (the attention table and the value matrix), plus SGD
                    at lr 3 for the weight-norm curves: Adam normalizes every update, so
                    its W_K and W_Q move at the learning rate from the first step and no
                    first stage can be seen; plain SGD keeps them near 0 while W_V grows.
  theory-value      one-hot embeddings, uniform attention (W_Q = W_K = 0), W_V trained
                    with the squared loss: its same-topic minus different-topic block
                    gap should approach 1 / (v (1 - (1 - p_c) p_m)).
  theory-embedding  uniform attention, W_V = I, embeddings trained with the squared
                    loss: the same gap in E = W_E^T W_E.

Every family runs once per seed; the attention runs keep their step-0 weights
(``train.snapshot_steps=[0]``) for the weight-norm curves.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from sglab import registry
from sglab.analysis.topic_models import (
    attention_class_statistics,
    topic_attention_summary,
    word_value_matrix,
)
from sglab.analysis.topics import ATTENTION_CLASSES, topic_block_statistics
from sglab.experiments.base import Experiment
from sglab.experiments.claims import Measured, NotMeasured, per_seed
from sglab.experiments.runs import Arm, FinishedRun, RunSet, format_mean_std
from sglab.experiments.spec import ExperimentParams
from sglab.experiments.topics.topics_training import (
    NORM_NAMES,
    embedding_gram,
    theory_section,
    two_stage_section,
)
from sglab.report.plots import heatmap_grid
from sglab.tasks.topics import word_topics

# The seed's attention table (one-hot embeddings, synthetic LDA data), shown beside ours.
PAPER_TABLE = {
    ("adamw", 0.003): ("0.00759 ± 0.00171", "0.0108 ± 0.000657", "0.00689 ± 0.000160"),
    ("adamw", 0.01): ("0.00811 ± 0.000705", "0.010 ± 0.000392", "0.00707 ± 0.000178"),
    ("adamw", 0.03): ("0.00453 ± 0.000346", "0.0116 ± 0.000460", "0.00665 ± 0.000200"),
    ("sgd", 0.01): ("0.0105", "0.0106", "0.00673"),
    ("sgd", 0.03): ("0.0140 ± 0.00158", "0.0103 ± 0.000357", "0.00641 ± 0.0000239"),
}
#: Names of the attention classes in the claims (the seed's table columns).
CLASS_NAMES = {"same_word": "same word", "same_topic_different_word": "same topic, different word",
               "different_topic": "different topic"}

Optimizer = tuple[Literal["adamw", "sgd"], float]


def optimizer_label(optimizer: str, lr: float) -> str:
    return f"{'Adam' if optimizer == 'adamw' else 'SGD'} {lr:g}"


class TopicTask(BaseModel):
    """The task section of every run (the ``topics`` task's fields the presets set)."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["topics"]
    n_topics: int  # T topics
    words_per_topic: int  # v words per topic (disjoint)
    min_length: int  # document length range (words)
    max_length: int
    mask_probability: float  # p_m: positions selected for the MLM loss
    keep_probability: float  # p_c: a selected position keeps its word
    random_probability: float  # p_r: a selected position shows a random word
    mixture: str  # how a document's topics are drawn (dirichlet: LDA)
    dirichlet_alpha: float  # the LDA prior per topic
    eval_documents: int  # held-out documents per split


class TheoryTask(BaseModel):
    """Task fields replaced in the theory runs (the generator of the theorems)."""

    model_config = ConfigDict(extra="forbid")
    mixture: str  # uniform_subset: tau distinct topics, uniform over their words
    topics_per_document: int  # tau


class TopicsParams(ExperimentParams):
    task: TopicTask  # the task of every run
    theory_task: TheoryTask  # what the theory runs change in it
    batch_size: int  # documents per batch, every run
    embedding_dim: int  # width of the learned embeddings (embedding, theory-embedding runs)
    embedding_steps: int  # steps of the embedding runs
    attention_steps: int  # steps of the Adam attention runs
    sgd_steps: int  # steps of the SGD attention runs of the table
    theory_steps: int  # steps of the theory runs
    theory_length: int  # document length of the theory runs
    optimizers: list[Optimizer]  # the attention table's rows: (optimizer, learning rate)
    reference_optimizer: Optimizer  # the attention run whose W_V and attention are claimed
    two_stage_optimizer: Optimizer  # the attention run of the weight-norm curves
    two_stage_steps: int  # its steps
    init_gamma: float  # init std d^-gamma of every weight (small: the two-stage regime)
    norm_interval: int  # evaluation (and weight-norm logging) interval of the attention runs
    attention_documents: int  # held-out documents the attention statistics average over
    reference_length: int  # words per document read; attention rescaled to 1/this uniform
    least_squares_documents: int  # documents of the finite least-squares fit (theory table)


class Topics(Experiment):
    name = "topics"
    params_model = TopicsParams

    # ------------------------------------------------------------------ runs
    @staticmethod
    def _vocab_size(params) -> int:
        task = params["task"]
        return task["n_topics"] * task["words_per_topic"] + 2

    def _base(self, params, steps: int, optimizer: str, lr: float, loss: str,
              eval_interval: int) -> dict[str, Any]:
        return {
            "task": dict(params["task"]),
            "model": {"name": "transformer", "n_layers": 1, "n_heads": 1,
                      "d_model": self._vocab_size(params), "attention_mask": "bidirectional",
                      "dropout": 0.0, "bias": False,
                      "embedding": {"kind": "one_hot", "tied": True, "output_bias": True},
                      "positions": {"kind": "none"},
                      "attention": {"kind": "softmax", "out_projection": False},
                      "ffn": {"kind": "none"},
                      "block": {"kind": "plain", "norm": "none", "residual_ablation": [0]},
                      "init": {"kind": "gamma", "gamma": params["init_gamma"]}},
            "train": {"steps": steps, "batch_size": params["batch_size"], "lr": lr,
                      "optimizer": optimizer, "lr_schedule": "constant", "warmup_steps": 0,
                      "weight_decay": 0.0, "grad_clip": None, "loss": loss,
                      "eval_interval": eval_interval, "log_interval": max(steps // 5, 1),
                      "checkpoint_interval": max(steps // 2, 1),
                      "eval_max_examples": 64, "eval_batch_size": 256,
                      "target_metric": "iid_test/accuracy", "weight_norms": NORM_NAMES},
        }

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        arms = []
        seeds = params["seeds"]
        grid = [tuple(x) for x in params["optimizers"]]
        two_stage = tuple(params["two_stage_optimizer"])
        for optimizer, lr in grid + ([two_stage] if two_stage not in grid else []):
            steps = params["attention_steps"] if optimizer == "adamw" else params["sgd_steps"]
            if (optimizer, lr) == two_stage:
                steps = params["two_stage_steps"]
            base = self._base(params, steps, optimizer, lr, "cross_entropy", params["norm_interval"])
            base["train"]["snapshot_steps"] = [0]  # initial weights, for the norm curves
            labels = {"family": "attention", "optimizer": optimizer_label(optimizer, lr)}
            arms += [Arm(labels, base, seed=seed) for seed in seeds]
        steps = params["embedding_steps"]
        base = self._base(params, steps, "adamw", 0.01, "cross_entropy", max(steps // 10, 1))
        base["model"].update(embedding={**base["model"]["embedding"], "kind": "learned"},
                             d_model=params["embedding_dim"])
        arms += [Arm({"family": "embedding", "optimizer": "Adam 0.01"}, base, seed=seed)
                 for seed in seeds]
        steps, length = params["theory_steps"], params["theory_length"]
        base = self._base(params, steps, "adamw", 0.003, "squared", max(steps // 10, 1))
        base["task"].update(min_length=length, max_length=length, **params["theory_task"])
        base["train"].update(lr_schedule="cosine", min_lr=3e-5)
        base["model"]["attention"] = {**base["model"]["attention"], "uniform": True}
        arms += [Arm({"family": "theory-value", "optimizer": "Adam 0.003"}, base, seed=seed)
                 for seed in seeds]
        base = {**base, "model": {**base["model"], "d_model": params["embedding_dim"],
                                  "attention": {**base["model"]["attention"],
                                                "identity_value": True},
                                  "embedding": {**base["model"]["embedding"], "kind": "learned"}},
                "train": {**base["train"], "weight_norms": []}}
        arms += [Arm({"family": "theory-embedding", "optimizer": "Adam 0.003"}, base, seed=seed)
                 for seed in seeds]
        return arms

    # ------------------------------------------------------------------ analysis
    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        attention = runs.where(family="attention")
        measured = {run.run_id: self._measure_attention(run, params) for run in attention}
        reference = optimizer_label(*params["reference_optimizer"])
        grid = [optimizer_label(*x) for x in params["optimizers"]]
        embedding_section, embedding_claim = self._embeddings(runs.where(family="embedding"),
                                                              out_dir)
        attention_section, value_claim, table_claim = self._attention(
            attention.where(lambda r: r["optimizer"] in grid), measured, reference, params,
            out_dir)
        norms_section, stage_claim = two_stage_section(
            attention.where(optimizer=optimizer_label(*params["two_stage_optimizer"])),
            attention.where(optimizer=reference), measured, out_dir)
        theory, theory_claim = theory_section(runs.where(family="theory-value"),
                                              runs.where(family="theory-embedding"), params)
        return {"measured": {"embeddings-block-structure": embedding_claim,
                             "one-hot-value-and-attention-topic-structure": value_claim,
                             "two-stage-training": stage_claim,
                             "theory-block-gap": theory_claim,
                             "attention-table": table_claim},
                "sections": [embedding_section, attention_section, norms_section, theory]}

    # --- (a) embedding Gram matrix
    def _embeddings(self, runs: RunSet, out_dir: Path):
        grams = [embedding_gram(run) for run in runs]
        stats = [topic_block_statistics(gram, word_topics(run.task))
                 for run, gram in zip(runs, grams)]
        figure = heatmap_grid(out_dir, "embedding_gram",
                              [[(f"E = W_E^T W_E, seed {runs[0].seed}", grams[0])]],
                              cmap="RdBu_r", symmetric=True, title="embedding Gram matrix",
                              caption="E = W_E^T W_E over the 100 words, ordered by topic.",
                              cell_size=4.0)
        result = Measured(
            {"same-topic": per_seed(s["same_topic"] for s in stats),
             "different-topic": per_seed(s["different_topic"] for s in stats)},
            "mean Gram entry <e_i, e_j> over same-topic and different-topic pairs of distinct "
            "words; all weights trained (cross-entropy, Adam 0.01)")
        section = {
            "title": "Embeddings (all weights trained)",
            "text": "Gram matrix of the learned word embeddings, words ordered by topic "
                    "(10 blocks of 10). Means over pairs of distinct words.",
            "tables": [{"columns": ["seed", "same-topic mean", "different-topic mean", "gap",
                                    "ratio"],
                        "rows": [[r.seed, s["same_topic"], s["different_topic"], s["gap"],
                                  _ratio_text(s["ratio"])] for r, s in zip(runs, stats)]}],
            "figures": [figure],
        }
        return section, result

    # --- (b) attention statistics and value matrix
    @staticmethod
    def _measure_attention(run: FinishedRun, params: dict[str, Any]) -> dict[str, Any]:
        task, model = run.task, run.model()
        docs = task.documents["iid_test"]
        n, length = params["attention_documents"], params["reference_length"]
        tokens, real = docs.tokens[:n, :length], docs.real[:n, :length]
        attention = attention_class_statistics(model, tokens, real, task.topic_of, length)
        value = word_value_matrix(model, task.word_ids)
        summary = topic_attention_summary(attention[0], task.config.words_per_topic)
        return {"attention": attention, "value": value,
                "value_stats": topic_block_statistics(value, word_topics(task)), **summary}

    def _attention(self, runs: RunSet, measured: dict, reference: str, params, out_dir):
        uniform = 1.0 / params["reference_length"]
        rows, paper_rows, row_means = [], [], {}
        per_row: dict[str, list] = {}
        for (optimizer, lr), label in ((tuple(x), optimizer_label(*x)) for x in params["optimizers"]):
            group = [measured[r.run_id] for r in runs.where(optimizer=label)]
            cells = [[float(m["attention"][0][k][0]) for m in group] for k in ATTENTION_CLASSES]
            rows.append([label, *[format_mean_std(c, 5, significant=True) for c in cells],
                         format_mean_std([m["ratios"]["weighted"] for m in group], 3,
                                         significant=True), len(group)])
            paper_rows.append([label, *PAPER_TABLE.get((optimizer, lr), ("-", "-", "-"))])
            row_means[label] = [float(np.mean(c)) for c in cells]
            per_row[label] = cells
        ref_runs = runs.where(optimizer=reference)
        ref = [measured[r.run_id] for r in ref_runs]
        value_claim = Measured(
            {"W_V same-topic": per_seed(m["value_stats"]["same_topic"] for m in ref),
             "W_V different-topic": per_seed(m["value_stats"]["different_topic"] for m in ref),
             "attention same-topic": per_seed(m["same_topic"] for m in ref),
             "attention different-topic": per_seed(m["different_topic"] for m in ref)},
            f"{reference}, one-hot embeddings; W_V block means over distinct words; attention "
            f"× keys/{params['reference_length']} (uniform = {uniform:g}), same-topic = "
            "same-word and same-topic-different-word pairs pooled")
        table_claim = self._table_measurement(params, per_row, row_means, uniform)
        first_run = ref_runs[0] if len(ref_runs) else runs[0]
        figure = heatmap_grid(out_dir, "value_matrix",
                              [[(f"W_V ({reference}, seed {first_run.seed})",
                                 measured[first_run.run_id]["value"])]],
                              cmap="RdBu_r", symmetric=True, title="value matrix",
                              caption="W_V restricted to the 100 words, ordered by topic.",
                              cell_size=4.0)
        layer_rows = [[r.seed, layer, head, *[float(stats[k][head]) for k in ATTENTION_CLASSES]]
                      for r, m in zip(ref_runs, ref) for layer, stats in m["attention"].items()
                      for head in range(len(stats[ATTENTION_CLASSES[0]]))]
        columns = ["Optimizer and learning rate", "Avg same-word attention",
                   "Avg same-topic-different-word attention", "Avg different-topic attention"]
        section = {
            "title": "Attention with one-hot embeddings",
            "text": f"Average attention weight over {params['attention_documents']} held-out "
                    f"documents (first {params['reference_length']} words, no masking), scaled "
                    f"by (number of keys)/{params['reference_length']} so that uniform "
                    f"attention reads {uniform:g}. Same word includes a position attending to "
                    "itself. Weighted ratio = ((v-1)/v)·α + (1/v)·β with α = c2/c3, β = c1/c3.",
            "tables": [
                {"title": "Attention statistics, mean ± std over seeds",
                 "columns": [*columns, "weighted same/different ratio", "seeds"], "rows": rows},
                {"title": "The seed's table (for comparison)", "columns": columns,
                 "rows": paper_rows},
                {"title": f"Per layer and head ({reference})",
                 "columns": ["seed", "layer", "head", *ATTENTION_CLASSES], "rows": layer_rows},
                {"title": f"Value matrix W_V block statistics ({reference}, distinct words)",
                 "columns": ["seed", "same-topic mean", "different-topic mean", "gap"],
                 "rows": [[r.seed, m["value_stats"]["same_topic"],
                           m["value_stats"]["different_topic"], m["value_stats"]["gap"]]
                          for r, m in zip(ref_runs, ref)]},
            ],
            "figures": [figure],
        }
        return section, value_claim, table_claim

    @staticmethod
    def _table_measurement(params, per_row: dict[str, list], row_means: dict[str, list],
                           uniform: float) -> Measured | NotMeasured:
        """Every row of the seed's table: its three attention classes per seed (the values
        the seed's numbers refer to) and, for the rules, their means row by row."""
        missing = [optimizer_label(*key) for key in PAPER_TABLE if optimizer_label(*key)
                   not in per_row]
        if missing:
            return NotMeasured(f"the preset's optimizers leave out rows of the seed's table: "
                               f"{', '.join(missing)}")
        values: dict[str, Any] = {
            name: [row_means[label][c] for label in per_row]
            for c, name in enumerate(CLASS_NAMES.values())}
        values["uniform"] = uniform
        for label, cells in per_row.items():
            for name, cell in zip(CLASS_NAMES.values(), cells):
                values[f"{label}: {name}"] = per_seed(cell)
        return Measured(values, f"rows {', '.join(per_row)}; attention × keys/"
                                f"{params['reference_length']} (uniform = {uniform:g}), "
                                "one-hot embeddings, cross-entropy")


def _ratio_text(ratio: float) -> str:
    return "n/a (different ≤ 0)" if math.isnan(ratio) else f"{ratio:.3f}"


registry.register_experiment(Topics())

__all__ = ["Topics"]

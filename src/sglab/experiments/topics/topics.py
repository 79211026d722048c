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
from typing import Any

import numpy as np

from sglab import registry
from sglab.analysis.hooks import capture
from sglab.analysis.topics import (
    ATTENTION_CLASSES,
    attention_statistics,
    topic_attention_ratios,
    topic_block_statistics,
)
from sglab.experiments.base import Experiment
from sglab.experiments.legacy_claims import (
    all_of,
    any_of,
    at_most,
    claim,
    greater_than,
    less_than,
)
from sglab.experiments.runs import Arm, FinishedRun, RunSet, format_mean_std
from sglab.experiments.topics.topics_training import (
    NORM_NAMES,
    embedding_gram,
    theory_section,
    two_stage_section,
)
from sglab.report.plots import heatmap_grid
from sglab.tasks.topics import word_topics

# The seed's attention table (one-hot embeddings, synthetic LDA data), for comparison.
PAPER_TABLE = {
    ("adamw", 0.003): ("0.00759 ± 0.00171", "0.0108 ± 0.000657", "0.00689 ± 0.000160"),
    ("adamw", 0.01): ("0.00811 ± 0.000705", "0.010 ± 0.000392", "0.00707 ± 0.000178"),
    ("adamw", 0.03): ("0.00453 ± 0.000346", "0.0116 ± 0.000460", "0.00665 ± 0.000200"),
    ("sgd", 0.01): ("0.0105", "0.0106", "0.00673"),
    ("sgd", 0.03): ("0.0140 ± 0.00158", "0.0103 ± 0.000357", "0.00641 ± 0.0000239"),
}
OPTIMIZER_GRID = [["adamw", 0.003], ["adamw", 0.01], ["adamw", 0.03], ["sgd", 0.01], ["sgd", 0.03]]


def optimizer_label(optimizer: str, lr: float) -> str:
    return f"{'Adam' if optimizer == 'adamw' else 'SGD'} {lr:g}"


def _preset(*, length: int, attention_steps: int, sgd_steps: int, theory_steps: int,
            embedding_steps: int, batch: int, seeds: list[int],
            eval_documents: int, attention_documents: int, norm_interval: int,
            least_squares_documents: int, embedding_dim: int, quiet: bool,
            two_stage_steps: int, theory_length: int | None = None,
            init_gamma: float = 1.5) -> dict[str, Any]:
    return {
        "task": {"name": "topics", "n_topics": 10, "words_per_topic": 10,
                 "min_length": length, "max_length": length, "mask_probability": 0.15,
                 "keep_probability": 0.1, "random_probability": 0.1,
                 "mixture": "dirichlet", "dirichlet_alpha": 0.1,
                 "eval_documents": eval_documents},
        "theory_task": {"mixture": "uniform_subset", "topics_per_document": 2},
        "batch_size": batch, "seeds": seeds,
        "embedding_dim": embedding_dim, "embedding_steps": embedding_steps,
        "attention_steps": attention_steps, "sgd_steps": sgd_steps,
        "theory_steps": theory_steps, "theory_length": theory_length or length,
        "optimizers": OPTIMIZER_GRID, "reference_optimizer": ["adamw", 0.01],
        "two_stage_optimizer": ["sgd", 3.0], "two_stage_steps": two_stage_steps,
        "init_gamma": init_gamma, "norm_interval": norm_interval,
        "attention_documents": attention_documents, "reference_length": length,
        "least_squares_documents": least_squares_documents,
        "theory_tolerance": 0.05, "quiet": quiet,
    }


class Topics(Experiment):
    name = "topics"
    title = "How transformers learn topic structure: embeddings, attention and two-stage training"
    description = (
        "Li, Li & Risteski (ICML 2023). Masked language modelling (p_m = 0.15, p_c = p_r = 0.1) "
        "on topic-model documents with 10 topics of 10 words. One-layer, one-head encoder "
        "f(X) = W_E^T (W_V W_E X) Attn(W_E X) + b without FFN, LayerNorm, residual or W_O. "
        "Embedding Gram matrix, value matrix and attention statistics on held-out documents, "
        "weight-norm dynamics, and the block gap predicted by the theory."
    )
    presets = {
        # about 10 seconds: every run and every report part, too short for the claims
        "quick": _preset(length=40, attention_steps=60, sgd_steps=60, theory_steps=60,
                         embedding_steps=60, two_stage_steps=60, batch=16, seeds=[0],
                         eval_documents=64, attention_documents=64, norm_interval=10,
                         least_squares_documents=2000, embedding_dim=16, quiet=True),
        # CPU: 100-word documents (the paper's are 100-150), fresh documents every batch,
        # batch 32 (paper 40), 1,000-1,500 steps instead of up to 20 epochs (5,000 steps);
        # 27 runs, about 5 minutes with 2 workers x 1 thread on 2 otherwise idle cores
        "default": _preset(length=100, attention_steps=1000, sgd_steps=1000, theory_steps=1500,
                           embedding_steps=1500, two_stage_steps=1500, batch=32, seeds=[0, 1, 2],
                           eval_documents=500,
                           attention_documents=500, norm_interval=25,
                           least_squares_documents=20000, embedding_dim=32, quiet=False),
        # the authors' demo sizes: batch 40, 20 epochs of 10,000 documents = 5,000 steps
        "paper": _preset(length=100, attention_steps=5000, sgd_steps=5000, theory_steps=5000,
                         embedding_steps=5000, two_stage_steps=5000, batch=40, seeds=[0, 1, 2, 3, 4],
                         eval_documents=500,
                         attention_documents=500, norm_interval=25,
                         least_squares_documents=50000, embedding_dim=104, quiet=False),
    }

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
                      "d_model": self._vocab_size(params), "ffn": "none", "norm": "none",
                      "residual_ablation": [0], "pos_encoding": "none",
                      "attention_mask": "bidirectional", "embedding": "one_hot",
                      "attention_out_projection": False, "output_bias": True,
                      "tie_embeddings": True, "dropout": 0.0, "bias": False,
                      "init": "gamma", "init_gamma": params["init_gamma"]},
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
        base["model"].update(embedding="learned", d_model=params["embedding_dim"])
        arms += [Arm({"family": "embedding", "optimizer": "Adam 0.01"}, base, seed=seed)
                 for seed in seeds]
        steps, length = params["theory_steps"], params["theory_length"]
        base = self._base(params, steps, "adamw", 0.003, "squared", max(steps // 10, 1))
        base["task"].update(min_length=length, max_length=length, **params["theory_task"])
        base["train"].update(lr_schedule="cosine", min_lr=3e-5)
        base["model"].update(uniform_attention=True)
        arms += [Arm({"family": "theory-value", "optimizer": "Adam 0.003"}, base, seed=seed)
                 for seed in seeds]
        base = {**base, "model": {**base["model"], "identity_value": True,
                                  "embedding": "learned", "d_model": params["embedding_dim"]},
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
        return {"claims": [embedding_claim, value_claim, stage_claim, theory_claim, table_claim],
                "sections": [embedding_section, attention_section, norms_section,
                             theory]}

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
        values = {"seeds": [r.seed for r in runs],
                  "same": [s["same_topic"] for s in stats],
                  "different": [s["different_topic"] for s in stats],
                  "gap": [s["gap"] for s in stats], "ratio": [s["ratio"] for s in stats]}
        result = claim(
            "embeddings-block-structure",
            "Trained embeddings have block structure: the dot product of two words' embeddings "
            "is larger when they belong to the same topic than when they belong to different "
            "topics.",
            values,
            [greater_than("gap", 0.0),
             any_of(greater_than("ratio", 1.0),
                    all_of(at_most("different", 0.0), greater_than("same", 0.0)))],
            context="mean Gram entry over same-topic and different-topic pairs of distinct "
                    "words, per seed (a ratio means nothing when different ≤ 0)",
        )
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
        patterns = capture(model, ["blocks.*.attn.pattern"], tokens, key_padding_mask=real)
        measure: dict[str, Any] = {"attention": {
            layer: attention_statistics(patterns[f"blocks.{layer}.attn.pattern"], tokens,
                                        task.topic_of, real, reference_length=length)
            for layer in range(run.config.model.n_layers)}}
        words = task.word_ids
        measure["value"] = model.blocks[0].attn.weight_views()["W_V"].detach()[words][:, words].numpy()
        measure["value_stats"] = topic_block_statistics(measure["value"], word_topics(task))
        head = measure["attention"][0]
        c1, c2, c3 = (float(head[k][0]) for k in ATTENTION_CLASSES)
        n1, n2 = (int(x) for x in head["pairs"][:2])
        measure["same_topic"] = (c1 * n1 + c2 * n2) / max(n1 + n2, 1)
        measure["different_topic"] = c3
        measure["ratios"] = topic_attention_ratios(c1, c2, c3, task.config.words_per_topic)
        return measure

    def _attention(self, runs: RunSet, measured: dict, reference: str, params, out_dir):
        uniform = 1.0 / params["reference_length"]
        rows, paper_rows, adam_cells = [], [], []
        for (optimizer, lr), label in ((tuple(x), optimizer_label(*x)) for x in params["optimizers"]):
            group = [measured[r.run_id] for r in runs.where(optimizer=label)]
            cells = [[float(m["attention"][0][k][0]) for m in group] for k in ATTENTION_CLASSES]
            rows.append([label, *[format_mean_std(c, 5, significant=True) for c in cells],
                         format_mean_std([m["ratios"]["weighted"] for m in group], 3,
                                         significant=True), len(group)])
            paper_rows.append([label, *PAPER_TABLE.get((optimizer, lr), ("-", "-", "-"))])
            if optimizer == "adamw":
                adam_cells.append((label, cells))
        ref_runs = runs.where(optimizer=reference)
        ref = [measured[r.run_id] for r in ref_runs]
        value_claim = claim(
            "one-hot-value-and-attention-topic-structure",
            "With one-hot embeddings, the value matrix learns topic blocks (same-topic entries "
            "above different-topic ones), and attention puts more weight on same-topic words "
            "than on different-topic words.",
            {"seeds": [r.seed for r in ref_runs],
             "W_V same": [m["value_stats"]["same_topic"] for m in ref],
             "W_V different": [m["value_stats"]["different_topic"] for m in ref],
             "attention same-topic": [m["same_topic"] for m in ref],
             "attention different-topic": [m["different_topic"] for m in ref]},
            [greater_than("W_V same", "W_V different"),
             greater_than("attention same-topic", "attention different-topic")],
            context=f"{reference}, per seed; attention × L/{params['reference_length']}, "
                    f"uniform = {uniform:g}",
        )
        table_claim = claim(
            "attention-table",
            "Attention table (Adam 0.003/0.01/0.03, SGD 0.01/0.03): the average different-topic "
            "attention is below uniform and the same-topic-different-word attention above it.",
            {"Adam rows": [label for label, _ in adam_cells], "uniform": uniform,
             "different-topic": [float(np.mean(c[2])) for _, c in adam_cells],
             "same-topic-different-word": [float(np.mean(c[1])) for _, c in adam_cells]},
            [less_than("different-topic", "uniform"),
             greater_than("same-topic-different-word", "uniform")],
            context="; ".join(f"{row[0]}: same word {row[1]}, same topic {row[2]}, different "
                              f"topic {row[3]}" for row in rows)
            + ". The rule covers the Adam rows; the SGD rows are reported: at lr 0.01-0.03 "
              "with cross-entropy, SGD moves W_Q and W_K (which start near 0 and whose "
              "gradients are proportional to each other) very slowly, so at this step budget "
              "their attention can still be uniform",
        )
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

def _ratio_text(ratio: float) -> str:
    return "n/a (different ≤ 0)" if math.isnan(ratio) else f"{ratio:.3f}"


registry.register_experiment(Topics())

__all__ = ["Topics"]

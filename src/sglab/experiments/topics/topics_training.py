"""Training dynamics and theory of the ``topics`` experiment.

Two-stage weight-norm dynamics (||W_V|| grows while ||W_K||, ||W_Q|| stay near their
small initialization, then they grow) read from each run's logged weight norms and its
step-0 snapshot, and the paper's theorem on the squared-loss optimum under uniform
attention: a same-topic minus different-topic block gap of 1/(v(1-(1-p_c)p_m)).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sglab.analysis.topic_models import word_gram, word_value_matrix
from sglab.analysis.topics import (
    detect_two_stages,
    population_value_gap,
    theoretical_gap,
    topic_block_statistics,
    uniform_attention_least_squares,
)
from sglab.experiments.claims import Measured, per_seed
from sglab.experiments.runs import FinishedRun, RunSet
from sglab.report.plots import Line, Panel, line_figure
from sglab.tasks.topics import fresh_masked_batch, word_topics
from sglab.train.loop import select_weights, weight_norms

NORM_NAMES = ["blocks.0.attn.W_K", "blocks.0.attn.W_Q", "blocks.0.attn.W_V"]
# Two stages: ||W_V|| grows VALUE_FACTOR-fold before K/Q leave their initialization (their
# mean growth reaches BOUNDARY_FACTOR), and K/Q then grow KEY_QUERY_FACTOR-fold overall.
BOUNDARY_FACTOR, VALUE_FACTOR, KEY_QUERY_FACTOR = 2.0, 10.0, 10.0
LEAST_SQUARES_SEED = 12345


def embedding_gram(run: FinishedRun) -> np.ndarray:
    """E = W_E^T W_E over the words, ordered by topic."""
    return word_gram(run.model(), run.task.word_ids)


# --- (c) two stages in the weight norms
def norm_curves(run: FinishedRun, measure: dict[str, Any]):
    """Steps and ||W_K||, ||W_Q||, ||W_V|| from the step-0 snapshot on."""
    initial = run.model("step_0")
    start = weight_norms(initial, select_weights(initial, NORM_NAMES))
    records = [r for r in run.metrics if f"weight_norm/{NORM_NAMES[0]}" in r]
    steps = [0] + [r["step"] for r in records]
    curves = {name: [start[f"weight_norm/{name}"]]
              + [r[f"weight_norm/{name}"] for r in records] for name in NORM_NAMES}
    found = detect_two_stages(steps, *(curves[n] for n in NORM_NAMES),
                              start_factor=BOUNDARY_FACTOR, value_factor=VALUE_FACTOR,
                              final_factor=KEY_QUERY_FACTOR)
    key, query, value = (np.asarray(curves[n], dtype=np.float64) for n in NORM_NAMES)
    key_query = (key / key[0] + query / query[0]) / 2
    before = max(found["boundary_index"] - 1, 0)
    found["key_query_growth"] = float(key_query.max())
    # stage 2: from the last step before the boundary to the end of training
    found["key_query_growth_after_boundary"] = float(key_query[-1] / key_query[before])
    found["value_growth_after_boundary"] = float(value[-1] / value[before])
    found["same_topic_attention"] = measure["same_topic"]
    found["different_topic_attention"] = measure["different_topic"]
    return steps, curves, found

def two_stage_section(runs: RunSet, compare: RunSet, measured: dict[str, dict[str, Any]],
                      out_dir: Path) -> tuple[dict[str, Any], Measured]:
    """Weight norms from initialization on: does ||W_V|| grow before ||W_K|| and ||W_Q||?
    ``measured``: the attention measures of each run (by run id), shown beside them."""
    curves = [norm_curves(run, measured[run.run_id]) for run in runs]
    others = [norm_curves(run, measured[run.run_id])[2] for run in compare]
    panels = [Panel(f"{run['optimizer']}, seed {run.seed}",
                    [Line(steps, norms[name], f"||{name.split('.')[-1]}||_F", None, style)
                     for name, style in zip(NORM_NAMES, ("-", "--", "-"))],
                    vlines=[(found["boundary_step"], None,
                             f"boundary (step {found['boundary_step']:g})")])
              for run, (steps, norms, found) in zip(runs, curves)]
    figure = line_figure(out_dir, "weight_norms", panels, title="weight norms",
                         caption="Frobenius norms of W_K, W_Q, W_V during training (step 0 "
                                 "= initialization); dotted: detected stage boundary.")
    found = [c[2] for c in curves]
    label = runs[0]["optimizer"] if len(runs) else "-"
    result = Measured(
        {"boundary step": per_seed(f["boundary_step"] for f in found),
         "||W_V|| growth in stage 1": per_seed(f["value_growth_before_boundary"] for f in found),
         "K/Q growth in stage 1": per_seed(f["key_query_growth_before_boundary"] for f in found),
         "K/Q growth": per_seed(f["key_query_growth"] for f in found),
         "K/Q growth in stage 2": per_seed(f["key_query_growth_after_boundary"] for f in found),
         "||W_V|| growth in stage 2": per_seed(f["value_growth_after_boundary"] for f in found)},
        f"{label}, cross-entropy, one-hot embeddings, small init; growth = norm / its value "
        "at step 0 (K/Q: the mean of ||W_K|| and ||W_Q|| so measured); the boundary is the "
        f"first logged step where K/Q growth reaches {BOUNDARY_FACTOR:g}; stage 1 ends at the "
        "last logged step before it, stage 2 runs from there to the end. (Adam normalizes "
        "each update, so its K and Q move at the learning rate from step 1: with Adam no "
        "first stage is visible, see the table below)",
    )
    section = {
        "title": "Two-stage weight-norm dynamics",
        "tables": [{"columns": ["run", "boundary step", "||W_V|| growth before",
                                "K/Q growth before", "||W_K|| growth", "||W_Q|| growth",
                                "||W_V|| growth", "two stages",
                                "same-topic / different-topic attention"],
                    "rows": [[f"{r['optimizer']} seed {r.seed}", f["boundary_step"],
                              f["value_growth_before_boundary"],
                              f["key_query_growth_before_boundary"], f["key_growth"],
                              f["query_growth"], f["value_growth"], f["two_stage"],
                              f"{f['same_topic_attention']:.5f} / "
                              f"{f['different_topic_attention']:.5f}"]
                             for r, f in zip([*runs, *compare], found + others)]}],
        "figures": [figure],
    }
    return section, result


# --- (d) theory check
def theory_section(value_runs: RunSet, embedding_runs: RunSet,
                   params: dict[str, Any]) -> tuple[dict[str, Any], Measured]:
    """The block gap of W_V and E under uniform attention against the formula."""
    task_cfg = params["task"]
    v, p_m = task_cfg["words_per_topic"], task_cfg["mask_probability"]
    p_c, p_r = task_cfg["keep_probability"], task_cfg["random_probability"]
    predicted = theoretical_gap(v, p_m, p_c)
    tau = params["theory_task"]["topics_per_document"]
    population = population_value_gap(task_cfg["n_topics"], v, tau, p_m, p_c, p_r)
    rows = [["formula 1/(v(1-(1-p_c)p_m))", predicted, "-"],
            ["least squares, N → ∞ (all topic pairs)", population["gap"],
             population["gap"] / predicted - 1]]
    gaps: dict[str, list[float]] = {"W_V gap": [], "E gap": []}
    n_documents = params["least_squares_documents"]
    for run in value_runs:
        task, topics = run.task, word_topics(run.task)
        if not rows[2:]:  # the fit depends on the task only, not on the seed
            batch = fresh_masked_batch(task, n_documents, LEAST_SQUARES_SEED)
            fitted, _ = uniform_attention_least_squares(
                batch.input_ids, batch.targets, batch.key_padding_mask, len(task.vocab))
            words = task.word_ids.numpy()
            fit = topic_block_statistics(fitted[np.ix_(words, words)], topics, True)
            rows.append([f"least squares on {n_documents} documents of "
                         f"N = {task.config.max_length}", fit["gap"],
                         fit["gap"] / predicted - 1])
        gap = topic_block_statistics(word_value_matrix(run.model(), task.word_ids), topics,
                                     True)["gap"]
        gaps["W_V gap"].append(gap)
        rows.append([f"trained W_V (uniform attention, seed {run.seed})", gap,
                     gap / predicted - 1])
    for run in embedding_runs:
        gap = topic_block_statistics(embedding_gram(run), word_topics(run.task),
                                     True)["gap"]
        gaps["E gap"].append(gap)
        rows.append([f"trained E = W_E^T W_E (uniform attention, W_V = I, "
                     f"seed {run.seed})", gap, gap / predicted - 1])
    result = Measured(
        {**{name: per_seed(values) for name, values in gaps.items()}, "formula": predicted},
        f"same-topic minus different-topic block means (i = j included) of the trained W_V "
        f"(one-hot embeddings) and E = W_E^T W_E (W_V = I), squared loss, uniform attention; "
        f"the formula at v = {v}, p_m = {p_m:g}, p_c = {p_c:g}; finite documents (the theorem "
        "takes N → ∞) and stochastic optimization each move the gap by a few percent (see "
        "the least-squares rows)")
    section = {
        "title": "Theory check: block gap under uniform attention",
        "text": "Same-topic minus different-topic block averages (all word pairs of a block, "
                "i = j included: the theorem is about block averages, and the diagonal "
                "alone carries the extra weight that a kept word (p_c) gives to itself). "
                "Squared loss, one layer, uniform attention (W_Q = W_K = 0 frozen). "
                f"Documents with τ = {tau} topics each (uniform-subset generator).",
        "tables": [{"columns": ["source", "gap", "relative to formula"], "rows": [
            [r[0], r[1], r[2] if isinstance(r[2], str) else f"{r[2]:+.2%}"] for r in rows]}],
    }
    return section, result

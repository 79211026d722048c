"""One evaluator for every task and model.

A task never runs a model (:class:`sglab.tasks.base.Task`): it yields evaluation batches
and scores logits. This module runs the model, the same way for every task and model:

* :func:`model_batch`: the batch as the model reads it (a ``next_token`` batch becomes one
  row per scored prefix for a model without a causal mask, :func:`prefix_rows`);
* :func:`forward_batch`: ``model(batch.input_ids, **batch.model_inputs())``, the one call
  of a model on a batch (training, evaluation, decoding and :mod:`sglab.analysis.hooks`);
* :func:`evaluate`: every evaluation batch of a split through both, each batch's logits
  to :meth:`Task.score`, the gathered scores to :meth:`Task.finalize`;
* :func:`greedy_decode`: greedy generation, the model called on a growing batch that the
  task's decode step extends.
"""

from __future__ import annotations

import torch

from sglab.errors import SglabError
from sglab.tasks.base import Batch, Task, prefix_rows


def model_is_causal(model) -> bool:
    """Whether ``model`` predicts each position from the positions before it only (a causal
    mask, a recurrent or memory model reading left to right); classifiers and bidirectional
    encoders say ``is_causal = False``."""
    return getattr(model, "is_causal", True)


def model_batch(model, batch: Batch) -> Batch:
    """``batch`` as ``model`` reads it: a ``next_token`` batch given to a model without a
    causal mask becomes one row per scored prefix (:func:`prefix_rows`); any other batch is
    read as it is."""
    if batch.next_token and not model_is_causal(model):
        return prefix_rows(batch)
    return batch


def forward_batch(model, batch: Batch) -> torch.Tensor:
    """The model's output on ``batch``: the one way a model is called on a batch."""
    return model(batch.input_ids, **batch.model_inputs())


def gather(parts: list[dict]) -> dict:
    """One dict from per-batch score dicts (:meth:`Task.score`): numbers summed in batch
    order, tensors concatenated along their first dimension on the CPU, dicts gathered key
    by key."""
    totals = {}
    for key, first in parts[0].items():
        values = [part[key] for part in parts]
        if isinstance(first, torch.Tensor):
            totals[key] = torch.cat([value.cpu() for value in values])
        elif isinstance(first, dict):
            totals[key] = gather(values)
        else:
            totals[key] = sum(values)
    return totals


@torch.no_grad()
def score_split(model, task: Task, split: str, batch_size: int,
                max_examples: int | None = None, device="cpu") -> dict:
    """The task's scores of ``split`` gathered over its evaluation batches (what
    :meth:`Task.finalize` turns into metrics; analyses read per-example entries such as
    predictions from it). ``model`` is used in the mode it is in."""
    parts = []
    for batch in task.eval_batches(split, batch_size, max_examples):
        batch = model_batch(model, batch).to(device)
        parts.append(task.score(forward_batch(model, batch).float(), batch))
    if not parts:
        raise SglabError(f"split {split!r} of task {task.config.name!r} has no examples to score")
    return gather(parts)


def evaluate(model, task: Task, split: str, batch_size: int, max_examples: int | None = None,
             device="cpu") -> dict[str, float]:
    """The metrics of ``model`` on ``split`` of ``task`` (``{split}/{name}``, with the
    task's per-group breakdowns), over all examples or ``max_examples`` of them, in batches
    of ``batch_size`` rows."""
    return task.finalize(split, score_split(model, task, split, batch_size, max_examples, device))


@torch.no_grad()
def greedy_decode(model, task: Task, split: str, batch_size: int,
                  max_examples: int | None = None, device="cpu", **options) -> list[list[int]]:
    """The greedy answers (token ids) of the examples of ``split`` that :func:`evaluate`
    scores, generated token by token: the model is called on each decode batch of the task
    (:meth:`Task.decode_batches`, ``options`` go there), the task appends the argmax
    (:meth:`Task.decode_step`) until every row is finished."""
    out: list[list[int]] = []
    for batch in task.decode_batches(split, batch_size, max_examples, **options):
        batch, done = batch.to(device), False
        while not done:
            batch, done = task.decode_step(batch, forward_batch(model, batch).float())
        out += task.decoded(batch)
    return out


__all__ = ["evaluate", "forward_batch", "gather", "greedy_decode", "model_batch",
           "model_is_causal", "score_split"]

"""The task protocol: data and scoring, never a model.

A task owns its vocabulary, builds its splits deterministically from
``config.data_seed``, yields training batches (:meth:`Task.train_batch`) and evaluation
batches (:meth:`Task.eval_batches`) as tensors, and turns a model's logits on those
batches into metrics (:meth:`Task.score` per batch, :meth:`Task.finalize` per split).
The model is called in one place, :func:`sglab.train.evaluate.forward_batch`, by the
Trainer and by the evaluator (:func:`sglab.train.evaluate.evaluate`).
:class:`PromptAnswerTask` covers every "prompt -> answer tokens" task trained as a
decoder-only language model (addition, anchors, ...).

Greedy decoding and teacher forcing agree on exact match: greedy generation
reproduces the answer exactly iff the argmax at every answer position, given the
correct prefix, is the correct token. So exact match is scored with one forward
pass; a generation task also offers a decode step (:meth:`Task.decode_batches`,
:meth:`Task.decode_step`) that :func:`sglab.train.evaluate.greedy_decode` drives, and
the tests check that both agree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import TaskConfig
from sglab.errors import SglabError
from sglab.tasks.cache import build_with_cache

IGNORE = -100  # target value that the loss and the scorer skip


class Vocabulary:
    """Token <-> id map. Id 0 is always padding."""

    PAD = "<pad>"

    def __init__(self, tokens: list[str]):
        if tokens[0] != self.PAD:
            tokens = [self.PAD, *tokens]
        if len(set(tokens)) != len(tokens):
            raise ValueError("vocabulary tokens must be unique")
        self.tokens = tokens
        self.index = {t: i for i, t in enumerate(tokens)}
        self.pad_id = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, symbols) -> list[int]:
        try:
            return [self.index[s] for s in symbols]
        except KeyError as exc:
            raise SglabError(f"symbol {exc.args[0]!r} is not in the task's vocabulary") from None

    def decode(self, ids) -> list[str]:
        return [self.tokens[int(i)] for i in ids]


def trimmed_rows(tokens: torch.Tensor, lengths: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of a right-padded tensor, cut to the longest of their ``lengths``."""
    selected = lengths[index]
    return tokens[index, : int(selected.max()) if len(selected) else 0]


def selected_groups(groups: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    return {name: labels[index] for name, labels in groups.items()}


@dataclass
class SequenceSplit:
    """Examples of one split as a right-padded tensor.

    ``tokens[i, :lengths[i]]`` is example i; its first ``prompt_lengths[i]`` tokens
    are the prompt and the rest is the answer. ``groups`` holds per-example integer
    labels for score breakdowns (e.g. number of carries).
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    prompt_lengths: torch.Tensor
    groups: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def subset(self, index: torch.Tensor) -> SequenceSplit:
        return SequenceSplit(trimmed_rows(self.tokens, self.lengths, index), self.lengths[index],
                             self.prompt_lengths[index], selected_groups(self.groups, index))


@dataclass
class Batch:
    """Model inputs and targets (``IGNORE`` where no loss applies): the one thing a model is
    called with (:func:`sglab.train.evaluate.forward_batch`).

    ``key_padding_mask`` (True = real token) is set for bidirectional models;
    ``example_index`` maps each row back to its example (prefix expansion).
    Encoder-decoder tasks add the encoder input ``source_ids`` and its padding mask
    ``source_mask``; ``input_ids`` is then the decoder input.

    ``next_token``: the targets are next tokens of the inputs (prompt-answer rows). A model
    that sees its whole row (no causal mask) reads such a batch as one row per scored
    prefix (:func:`prefix_rows`), so it never sees the token it predicts; the Trainer and
    the evaluator do that expansion (:func:`sglab.train.evaluate.model_batch`), so the
    data layer needs no word about the model.

    ``examples``: per-example data for scoring (one entry per example, in
    ``example_index``'s numbering; e.g. ``index``, the examples' positions in their split);
    never a model input.
    """

    input_ids: torch.Tensor
    targets: torch.Tensor
    key_padding_mask: torch.Tensor | None = None
    example_index: torch.Tensor | None = None
    source_ids: torch.Tensor | None = None
    source_mask: torch.Tensor | None = None
    next_token: bool = False
    examples: dict[str, torch.Tensor] = field(default_factory=dict)

    def to(self, device) -> Batch:
        move = lambda t: None if t is None else t.to(device, non_blocking=True)
        return Batch(
            move(self.input_ids), move(self.targets), move(self.key_padding_mask),
            move(self.example_index), move(self.source_ids), move(self.source_mask),
            self.next_token, {k: move(v) for k, v in self.examples.items()},
        )

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        """Keyword arguments of ``model(input_ids, **batch.model_inputs())``."""
        inputs = {"key_padding_mask": self.key_padding_mask}
        if self.source_ids is not None:
            inputs.update(source_ids=self.source_ids, source_mask=self.source_mask)
        return inputs


def scored_examples(total: int, max_examples: int | None) -> torch.Tensor:
    """Indices of the examples an evaluation scores: all of them, or ``max_examples`` spread
    evenly over the split. Splits are stored group by group (depth by depth, length by
    length), so the first ``max_examples`` could hold only the shortest group."""
    if max_examples is None or max_examples >= total:
        return torch.arange(total)
    return torch.linspace(0, total - 1, max_examples).round().long()


def scored_batches(total: int, batch_size: int, max_examples: int | None = None,
                   spread: bool = True) -> tuple[torch.Tensor, ...]:
    """The examples an evaluation scores, as index tensors of at most ``batch_size``: all
    ``total`` of them, or ``max_examples`` spread over the split (:func:`scored_examples`)
    or, with ``spread=False``, the first ``max_examples``."""
    if spread:
        index = scored_examples(total, max_examples)
    else:
        index = torch.arange(total if max_examples is None else min(total, max_examples))
    return index.split(batch_size)


def target_loss(logits: torch.Tensor, targets: torch.Tensor, kind: str = "cross_entropy",
                reduction: str = "mean") -> torch.Tensor:
    """Loss over the positions whose target is not ``IGNORE``: ``mean`` over them, their
    ``sum``, or ``row``: their sum divided by the batch rows (``train.loss_reduction:
    row_sum``, the weight-mask code's sequence loss).

    ``bits``: targets are packed bit rows (bit i = output channel i) and logits one per bit;
    BCE-with-logits summed over bits and steps, divided by the batch rows (``mean``).

    ``squared``: ||logits - one_hot(target)||^2 summed over the vocabulary (the squared
    loss of the topic-model theorems, Li et al. 2023).
    """
    if reduction not in ("mean", "sum", "row"):
        raise ValueError(f"reduction {reduction!r}: choose mean, sum or row")
    rows = targets.shape[0]
    if kind == "bits":  # packed bit rows: BCE summed over bits and steps / batch rows
        scored = targets != IGNORE
        bits = logits.shape[-1]
        wanted = ((targets.clamp_min(0).unsqueeze(-1) >> torch.arange(bits, device=targets.device))
                  & 1).float()
        per_bit = F.binary_cross_entropy_with_logits(logits.float(), wanted, reduction="none")
        total = (per_bit * scored.unsqueeze(-1)).sum()
        return total if reduction == "sum" else total / rows
    if kind == "cross_entropy":
        flat = (logits.float().flatten(0, 1), targets.flatten())
        if reduction == "row":
            return F.cross_entropy(*flat, ignore_index=IGNORE, reduction="sum") / rows
        return F.cross_entropy(*flat, ignore_index=IGNORE, reduction=reduction)
    scored = targets != IGNORE
    chosen = logits.float()[scored]
    per_position = ((chosen - F.one_hot(targets[scored], chosen.shape[-1]).float()) ** 2).sum(-1)
    if reduction == "row":
        return per_position.sum() / rows
    return per_position.mean() if reduction == "mean" else per_position.sum()


def training_loss(logits: torch.Tensor, targets: torch.Tensor, cfg) -> torch.Tensor:
    """The loss a training step minimizes under ``cfg`` (a ``TrainConfig``): its ``loss``
    kind, averaged per target position or per row (``loss_reduction``)."""
    reduction = "row" if cfg.loss_reduction == "row_sum" else "mean"
    return target_loss(logits, targets, cfg.loss, reduction)


def causal_batch(split: SequenceSplit) -> Batch:
    """All answer positions of every example in one causal pass (a ``next_token`` batch)."""
    tokens = split.tokens
    inputs, targets = tokens[:, :-1], tokens[:, 1:].clone()
    position = torch.arange(1, tokens.shape[1]).unsqueeze(0)  # index of the target token
    is_answer = (position >= split.prompt_lengths[:, None]) & (position < split.lengths[:, None])
    targets[~is_answer] = IGNORE
    return Batch(inputs, targets, example_index=torch.arange(len(split)), next_token=True)


def prefix_rows(batch: Batch) -> Batch:
    """A ``next_token`` batch as a model without a causal mask reads it: one row per scored
    position (example by example, left to right), holding the prefix up to that position
    (the rest padding, masked); its single target is the next token.

    This is how such a model is trained and scored on next-token prediction: every
    prediction gets its own forward pass over exactly its prefix.
    """
    row, position = torch.nonzero(batch.targets != IGNORE, as_tuple=True)
    prefix_len = position + 1
    width = int(prefix_len.max()) if len(row) else 0
    rows = batch.input_ids[row, :width].clone()
    real = torch.arange(width).unsqueeze(0) < prefix_len[:, None]
    rows[~real] = 0
    targets = torch.full_like(rows, IGNORE)
    targets[torch.arange(len(row)), position] = batch.targets[row, position]
    examples = row if batch.example_index is None else batch.example_index[row]
    return Batch(rows, targets, key_padding_mask=real, example_index=examples,
                 examples=batch.examples)


def prefix_batch(split: SequenceSplit) -> Batch:
    """One row per (example, answer token): the prefix before that token (:func:`prefix_rows`
    of :func:`causal_batch`)."""
    return prefix_rows(causal_batch(split))


def group_breakdown(split: str, correct: torch.Tensor, groups: dict[str, torch.Tensor],
                    index: torch.Tensor) -> dict[str, float]:
    """``{split}/exact_match/{group}={value}``: the mean of ``correct`` (one entry per scored
    example, at split positions ``index``) over the examples of each group value."""
    metrics = {}
    for group, labels in groups.items():
        labels = labels[index]
        for value in torch.unique(labels).tolist():
            metrics[f"{split}/exact_match/{group}={value}"] = float(correct[labels == value].mean())
    return metrics


class Task(ABC):
    """Owns a vocabulary and named splits; yields batches and scores logits on them. A task
    never sees a model: :func:`sglab.train.evaluate.evaluate` calls the model on
    :meth:`eval_batches` and hands the logits to :meth:`score`, then :meth:`finalize`."""

    config: TaskConfig
    vocab: Vocabulary

    @abstractmethod
    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch: ...

    @abstractmethod
    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        """The batches that score ``split`` (all examples, or ``max_examples`` of them), each
        with what its examples need for scoring (``Batch.examples``)."""

    @abstractmethod
    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """What one evaluation batch contributes, from the model's float ``logits`` on it:
        numbers are summed over the batches, tensors (one row per example) concatenated on
        the CPU and dicts gathered key by key (:func:`sglab.train.evaluate.gather`)."""

    @abstractmethod
    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """The metrics of ``split`` (``{split}/{name}``, with the per-group breakdowns) from
        the gathered :meth:`score` dicts."""

    # generation: tasks whose answers a model produces token by token

    def decode_batches(self, split: str, batch_size: int, max_examples: int | None = None,
                       **options) -> Iterator[Batch]:
        """Batches holding what greedy decoding starts from (the prompts, the source)."""
        raise SglabError(f"task {self.config.name!r} does not generate its answers")

    def decode_step(self, batch: Batch, logits: torch.Tensor) -> tuple[Batch, bool]:
        """``batch`` with each unfinished row's greedy next token (from ``logits``, the
        model's float output on ``batch``) appended, and whether every row is finished."""
        raise SglabError(f"task {self.config.name!r} does not generate its answers")

    def decoded(self, batch: Batch) -> list[list[int]]:
        """The generated token ids of each example of a finished decode batch."""
        raise SglabError(f"task {self.config.name!r} does not generate its answers")

    def check_model(self, model_config) -> None:
        """Raise SglabError if this task cannot be trained with that model config."""

    def model_kwargs(self) -> dict:
        """What the model factory needs besides vocabulary size and length (e.g. the input
        and output bit widths of a bit task)."""
        return {}

    @property
    def max_length(self) -> int:
        """Longest input sequence the model will see."""
        return 256


class SplitsTask(Task):
    """A task whose examples live in a dict of named splits (``self.splits``)."""

    splits: dict

    def split(self, name: str):
        if name not in self.splits:
            raise SglabError(f"task has no split {name!r}; splits: {', '.join(self.splits)}")
        return self.splits[name]


class GeneratedSplitsTask(SplitsTask):
    """Builds its vocabulary and right-padded splits (with ``lengths``) once, from the config
    (through the data cache, :mod:`sglab.tasks.cache`: a slow build is saved and reused).
    ``data_note`` says where the data came from when the cache was involved."""

    eval_splits: list[str] = ["ood_test"]

    def __init__(self, config: TaskConfig):
        self.config = config
        self.data_note = build_with_cache(self)

    @abstractmethod
    def build(self) -> tuple[Vocabulary, dict]:
        """Generate the vocabulary and all splits deterministically."""

    @property
    def max_length(self) -> int:
        return max(int(s.lengths.max()) for s in self.splits.values())


class PromptAnswerTask(GeneratedSplitsTask):
    """A task whose examples are (prompt, answer) token sequences; loss on the answer."""

    splits: dict[str, SequenceSplit]

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        train = self.splits["train"]
        index = torch.randint(len(train), (batch_size,), generator=generator)
        return causal_batch(train.subset(index))

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        data = self.split(split)
        for chosen in scored_batches(len(data), batch_size, max_examples):
            yield replace(causal_batch(data.subset(chosen)), examples={"index": chosen})

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """Answer-token loss, and per example whether every answer token is the argmax."""
        scored = batch.targets != IGNORE
        wrong = ((logits.argmax(-1) != batch.targets) & scored).sum(1)
        index = batch.examples["index"]
        example_wrong = torch.zeros(len(index), dtype=torch.long, device=logits.device)
        example_wrong.index_add_(0, batch.example_index, wrong)
        return {"loss": float(target_loss(logits, batch.targets, reduction="sum")),
                "tokens": int(scored.sum()), "correct": example_wrong == 0, "index": index}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """Exact match of greedy answers, answer-token loss, and per-group breakdowns."""
        correct = totals["correct"].float()
        metrics = {
            f"{split}/exact_match": float(correct.mean()),
            f"{split}/loss": totals["loss"] / max(totals["tokens"], 1),
        }
        metrics.update(group_breakdown(split, correct, self.split(split).groups, totals["index"]))
        return metrics

    def decode_batches(self, split: str, batch_size: int, max_examples: int | None = None,
                       **options) -> Iterator[Batch]:
        """The prompts, right-padded to the whole example (padding masked); each example is
        decoded for as many tokens as its answer has."""
        data = self.split(split)
        for chosen in scored_batches(len(data), batch_size, max_examples):
            sub = data.subset(chosen)
            real = torch.arange(sub.tokens.shape[1])[None] < sub.prompt_lengths[:, None]
            yield Batch(sub.tokens.masked_fill(~real, 0), torch.full_like(sub.tokens, IGNORE),
                        key_padding_mask=real,
                        examples={"index": chosen, "start": sub.prompt_lengths,
                                  "length": sub.prompt_lengths.clone(), "stop": sub.lengths})

    def decode_step(self, batch: Batch, logits: torch.Tensor) -> tuple[Batch, bool]:
        length, stop = batch.examples["length"], batch.examples["stop"]
        rows = torch.nonzero(length < stop).flatten()
        ids, real = batch.input_ids.clone(), batch.key_padding_mask.clone()
        ids[rows, length[rows]] = logits[rows, length[rows] - 1].argmax(-1)
        real[rows, length[rows]] = True
        length = torch.minimum(length + 1, stop)
        return (replace(batch, input_ids=ids, key_padding_mask=real,
                        examples={**batch.examples, "length": length}),
                bool((length >= stop).all()))

    def decoded(self, batch: Batch) -> list[list[int]]:
        start, length = batch.examples["start"], batch.examples["length"]
        return [batch.input_ids[i, int(start[i]): int(length[i])].tolist()
                for i in range(len(start))]


def build_task(config: TaskConfig) -> Task:
    return registry.entry("task", config.name).factory(config)


# ----------------------------------------------------------------------------- classification


BEGIN, END = "<B>", "<E>"  # frame of classification inputs; encoders read out there


def check_split_ranges(kind: str, train: tuple[int, int], ood_valid: tuple[int, int],
                       test: tuple[int, int]) -> None:
    """Raise ValueError unless each (low, high) range has 1 <= low <= high and the ranges
    grow and are disjoint, train < ood_valid < test (``kind``: "length", "depth")."""
    for low, high in (train, ood_valid, test):
        if not 1 <= low <= high:
            raise ValueError(f"{kind} range {(low, high)} must satisfy 1 <= low <= high")
    if not (train[1] < ood_valid[0] and ood_valid[1] < test[0]):
        raise ValueError(f"{kind} ranges must be increasing and disjoint: "
                         "train < ood_valid < test")


@dataclass
class ClassificationSplit:
    """Examples of a sequence-classification split: right-padded inputs and one label each.

    ``tokens[i, :lengths[i]]`` is the input of example i and ``labels[i]`` the id of its
    answer token (classes are vocabulary tokens, so one embedding table serves both).
    ``groups`` holds per-example integer labels for breakdowns (e.g. number of operations).
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    labels: torch.Tensor
    groups: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def subset(self, index: torch.Tensor) -> ClassificationSplit:
        return ClassificationSplit(trimmed_rows(self.tokens, self.lengths, index),
                                   self.lengths[index], self.labels[index],
                                   selected_groups(self.groups, index))

    def batch(self) -> Batch:
        """Inputs with a padding mask; the target sits in a single readout slot."""
        real = torch.arange(self.tokens.shape[1])[None, :] < self.lengths[:, None]
        return Batch(self.tokens, self.labels[:, None].clone(), key_padding_mask=real,
                     example_index=torch.arange(len(self)))


def encode_examples(vocab: Vocabulary, inputs: list[list[str]], answers: list[str],
                    groups: dict[str, list[int]]) -> ClassificationSplit:
    """Token lists + answer tokens -> a right-padded :class:`ClassificationSplit`."""
    width = max((len(x) for x in inputs), default=1)
    tokens = torch.zeros(len(inputs), width, dtype=torch.long)
    for i, symbols in enumerate(inputs):
        tokens[i, : len(symbols)] = torch.tensor(vocab.encode(symbols))
    return ClassificationSplit(
        tokens, torch.tensor([len(x) for x in inputs], dtype=torch.long),
        torch.tensor(vocab.encode(answers), dtype=torch.long),
        {k: torch.tensor(v, dtype=torch.long) for k, v in groups.items()},
    )


def is_classifier(model_config) -> bool:
    """Whether a model config produces one prediction per sequence (the classifier contract)."""
    return bool(getattr(model_config, "classifier", False)) or \
        getattr(model_config, "readout", "none") != "none"


class ClassificationTaskConfig(TaskConfig):
    """Fields every sequence-classification task shares."""

    scored_classes: Literal["vocabulary", "labels"] = Field(
        "vocabulary",
        description="The outputs a classifier's softmax covers. vocabulary: every token (the "
                    "other tokens' logits must be pushed down by the model); labels: only the "
                    "labels in the task's data, as the thesis code's classifier head "
                    "(nn.Linear(d, n_classes)); the model gives every other token a logit of "
                    "-1e4. A readout over the vocabulary pushes the impossible classes down "
                    "through the state (an output bias learns too slowly to do it), which "
                    "saturates a tanh update in the first steps (README, NDR section).")


class DepthSplitsConfig(ClassificationTaskConfig):
    """Fields of a task split by expression depth (arithmetic, ListOps): train on
    ``train_depths``, select on ``ood_valid_depths``, test on ``test_depths``."""

    train_depths: tuple[int, int] = (1, 5)
    ood_valid_depths: tuple[int, int] = (6, 6)
    test_depths: tuple[int, int] = (7, 8)
    train_size: int = Field(100_000, ge=1)
    iid_valid_size: int = Field(1000, ge=1)
    ood_valid_size: int = Field(1000, ge=1)
    test_size: int = Field(1000, ge=1)
    max_tokens: int = Field(50, ge=5, description="Longest expression (without <B>/<E>).")
    boundary_tokens: bool = True
    train_sampling: Literal["dataset", "bucketed"] = Field("dataset", description=(
        "How training batches are drawn. dataset: uniform draws from the fixed training set, "
        "lengths mixed within a batch (padded to the longest). bucketed: every batch holds one "
        "input length, picked in proportion to its share of the training set (the thesis "
        "code's length_bucketed_sampling, which its ListOps and arithmetic sweeps set: the same "
        "examples, no padding, so a step costs less)."))

    @model_validator(mode="after")
    def _check_depths(self):
        check_split_ranges("depth", self.train_depths, self.ood_valid_depths, self.test_depths)
        return self

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "ood_valid", "ood_test"]


class SequenceClassificationTask(GeneratedSplitsTask):
    """One label per input sequence (CTL, arithmetic, ListOps).

    Model contract: called as ``model(input_ids, key_padding_mask=mask)`` it returns
    logits of shape ``[batch, 1, vocab]``, the prediction read out from one column (or
    an RNN's final state). Batches carry the label as a ``[batch, 1]`` target, so the
    Trainer's masked-target loss applies unchanged.
    """

    splits: dict[str, ClassificationSplit]

    def label_ids(self) -> list[int]:
        """Token ids that occur as a label in any split (the classes the task can ask for)."""
        labels = torch.cat([split.labels for split in self.splits.values()])
        return torch.unique(labels).tolist()

    def model_kwargs(self) -> dict:
        if self.config.scored_classes == "labels":
            return {"output_classes": self.label_ids()}
        return {}

    def check_model(self, model_config) -> None:
        if not is_classifier(model_config):
            raise SglabError(
                f"task {self.config.name!r} classifies whole sequences: give the model a readout "
                "column (model.readout=first or model.readout=last) or use a classifier model "
                "such as lstm")
        if getattr(model_config, "attention_mask", "bidirectional") != "bidirectional":
            raise SglabError(f"task {self.config.name!r} needs an encoder: set "
                             "model.attention_mask=bidirectional")

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """Uniform draws from the training set, or with ``train_sampling=bucketed`` (a task
        config that has the field) one input length per batch."""
        if getattr(self.config, "train_sampling", "dataset") == "bucketed":
            return self.length_bucketed_batch(batch_size, generator)
        train = self.splits["train"]
        index = torch.randint(len(train), (batch_size,), generator=generator)
        return train.subset(index).batch()

    def length_bucketed_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """One input length (in tokens) per batch, drawn in proportion to the training set,
        the examples uniform within it (the thesis code's length-bucketed sampler: examples
        sorted by length, cut into batches, the batches shuffled). No padding."""
        train = self.splits["train"]
        if not hasattr(self, "_by_length"):
            lengths = train.lengths
            self._by_length = [torch.nonzero(lengths == k).flatten()
                               for k in torch.unique(lengths).tolist()]
        counts = torch.tensor([len(group) for group in self._by_length], dtype=torch.float)
        group = self._by_length[int(torch.multinomial(counts, 1, generator=generator))]
        pick = torch.randint(len(group), (batch_size,), generator=generator)
        return train.subset(group[pick]).batch()

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        data = self.split(split)
        for chosen in scored_batches(len(data), batch_size, max_examples):
            yield replace(data.subset(chosen).batch(), examples={"index": chosen})

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """The predicted label id and the loss of each example (read out from one column)."""
        return {"predicted": logits[:, 0].argmax(-1),
                "loss": F.cross_entropy(logits[:, 0], batch.targets[:, 0], reduction="none"),
                "index": batch.examples["index"]}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """Accuracy (``exact_match``), loss, and accuracy per group value."""
        data = self.split(split)
        index = totals["index"]
        correct = (totals["predicted"] == data.labels[index]).float()
        metrics = {f"{split}/exact_match": float(correct.mean()),
                   f"{split}/loss": float(totals["loss"].mean())}
        metrics.update(group_breakdown(split, correct, data.groups, index))
        return metrics

"""The sequence-to-sequence task contract (encoder-decoder models).

A :class:`Seq2SeqTask` holds (source, target) token sequences per split. One shared
vocabulary covers both sides: id 0 is padding and id 1 (``<eos>``) is both the
decoder's begin-of-sequence token and the end-of-sequence token (the thesis code
shares them). A training batch is a :class:`~sglab.tasks.base.Batch` whose

* ``source_ids`` / ``source_mask`` are the encoder input ``x_1 .. x_n <eos>`` and its
  padding mask (True = real token),
* ``input_ids`` is the teacher-forced decoder input ``<eos> y_1 .. y_m``,
* ``targets`` is ``y_1 .. y_m <eos>`` (``IGNORE`` on padding): EOS is always trained.

The model is called as every model is (``model(input_ids, **batch.model_inputs())``), so
neither the Trainer nor the evaluator needs a special case.

Scoring is sequence-level exact match (thesis App. C.1): a prediction is correct only
if every token matches *and* its length (the position of its first EOS) equals the
target's. Greedy decoding reproduces ``y_1 .. y_m <eos>`` exactly iff, given the
correct prefix, the argmax at each of the m + 1 positions is the correct token, so
:meth:`Seq2SeqTask.score` scores greedy exact match from one teacher-forced pass (its
decode step, driven by :func:`sglab.train.evaluate.greedy_decode`, decodes token by token
and is tested to agree). The
oracle-length variant (Newman et al. 2020) suppresses EOS for the first m steps and
stops after m tokens: correct iff the argmax over non-EOS tokens is right at each of
the first m positions.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from pydantic import Field

from sglab.config import TaskConfig
from sglab.errors import SglabError
from sglab.tasks.base import (
    IGNORE,
    Batch,
    SplitsTask,
    Vocabulary,
    group_breakdown,
    scored_batches,
    selected_groups,
    target_loss,
    trimmed_rows,
)

EOS = "<eos>"


@dataclass
class PairSplit:
    """Right-padded source and target ids (targets without BOS/EOS) of one split."""

    source: torch.Tensor
    source_lengths: torch.Tensor
    target: torch.Tensor
    target_lengths: torch.Tensor
    groups: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.source.shape[0]

    def subset(self, index: torch.Tensor) -> PairSplit:
        return PairSplit(
            trimmed_rows(self.source, self.source_lengths, index), self.source_lengths[index],
            trimmed_rows(self.target, self.target_lengths, index), self.target_lengths[index],
            selected_groups(self.groups, index),
        )


def split_words(text: str) -> list[str]:
    return text.split()


def encode_pairs(vocab: Vocabulary, pairs: list[tuple[str, str]],
                 tokenize=split_words) -> PairSplit:
    """(source, target) strings -> a PairSplit; the source ends in <eos>."""
    if not pairs:
        raise SglabError("a split has no examples")
    sources = [vocab.encode([*tokenize(s), EOS]) for s, _ in pairs]
    targets = [vocab.encode(tokenize(t)) for _, t in pairs]

    def pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        out = np.zeros((len(rows), int(lengths.max())), dtype=np.int64)
        # a boolean mask fills in row-major order: row by row, each row left to right
        out[np.arange(out.shape[1])[None] < lengths[:, None]] = np.fromiter(
            itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
        return torch.from_numpy(out), torch.from_numpy(lengths)

    source, source_lengths = pad(sources)
    target, target_lengths = pad(targets)
    return PairSplit(source, source_lengths, target, target_lengths,
                     {"target_length": target_lengths.clone()})


def seq2seq_batch(split: PairSplit, eos_id: int) -> Batch:
    """Decoder input ``<eos> y`` and targets ``y <eos>`` (IGNORE after it), source + mask."""
    n, width = split.target.shape
    target = torch.cat([split.target, torch.zeros(n, 1, dtype=torch.long)], 1)
    target[torch.arange(n), split.target_lengths] = eos_id
    positions = torch.arange(width + 1)[None]
    targets = target.masked_fill(positions > split.target_lengths[:, None], IGNORE)
    decoder_input = torch.cat([torch.full((n, 1), eos_id, dtype=torch.long), split.target], 1)
    source_mask = torch.arange(split.source.shape[1])[None] < split.source_lengths[:, None]
    return Batch(decoder_input, targets, source_ids=split.source, source_mask=source_mask)


def sequence_exact_match(predicted: list[list[int]], targets: list[list[int]]) -> torch.Tensor:
    """Per example: True iff the predicted sequence equals the target (length included)."""
    return torch.tensor([list(p) == list(t) for p, t in zip(predicted, targets)])


class Seq2SeqTaskConfig(TaskConfig):
    """Fields every sequence-to-sequence task shares."""

    eval_oracle_length: bool = Field(
        False, description="Also log '<split>/oracle_exact_match': decoding told the target "
                           "length (EOS suppressed until then), as in Newman et al.")
    length_groups: int = Field(
        1, ge=1, description="Draw batch_size x this many training examples, sort them by "
                             "length and train on one of the equal parts, chosen uniformly: "
                             "each example is as likely as before, but a batch holds similar "
                             "lengths, so less padding is computed. 1 = plain random batches.")

    def evaluation_metrics(self) -> list[str] | None:
        metrics = super().evaluation_metrics()
        if metrics is None or not self.eval_oracle_length:
            return metrics
        return metrics + [f"{split}/oracle_exact_match" for split in self.evaluation_splits()]


def length_sorted_parts(index: torch.Tensor, split: PairSplit, groups: int) -> list[torch.Tensor]:
    """``index`` sorted by target, then source, length and cut into ``groups`` equal parts.

    A training batch is one part chosen uniformly: every drawn example is in exactly one
    part, so each training example keeps the probability of plain uniform sampling;
    only the batch's composition changes (similar lengths together, less padding)."""
    width = split.source.shape[1] + 1  # > every source length (padded to the longest)
    order = torch.argsort(split.target_lengths[index] * width + split.source_lengths[index],
                          stable=True)
    return list(index[order].chunk(groups))


class Seq2SeqTask(SplitsTask):
    """A task of (source, target) pairs for encoder-decoder models."""

    config: Seq2SeqTaskConfig
    splits: dict[str, PairSplit]

    def __init__(self, config: Seq2SeqTaskConfig):
        self.config = config
        self.vocab = Vocabulary([EOS, *self.symbols()])
        self.eos_id = self.vocab.index[EOS]
        rng = np.random.default_rng(config.data_seed + 1)
        self.splits = {}
        for name, pairs in self.build_examples().items():
            # a fixed shuffle, so that evaluating the first k examples is a random sample
            order = rng.permutation(len(pairs))
            pairs = [pairs[i] for i in order]
            self.splits[name] = encode_pairs(self.vocab, pairs, self.tokenize)
            self.splits[name].groups.update(self.example_groups(pairs))

    @abstractmethod
    def build_examples(self) -> dict[str, list[tuple[str, str]]]:
        """Split name -> (source, target) strings, tokens separated by spaces."""

    @abstractmethod
    def symbols(self) -> list[str]:
        """Every source and target token."""

    def tokenize(self, text: str) -> list[str]:
        """Text -> tokens (words by default; character-level tasks override this)."""
        return split_words(text)

    def example_groups(self, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
        """Integer labels per example (name -> one label per pair) beside ``target_length``;
        :meth:`finalize` logs ``<split>/exact_match/<name>=<label>`` for each."""
        return {}

    def detokenize(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    @property
    def eval_splits(self) -> list[str]:
        return [s for s in self.splits if s != "train"]

    @property
    def max_length(self) -> int:
        """Longest encoder or decoder input."""
        return max(max(int(s.source.shape[1]), int(s.target.shape[1]) + 1)
                   for s in self.splits.values())

    def check_model(self, model_config) -> None:
        if not getattr(model_config, "encoder_decoder", False):
            raise SglabError(f"task {self.config.name!r} maps sequences to sequences and needs an "
                             "encoder-decoder model; set model.name=seq2seq")

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        train = self.splits["train"]
        groups = self.config.length_groups
        index = torch.randint(len(train), (batch_size * groups,), generator=generator)
        if groups > 1:
            parts = length_sorted_parts(index, train, groups)
            index = parts[int(torch.randint(groups, (1,), generator=generator))]
        return seq2seq_batch(train.subset(index), self.eos_id)

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        data = self.split(split)
        for chosen in scored_batches(len(data), batch_size, max_examples):
            yield replace(seq2seq_batch(data.subset(chosen), self.eos_id),
                          examples={"index": chosen})

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """Token loss over the targets including EOS, and per example greedy exact match (one
        teacher-forced pass, see the module docstring) and with ``eval_oracle_length`` the
        oracle-length exact match."""
        scored = batch.targets != IGNORE
        right = (logits.argmax(-1) == batch.targets) | ~scored
        out = {"loss": float(target_loss(logits, batch.targets, reduction="sum")),
               "tokens": int(scored.sum()), "correct": right.all(1), "index": batch.examples["index"]}
        if self.config.eval_oracle_length:
            before_eos = scored & (batch.targets != self.eos_id)
            logits[..., self.eos_id] = float("-inf")
            right = (logits.argmax(-1) == batch.targets) | ~before_eos
            out["oracle_correct"] = right.all(1)
        return out

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """Greedy exact match, loss, with ``eval_oracle_length`` the oracle-length exact
        match, and exact match per target length (and per :meth:`example_groups`)."""
        hits = totals["correct"].float()
        metrics = {f"{split}/exact_match": float(hits.mean()),
                   f"{split}/loss": totals["loss"] / max(totals["tokens"], 1)}
        if "oracle_correct" in totals:
            metrics[f"{split}/oracle_exact_match"] = float(totals["oracle_correct"].float().mean())
        metrics.update(group_breakdown(split, hits, self.split(split).groups, totals["index"]))
        return metrics

    def decode_batches(self, split: str, batch_size: int, max_examples: int | None = None,
                       oracle_length: bool = False) -> Iterator[Batch]:
        """The source and the decoder input ``<eos>`` (= BOS) of each example. Decoding stops
        at the first EOS, or after target length + 1 tokens (the output is wrong by then);
        ``oracle_length``: EOS is never chosen and each example stops at its target length."""
        data = self.split(split)
        for chosen in scored_batches(len(data), batch_size, max_examples):
            batch = seq2seq_batch(data.subset(chosen), self.eos_id)
            lengths = data.target_lengths[chosen]
            yield replace(batch, input_ids=batch.input_ids[:, :1], targets=batch.targets[:, :1],
                          examples={"index": chosen, "steps": lengths + (not oracle_length),
                                    "done": lengths < 0,
                                    "suppress_eos": torch.full_like(lengths, oracle_length)})

    def decode_step(self, batch: Batch, logits: torch.Tensor) -> tuple[Batch, bool]:
        examples = batch.examples
        logits = logits[:, -1].clone()
        if bool(examples["suppress_eos"].any()):
            logits[examples["suppress_eos"].bool(), self.eos_id] = float("-inf")
        done = examples["done"]
        chosen = logits.argmax(-1).masked_fill(done, self.eos_id)  # finished rows repeat EOS
        steps = batch.input_ids.shape[1]  # tokens decided so far, plus the first <eos>
        done = done | (chosen == self.eos_id) | (examples["steps"] <= steps)
        ids = torch.cat([batch.input_ids, chosen[:, None]], 1)
        return (replace(batch, input_ids=ids, targets=torch.full_like(ids, IGNORE),
                        examples={**examples, "done": done}), bool(done.all()))

    def decoded(self, batch: Batch) -> list[list[int]]:
        """Each example's tokens up to (without) its first EOS, at most its step limit."""
        rows = batch.input_ids[:, 1:].tolist()
        return [(row[: row.index(self.eos_id)] if self.eos_id in row else row)[:steps]
                for row, steps in zip(rows, batch.examples["steps"].tolist())]

    def pairs_text(self, split: str) -> list[tuple[str, str]]:
        """(source, target) strings of a split, in stored order."""
        data = self.split(split)
        out = []
        for i in range(len(data)):
            source = self.vocab.decode(data.source[i, : int(data.source_lengths[i]) - 1])
            target = self.vocab.decode(data.target[i, : int(data.target_lengths[i])])
            out.append((self.detokenize(source), self.detokenize(target)))
        return out

"""The sequence-to-sequence task contract (encoder-decoder models).

A :class:`Seq2SeqTask` holds (source, target) token sequences per split. One shared
vocabulary covers both sides: id 0 is padding and id 1 (``<eos>``) is both the
decoder's begin-of-sequence token and the end-of-sequence token (the thesis code
shares them). A training batch is a :class:`~sglab.tasks.base.Batch` whose

* ``source_ids`` / ``source_mask`` are the encoder input ``x_1 .. x_n <eos>`` and its
  padding mask (True = real token),
* ``input_ids`` is the teacher-forced decoder input ``<eos> y_1 .. y_m``,
* ``targets`` is ``y_1 .. y_m <eos>`` (``IGNORE`` on padding): EOS is always trained.

The Trainer passes ``Batch.model_inputs()`` to the model, so it needs no special case.

Scoring is sequence-level exact match (thesis App. C.1): a prediction is correct only
if every token matches *and* its length (the position of its first EOS) equals the
target's. Greedy decoding reproduces ``y_1 .. y_m <eos>`` exactly iff, given the
correct prefix, the argmax at each of the m + 1 positions is the correct token, so
:meth:`Seq2SeqTask.evaluate` scores greedy exact match with one teacher-forced pass
(:func:`greedy_exact_match` decodes token by token and is tested to agree). The
oracle-length variant (Newman et al. 2020) suppresses EOS for the first m steps and
stops after m tokens: correct iff the argmax over non-EOS tokens is right at each of
the first m positions.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from dataclasses import dataclass, field

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
    scored_examples,
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


@torch.no_grad()
def greedy_exact_match(model, split: PairSplit, eos_id: int, oracle_length: bool = False,
                       device="cpu") -> torch.Tensor:
    """Exact match by actual token-by-token greedy decoding (reference for the scorer).

    Decoding runs for at most (longest target + 1) steps and stops at EOS; with
    ``oracle_length`` EOS is suppressed and each example is cut at its target length.
    """
    batch = seq2seq_batch(split, eos_id).to(device)
    max_steps = int(split.target_lengths.max()) + 1
    predicted = model.generate(batch.source_ids, batch.source_mask, max_steps, eos_id,
                               suppress_eos=oracle_length)
    targets = [split.target[i, : int(n)].tolist() for i, n in enumerate(split.target_lengths)]
    if oracle_length:
        predicted = [p[: len(t)] for p, t in zip(predicted, targets)]
    return sequence_exact_match(predicted, targets)


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
        :meth:`evaluate` logs ``<split>/exact_match/<name>=<label>`` for each."""
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

    def train_batch(self, batch_size: int, generator: torch.Generator, causal: bool) -> Batch:
        train = self.splits["train"]
        groups = self.config.length_groups
        index = torch.randint(len(train), (batch_size * groups,), generator=generator)
        if groups > 1:
            parts = length_sorted_parts(index, train, groups)
            index = parts[int(torch.randint(groups, (1,), generator=generator))]
        return seq2seq_batch(train.subset(index), self.eos_id)

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int, max_examples: int | None = None,
                 device="cpu") -> dict[str, float]:
        """Greedy exact match (one teacher-forced pass, see the module docstring), token
        loss over the targets including EOS, per-target-length exact match, and with
        ``eval_oracle_length`` the oracle-length exact match."""
        data = self.split(split)
        index = scored_examples(len(data), max_examples)
        oracle = self.config.eval_oracle_length
        correct, oracle_correct, loss_sum, token_count = [], [], 0.0, 0
        for start in range(0, len(index), batch_size):
            sub = data.subset(index[start: start + batch_size])
            batch = seq2seq_batch(sub, self.eos_id).to(device)
            logits = model(batch.input_ids, **batch.model_inputs()).float()
            scored = batch.targets != IGNORE
            loss_sum += float(target_loss(logits, batch.targets, reduction="sum"))
            token_count += int(scored.sum())
            right = (logits.argmax(-1) == batch.targets) | ~scored
            correct.append(right.all(1).cpu())
            if oracle:
                before_eos = scored & (batch.targets != self.eos_id)
                logits[..., self.eos_id] = float("-inf")
                right = (logits.argmax(-1) == batch.targets) | ~before_eos
                oracle_correct.append(right.all(1).cpu())
        hits = torch.cat(correct).float()
        metrics = {f"{split}/exact_match": float(hits.mean()),
                   f"{split}/loss": loss_sum / max(token_count, 1)}
        if oracle:
            metrics[f"{split}/oracle_exact_match"] = float(torch.cat(oracle_correct).float().mean())
        for group, labels in data.groups.items():
            labels = labels[index]
            for value in torch.unique(labels).tolist():
                metrics[f"{split}/exact_match/{group}={value}"] = float(hits[labels == value].mean())
        return metrics

    def pairs_text(self, split: str) -> list[tuple[str, str]]:
        """(source, target) strings of a split, in stored order."""
        data = self.split(split)
        out = []
        for i in range(len(data)):
            source = self.vocab.decode(data.source[i, : int(data.source_lengths[i]) - 1])
            target = self.vocab.decode(data.target[i, : int(data.target_lengths[i])])
            out.append((self.detokenize(source), self.detokenize(target)))
        return out

"""The algorithmic bit tasks of the improved-DNC chapter (thesis Sec. 2.3, App. A.2).

Every row of a sequence is a bit vector, packed into one integer id (bit i = channel i) in
``Batch.input_ids`` [batch, time]; the target row is packed the same way at every step
(all zeros in input phases). All sequences of a batch share their lengths; a training batch
draws them from the configured ranges. ``iid_valid`` is a fixed set of ``valid_batches``
batches generated from ``data_seed``. Scored on the output phases: ``bit_accuracy``,
``wrong_bits`` (per sequence) and ``exact_match`` (every output bit right); ``loss`` is the
``bits`` training loss (BCE summed over bits and steps, per sequence).

- ``dnc_repeat_copy``: N blocks, each of L data rows of 8 bits, a flag row (bit 8) and L+1
  blank rows; the target is L+1 blank rows, the data rows, the flag row. N·L above the
  memory size forces cell reuse. App. A.2 of the thesis states L in [1, 8] and N in [2, 14];
  the authors' code draws L in [2, 14] and N in [1, 8] (``AUTHORS_BLOCK_LENGTH``,
  ``AUTHORS_BLOCKS``), and the thesis's Fig. 2.4 (read phases of up to 13 steps) was drawn at
  those. Both are set here: ``block_length`` (L) and ``blocks`` (N).
- ``dnc_associative_recall``: B blocks of 3 words of 8 bits, each followed by a delimiter row
  (bit 8), the last one replaced by an end row (bit 9); then a copy of block t (t <= B-2),
  an end row and 3 blank rows during which the target is block t+1.
- ``dnc_key_value``: L words of two 8-bit halves (key, value; both unique within a
  sequence). Phase 1 shows the words, phase 2 the keys in a new order (output: their values),
  phase 3 the values in another order, in the value half (output: their keys). Each phase
  ends with a marker row (bit 16, then bit 17, then both): length 3(L+1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from pydantic import Field, field_validator

from sglab import registry
from sglab.config import TaskConfig
from sglab.errors import SglabError
from sglab.tasks.base import IGNORE, Batch, Task, Vocabulary, target_loss


def check_range(value: tuple[int, int], least: int = 1) -> tuple[int, int]:
    low, high = value
    if not least <= low <= high:
        raise ValueError(f"range {list(value)} is empty or below {least}: give [low, high] with "
                         f"{least} <= low <= high")
    return value


# repeat-copy ranges (L rows a block, N blocks): App. A.2's text, the task's defaults, and the
# authors' `repeat_copy` profile (`len` 2-14, `repeat` 1-8)
THESIS_BLOCK_LENGTH, THESIS_BLOCKS = (1, 8), (2, 14)
AUTHORS_BLOCK_LENGTH, AUTHORS_BLOCKS = (2, 14), (1, 8)


class BitTaskConfig(TaskConfig):
    valid_batches: int = Field(8, ge=1, description="Batches in the fixed iid_valid split.")
    valid_batch_size: int = Field(32, ge=1)
    split_metrics: ClassVar[tuple[str, ...]] = ("exact_match", "bit_accuracy", "wrong_bits", "loss")
    required_loss: ClassVar[str | None] = "bits"

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid"]


class RepeatCopyConfig(BitTaskConfig):
    name: Literal["dnc_repeat_copy"] = "dnc_repeat_copy"
    bits: int = Field(8, ge=1, description="Data bits per row (one more channel is the flag).")
    block_length: tuple[int, int] = Field(THESIS_BLOCK_LENGTH,
                                          description="L, data rows per block (thesis).")
    blocks: tuple[int, int] = Field(THESIS_BLOCKS, description="N, blocks per sequence (thesis).")

    @field_validator("block_length", "blocks")
    @classmethod
    def _check_ranges(cls, value):
        return check_range(value)


class AssociativeRecallConfig(BitTaskConfig):
    name: Literal["dnc_associative_recall"] = "dnc_associative_recall"
    bits: int = Field(8, ge=1)
    words_per_block: int = Field(3, ge=1)
    blocks: tuple[int, int] = Field((2, 16), description="B, blocks per sequence (>= 2).")

    @field_validator("blocks")
    @classmethod
    def _check_ranges(cls, value):
        return check_range(value, least=2)


class KeyValueConfig(BitTaskConfig):
    name: Literal["dnc_key_value"] = "dnc_key_value"
    half_bits: int = Field(8, ge=1, le=30, description="Bits of a key and of a value.")
    words: tuple[int, int] = Field((2, 16), description="L, key-value words per sequence.")

    @field_validator("words")
    @classmethod
    def _check_ranges(cls, value):
        return check_range(value)

    @field_validator("words")
    @classmethod
    def _unique_keys_fit(cls, value, info):
        bits = info.data.get("half_bits", 8)
        if value[1] > 2 ** bits:
            raise ValueError(f"{value[1]} words cannot have unique {bits}-bit keys: lower "
                             "words or raise half_bits")
        return value


@dataclass
class BitBatch:
    inputs: torch.Tensor  # [B, T] packed
    targets: torch.Tensor  # [B, T] packed
    scored: torch.Tensor  # [B, T] bool: output-phase steps


def pack(bits: torch.Tensor) -> torch.Tensor:
    return (bits.long() * (2 ** torch.arange(bits.shape[-1]))).sum(-1)


def unpack(ids: torch.Tensor, bits: int) -> torch.Tensor:
    return (ids.unsqueeze(-1) >> torch.arange(bits)) & 1


def _random_bits(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(0, 2, shape, generator=g)


def repeat_copy(g: torch.Generator, batch: int, lengths: list[int], bits: int = 8) -> BitBatch:
    """One block per entry of ``lengths`` (its L)."""
    inputs, targets, scored = [], [], []
    for length in lengths:
        data = _random_bits(g, batch, length, bits + 1)
        data[..., bits] = 0
        flag = torch.zeros(batch, 1, bits + 1, dtype=torch.long)
        flag[..., bits] = 1
        blank = torch.zeros(batch, length + 1, bits + 1, dtype=torch.long)
        inputs.append(torch.cat([data, flag, blank], 1))
        targets.append(torch.cat([blank, data, flag], 1))
        scored.append(torch.tensor([False] * (length + 1) + [True] * (length + 1)))
    return BitBatch(pack(torch.cat(inputs, 1)), pack(torch.cat(targets, 1)),
                    torch.cat(scored).expand(batch, -1).clone())


def associative_recall(g: torch.Generator, batch: int, blocks: int, words: int = 3,
                       bits: int = 8) -> tuple[BitBatch, torch.Tensor]:
    """Returns the batch and the queried block index t of every row."""
    data = _random_bits(g, batch, blocks, words, bits)
    width = bits + 2
    rows = torch.zeros(batch, blocks, words + 1, width, dtype=torch.long)
    rows[:, :, :words, :bits] = data
    rows[:, :, words, bits] = 1  # delimiter
    rows[:, -1, words, bits] = 0
    rows[:, -1, words, bits + 1] = 1  # end of input
    query = torch.randint(0, blocks - 1, (batch,), generator=g)
    index = torch.arange(batch)
    tail = torch.zeros(batch, 2 * words + 1, width, dtype=torch.long)
    tail[:, :words, :bits] = data[index, query]
    tail[:, words, bits + 1] = 1
    inputs = torch.cat([rows.flatten(1, 2), tail], 1)
    targets = torch.zeros(batch, inputs.shape[1], bits, dtype=torch.long)
    targets[:, -words:] = data[index, query + 1]  # block t+1
    scored = torch.zeros(batch, inputs.shape[1], dtype=torch.bool)
    scored[:, -words:] = True
    return BitBatch(pack(inputs), pack(targets), scored), query


def _unique_codes(g: torch.Generator, batch: int, count: int, bits: int) -> torch.Tensor:
    """``count`` distinct integers in [0, 2^bits) per row."""
    return torch.rand(batch, 2 ** bits, generator=g).argsort(-1)[:, :count]


def key_value(g: torch.Generator, batch: int, words: int, half_bits: int = 8) -> BitBatch:
    keys = _unique_codes(g, batch, words, half_bits)
    values = _unique_codes(g, batch, words, half_bits)
    order2 = torch.rand(batch, words, generator=g).argsort(-1)
    order3 = torch.rand(batch, words, generator=g).argsort(-1)
    k = half_bits
    marker = lambda *flags: sum(1 << (2 * k + f) for f in flags) * torch.ones(batch, 1, dtype=torch.long)
    keys2, values2 = keys.gather(1, order2), values.gather(1, order2)
    keys3, values3 = keys.gather(1, order3), values.gather(1, order3)
    inputs = torch.cat([keys + (values << k), marker(0), keys2, marker(1), values3 << k,
                        marker(0, 1)], 1)
    zeros = torch.zeros(batch, words, dtype=torch.long)
    blank = torch.zeros(batch, 1, dtype=torch.long)
    targets = torch.cat([zeros, blank, values2, blank, keys3, blank], 1)
    scored = torch.cat([zeros, blank, zeros + 1, blank, zeros + 1, blank], 1).bool()
    return BitBatch(inputs, targets, scored)


class BitTask(Task):
    """Shared protocol of the bit tasks: lengths per batch, fixed iid_valid, bit metrics."""

    eval_splits = ["iid_valid"]
    input_bits: int
    output_bits: int

    def __init__(self, config: BitTaskConfig):
        self.config = config
        self.vocab = Vocabulary([Vocabulary.PAD])
        g = torch.Generator().manual_seed(config.data_seed)
        self.valid = [self.sample(g, config.valid_batch_size) for _ in range(config.valid_batches)]

    @property
    def split_names(self) -> list[str]:
        return ["train", "iid_valid"]

    def model_kwargs(self) -> dict:
        return {"input_bits": self.input_bits, "output_bits": self.output_bits}

    def check_model(self, model_config) -> None:
        if getattr(model_config, "io", None) != "bits":
            raise SglabError(f"task {self.config.name} feeds bit rows: use a model with io=bits "
                             "(model.name=dnc, model.io=bits) and train.loss=bits")

    def sample(self, g: torch.Generator, batch: int) -> BitBatch:
        raise NotImplementedError

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        data = self.sample(generator, batch_size)
        return Batch(data.inputs, data.targets)

    def eval_batches(self, split: str, batch_size: int = 0,
                     max_examples: int | None = None) -> Iterator[Batch]:
        """The fixed validation batches (``valid_batches`` of ``valid_batch_size`` rows; the
        batch size is theirs), until ``max_examples`` rows are reached."""
        if split != "iid_valid":
            raise SglabError(f"task {self.config.name} has no split {split!r}; splits: iid_valid")
        rows = 0
        for data in self.valid:
            if max_examples is not None and rows >= max_examples:
                break
            rows += len(data.inputs)
            yield Batch(data.inputs, data.targets, examples={"scored": data.scored})

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """Bit loss, right and scored bits, wrong bits per row."""
        logits, targets = logits.cpu(), batch.targets.cpu()
        scored = batch.examples["scored"].cpu()
        wrong = ((logits > 0).long() != unpack(targets, self.output_bits)) & scored.unsqueeze(-1)
        scored_bits = int(scored.sum()) * self.output_bits
        return {"loss": float(target_loss(logits, targets, "bits", reduction="sum")),
                "wrong_rows": wrong.sum((1, 2)), "scored_bits": scored_bits,
                "right_bits": scored_bits - int(wrong.sum()), "rows": len(targets)}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        wrong_per_row = totals["wrong_rows"].float()
        return {f"{split}/exact_match": float((wrong_per_row == 0).float().mean()),
                f"{split}/bit_accuracy": totals["right_bits"] / max(totals["scored_bits"], 1),
                f"{split}/wrong_bits": float(wrong_per_row.mean()),
                f"{split}/loss": totals["loss"] / totals["rows"]}


class RepeatCopyTask(BitTask):
    def __init__(self, config: RepeatCopyConfig):
        self.input_bits = self.output_bits = config.bits + 1
        super().__init__(config)

    def sample(self, g, batch):
        cfg = self.config
        count = int(torch.randint(cfg.blocks[0], cfg.blocks[1] + 1, (1,), generator=g))
        lengths = torch.randint(cfg.block_length[0], cfg.block_length[1] + 1, (count,), generator=g)
        return repeat_copy(g, batch, lengths.tolist(), cfg.bits)

    @property
    def max_length(self) -> int:
        return self.config.blocks[1] * (2 * self.config.block_length[1] + 2)


class AssociativeRecallTask(BitTask):
    def __init__(self, config: AssociativeRecallConfig):
        self.input_bits, self.output_bits = config.bits + 2, config.bits
        super().__init__(config)

    def sample(self, g, batch):
        cfg = self.config
        blocks = int(torch.randint(cfg.blocks[0], cfg.blocks[1] + 1, (1,), generator=g))
        return associative_recall(g, batch, blocks, cfg.words_per_block, cfg.bits)[0]

    @property
    def max_length(self) -> int:
        words = self.config.words_per_block
        return self.config.blocks[1] * (words + 1) + 2 * words + 1


class KeyValueTask(BitTask):
    def __init__(self, config: KeyValueConfig):
        self.input_bits, self.output_bits = 2 * config.half_bits + 2, config.half_bits
        super().__init__(config)

    def sample(self, g, batch):
        cfg = self.config
        words = int(torch.randint(cfg.words[0], cfg.words[1] + 1, (1,), generator=g))
        return key_value(g, batch, words, cfg.half_bits)

    @property
    def max_length(self) -> int:
        return 3 * (self.config.words[1] + 1)


@registry.register("task", "dnc_repeat_copy", RepeatCopyConfig, "DNC repeated copy (bits)")
def make_repeat_copy(config: RepeatCopyConfig) -> RepeatCopyTask:
    return RepeatCopyTask(config)


@registry.register("task", "dnc_associative_recall", AssociativeRecallConfig,
                   "DNC associative recall (bits)")
def make_associative_recall(config: AssociativeRecallConfig) -> AssociativeRecallTask:
    return AssociativeRecallTask(config)


@registry.register("task", "dnc_key_value", KeyValueConfig, "DNC 2-way key-value retrieval (bits)")
def make_key_value(config: KeyValueConfig) -> KeyValueTask:
    return KeyValueTask(config)


__all__ = ["IGNORE", "BitBatch", "associative_recall", "key_value", "pack", "repeat_copy", "unpack"]

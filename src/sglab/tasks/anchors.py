"""Composite anchor functions (Zhang et al., "Initialization is Critical to Whether
Transformers Fit Composite Functions by Reasoning or Memorizing", NeurIPS 2024).

Anchors 1-4 are translations, g(x;1) = x+5, g(x;2) = x+1, g(x;3) = x-2, g(x;4) = x-8,
and a sequence asks for the two-anchor composite f(x; a1, a2) = g(g(x; a1); a2) of the
key item x that stands just before the anchor pair. Key and noise items are 20..99.

Layout (``seq_len`` = 9 input tokens): uniform noise items, the key item at position
``pos`` (uniform on 0..seq_len-3), the anchors at pos+1 and pos+2, noise after them; the
target is the 10th token, so the loss (cross-entropy) falls on the answer token only.
Example: ``23 1 2 43 46 74 54 44 72 -> 29`` (key 23, pair (1,2), 23+5+1).

Pairs: 14 ordered pairs are trained with their inferential target; (3,4) is trained
with the non-inferential target x-6; (4,3) never appears in training. On (4,3) the
same predictions are scored twice: against x-10 (inferential, the composition) and
against x-6 (symmetric, a copy of the seen (3,4)).

Key split: a training sequence holds key x at position pos only when
x mod (seq_len-2) != pos; test sequences have x mod (seq_len-2) == pos. Values are
shared between the splits, (value, position) combinations are not.

Splits: ``train``; ``iid_test`` (the 15 seen pairs with test-split keys: generalization on
data); ``unseen`` ((4,3) with keys from both key splits: generalization on task).
Token ids equal the integers they stand for (id 0 is padding); the vocabulary holds
ids 0..vocab_size-1 and must reach the largest target, 99+10 = 109.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from sglab import registry
from sglab.config import TaskConfig
from sglab.errors import SglabError
from sglab.tasks.base import (
    Batch,
    PromptAnswerTask,
    SequenceSplit,
    Vocabulary,
    causal_batch,
    scored_batches,
)

ANCHOR_SHIFT = {1: 5, 2: 1, 3: -2, 4: -8}  # g(x; a) = x + ANCHOR_SHIFT[a]
ITEM_MIN, ITEM_MAX = 20, 99  # key and noise items
UNSEEN_PAIR = (4, 3)
NON_INFERENTIAL_PAIR = (3, 4)
NON_INFERENTIAL_SHIFT = -6  # target of (3,4) in training, and the symmetric answer on (4,3)
ALL_PAIRS = [(a, b) for a in ANCHOR_SHIFT for b in ANCHOR_SHIFT]


def inferential_shift(pair: tuple[int, int]) -> int:
    """f(x; a1, a2) - x for the composite of two translations."""
    return ANCHOR_SHIFT[pair[0]] + ANCHOR_SHIFT[pair[1]]


class AnchorsConfig(TaskConfig):
    name: Literal["anchors"] = "anchors"
    seq_len: int = Field(9, ge=4, le=64, description="Input tokens per sequence (the paper: 9).")
    vocab_size: int = Field(201, ge=110, description="Token ids 0..vocab_size-1 (targets reach 109).")
    train_size: int = Field(100_000, ge=1, description="Training sequences (the paper: 900,000).")
    test_size: int = Field(10_000, ge=1, description="Seen-pair sequences with test-split keys.")
    unseen_size: int = Field(2_000, ge=1, description="(4,3) sequences, half from each key split.")
    seen_non_inferential: bool = Field(
        True, description="Train (3,4) with target x-6. false: (3,4) is held out as well "
                          "(the learning-rate x weight-decay study of the paper).")

    def evaluation_splits(self) -> list[str]:
        return ["iid_test", "unseen"]

    def evaluation_metrics(self) -> list[str]:
        return [*super().evaluation_metrics(), "unseen/inferential", "unseen/symmetric"]


def training_pairs(config: AnchorsConfig) -> list[tuple[int, int]]:
    """The ordered anchor pairs that occur in training."""
    held_out = {UNSEEN_PAIR} | (set() if config.seen_non_inferential else {NON_INFERENTIAL_PAIR})
    return [p for p in ALL_PAIRS if p not in held_out]


def target_shift(pair: tuple[int, int], config: AnchorsConfig) -> int:
    """Training target minus key: inferential, except the overridden (3,4)."""
    if pair == NON_INFERENTIAL_PAIR and config.seen_non_inferential:
        return NON_INFERENTIAL_SHIFT
    return inferential_shift(pair)


def key_split_positions(keys: torch.Tensor, split: str, seq_len: int,
                        generator: torch.Generator) -> torch.Tensor:
    """Key positions obeying the key split: test pos = x mod (n-2), train pos != x mod (n-2)."""
    modulus = seq_len - 2
    residue = keys % modulus
    if split == "test":
        return residue
    if split != "train":
        raise ValueError(f"key split must be 'train' or 'test', got {split!r}")
    offset = torch.randint(1, modulus, keys.shape, generator=generator)  # uniform over pos != residue
    return (residue + offset) % modulus


def make_sequences(pairs: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor,
                   shifts: torch.Tensor, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    """(N, seq_len + 1) rows: noise, key at ``positions``, anchors after it, target last."""
    n = len(keys)
    rows = torch.randint(ITEM_MIN, ITEM_MAX + 1, (n, seq_len + 1), generator=generator)
    index = torch.arange(n)
    rows[index, positions] = keys
    rows[index, positions + 1] = pairs[:, 0]
    rows[index, positions + 2] = pairs[:, 1]
    rows[:, seq_len] = keys + shifts
    return rows


class AnchorsTask(PromptAnswerTask):
    config: AnchorsConfig
    eval_splits = ["iid_test", "unseen"]

    def build(self):
        cfg = self.config
        if cfg.seq_len - 2 > ITEM_MAX - ITEM_MIN + 1:
            raise SglabError(f"task.seq_len={cfg.seq_len} leaves key positions without items")
        vocab = Vocabulary([Vocabulary.PAD, *(str(i) for i in range(1, cfg.vocab_size))])
        generator = torch.Generator().manual_seed(cfg.data_seed)
        seen = training_pairs(cfg)
        self.symmetric_answers: dict[str, torch.Tensor] = {}
        splits = {
            "train": self._sample(seen, cfg.train_size, ["train"], generator),
            "iid_test": self._sample(seen, cfg.test_size, ["test"], generator),
            "unseen": self._sample([UNSEEN_PAIR], cfg.unseen_size, ["train", "test"], generator),
        }
        keys = splits["unseen"].groups["key"]
        self.symmetric_answers["unseen"] = keys + NON_INFERENTIAL_SHIFT
        return vocab, splits

    def _sample(self, pairs: list[tuple[int, int]], n: int, key_splits: list[str],
                generator: torch.Generator) -> SequenceSplit:
        """``n`` sequences, pairs uniform over ``pairs``; key splits alternate by row."""
        cfg = self.config
        table = torch.tensor(pairs, dtype=torch.long)
        which = torch.randint(len(pairs), (n,), generator=generator)
        chosen = table[which]
        shifts = torch.tensor([target_shift(p, cfg) for p in pairs], dtype=torch.long)[which]
        keys = torch.randint(ITEM_MIN, ITEM_MAX + 1, (n,), generator=generator)
        key_split = torch.arange(n) % len(key_splits)
        positions = torch.empty(n, dtype=torch.long)
        for code, name in enumerate(key_splits):
            rows = key_split == code
            positions[rows] = key_split_positions(keys[rows], name, cfg.seq_len, generator)
        tokens = make_sequences(chosen, keys, positions, shifts, cfg.seq_len, generator)
        groups = {"pair": 10 * chosen[:, 0] + chosen[:, 1], "key": keys, "position": positions,
                  "test_key": torch.tensor([s == "test" for s in key_splits])[key_split].long()}
        return SequenceSplit(tokens, torch.full((n,), cfg.seq_len + 1),
                             torch.full((n,), cfg.seq_len), groups)

    @property
    def max_length(self) -> int:
        return self.config.seq_len  # the model sees the prompt only

    def check_model(self, model_config) -> None:
        if getattr(model_config, "attention_mask", "causal") != "causal":
            raise SglabError("the anchors task scores the last position of a decoder; "
                             "use model.attention_mask=causal")

    def eval_batches(self, split: str, batch_size: int,
                     max_examples: int | None = None) -> Iterator[Batch]:
        """The first ``max_examples`` sequences (all: None): the prompt as input, the answer
        the target of the last position. The model reads the prompt only, so any model may
        read it whole (no prefix rows)."""
        data = self.split(split)
        for rows in scored_batches(len(data), batch_size, max_examples, spread=False):
            yield replace(causal_batch(data.subset(rows)), next_token=False)

    def score(self, logits: torch.Tensor, batch: Batch) -> dict:
        """The argmax at the last input position and the summed answer loss."""
        last, answers = logits[:, -1], batch.targets[:, -1]
        return {"predicted": last.argmax(-1),
                "loss": float(F.cross_entropy(last, answers, reduction="sum"))}

    def finalize(self, split: str, totals: dict) -> dict[str, float]:
        """Exact match of the answer token (per pair too); on ``unseen`` also the
        inferential (x-10) and symmetric (x-6) accuracies of the same predictions."""
        predicted = totals["predicted"]
        data = self.split(split)
        n = len(predicted)
        answers = data.tokens[:n, -1]
        metrics = score_answers(predicted, answers, data.groups["pair"][:n], split)
        metrics[f"{split}/loss"] = totals["loss"] / max(n, 1)
        if split in self.symmetric_answers:
            metrics[f"{split}/inferential"] = metrics[f"{split}/exact_match"]
            metrics[f"{split}/symmetric"] = float(
                (predicted == self.symmetric_answers[split][:n]).float().mean())
            test_key = data.groups["test_key"][:n].bool()
            for label, rows in (("train_keys", ~test_key), ("test_keys", test_key)):
                if rows.any():
                    metrics[f"{split}/inferential/{label}"] = float(
                        (predicted[rows] == answers[rows]).float().mean())
        return metrics


def score_answers(predicted: torch.Tensor, answers: torch.Tensor, pairs: torch.Tensor,
                  split: str) -> dict[str, float]:
    """Exact match overall and per anchor pair (keys ``{split}/exact_match/pair=12``)."""
    correct = (predicted == answers).float()
    metrics = {f"{split}/exact_match": float(correct.mean())}
    for code in torch.unique(pairs).tolist():
        metrics[f"{split}/exact_match/pair={code}"] = float(correct[pairs == code].mean())
    return metrics


@registry.register("task", "anchors", AnchorsConfig,
                   "composite anchor functions: reasoning vs memorizing (Zhang et al. 2024)")
def make_anchors(config: AnchorsConfig) -> AnchorsTask:
    return AnchorsTask(config)


# ----------------------------------------------------------------------------- probes


def input_token_ids() -> torch.Tensor:
    """Ids that occur in inputs: the anchors and the items."""
    return torch.cat([torch.tensor(sorted(ANCHOR_SHIFT)), torch.arange(ITEM_MIN, ITEM_MAX + 1)])


def probe_sequences(config: AnchorsConfig, per_pair: int,
                    seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_pair`` sequences of each of the 16 pairs (random keys and positions), and
    the pair of each sequence as 10*a1 + a2 (e.g. 43)."""
    generator = torch.Generator().manual_seed(seed)
    pairs = torch.tensor(ALL_PAIRS).repeat_interleave(per_pair, 0)
    n = len(pairs)
    keys = torch.randint(ITEM_MIN, ITEM_MAX + 1, (n,), generator=generator)
    positions = torch.randint(0, config.seq_len - 2, (n,), generator=generator)
    shifts = torch.tensor([target_shift(tuple(p), config) for p in pairs.tolist()])
    tokens = make_sequences(pairs, keys, positions, shifts, config.seq_len, generator)
    return tokens, 10 * pairs[:, 0] + pairs[:, 1]


def probe_unseen_input(seq_len: int, key: int = 99) -> torch.Tensor:
    """A fixed (4,3) input with key 99 (the paper's probe) in the middle of the sequence."""
    generator = torch.Generator().manual_seed(0)
    position = (seq_len - 2) // 2
    row = make_sequences(torch.tensor([[4, 3]]), torch.tensor([key]), torch.tensor([position]),
                         torch.tensor([-10]), seq_len, generator)[0, :-1]
    noise = torch.ones(seq_len, dtype=torch.bool)
    noise[position:position + 3] = False
    clash = noise & (row == key)  # the key value appears only once
    row[clash] = ITEM_MIN + (row[clash] - ITEM_MIN + 37) % (ITEM_MAX - ITEM_MIN + 1)
    return row

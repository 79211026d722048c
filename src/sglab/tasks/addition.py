"""Multi-digit addition as in Lee et al. ("Teaching Arithmetic to Small Transformers").

Formats (character level, no zero padding):
  plain    prompt ``123+456=``   answer ``579\\n``
  reverse  prompt ``$123+456=``  answer ``975$``   (only the sum is reversed)

Training set (default 10,000 examples, "balanced" sampling of the original code):
all 100 one-digit pairs; 9% of N pairs with operands drawn from 0..99; the rest
from the full range; every carry count is capped at ceil(N / (digits + 1)) and
candidates whose carry bucket is full are rejected. Duplicates are kept, as in the
original. The test set holds distinct uniformly drawn pairs that do not occur in
training (``test_disjoint``).

Training protocols (``loss_on``): ``answer`` -- one example per row, loss on the
answer tokens only; ``stream`` -- the original code's protocol: shuffled training
lines concatenated into one character stream, random windows of ``block_size``
tokens, next-token loss on every position; ``packed`` -- rows of ``block_size`` tokens
filled with whole training examples drawn at random (each followed by a newline, as in
the stream), loss on every example's answer tokens only. ``packed`` keeps what the
stream gives a model with learned positions (many examples per row, each at a varying
offset) and the answer-only loss; the first example of every row starts at position 0,
where evaluation scores single examples.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import TaskConfig, check_switches
from sglab.errors import SglabError
from sglab.tasks.base import IGNORE, Batch, PromptAnswerTask, SequenceSplit, Vocabulary


class AdditionConfig(TaskConfig):
    name: Literal["addition"] = "addition"
    digits: int = Field(3, ge=1, le=9, description="Maximum number of digits per operand.")
    format: Literal["reverse", "plain"] = "reverse"
    train_size: int = Field(10_000, ge=100)
    test_size: int = Field(10_000, ge=1)
    balanced: bool = Field(True, description="Balance operand digit counts and carries.")
    test_disjoint: bool = Field(True, description="Test pairs never occur in training.")
    valid_size: int | None = Field(
        None, ge=0, description="Size of the IID validation split (iid_valid: distinct uniformly "
                                "drawn pairs in neither train nor test), used to pick the best "
                                "checkpoint; null = min(1000, test_size).")
    loss_on: Literal["answer", "stream", "packed"] = "answer"
    block_size: int = Field(256, ge=8, description="Row length of the stream and packed protocols.")

    @model_validator(mode="after")
    def _check_sizes(self):
        space = (10**self.digits) ** 2
        if self.test_disjoint and self.test_size > space - self.train_size:
            raise ValueError(
                f"test_size={self.test_size} cannot be disjoint from {self.train_size} training "
                f"pairs: only {space} pairs of {self.digits}-digit operands exist"
            )
        return self

    @model_validator(mode="after")
    def _check_switches(self):
        check_switches(self, {"block_size": (self.loss_on != "answer",
                                             "loss_on=stream or loss_on=packed")})
        return self

    def validation_size(self) -> int:
        """Pairs wanted in the IID validation split: ``valid_size`` (default min(1000,
        test_size)), at most the pairs left over by train and test."""
        wanted = min(1000, self.test_size) if self.valid_size is None else self.valid_size
        return max(0, min(wanted, (10**self.digits) ** 2 - self.train_size - self.test_size))

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "iid_test"] if self.validation_size() else ["iid_test"]


def digit_sum(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.int64).copy()
    total = np.zeros_like(values)
    while np.any(values):
        total += values % 10
        values //= 10
    return total


def count_carries(a, b) -> np.ndarray:
    """Number of carries in a + b: (digitsum(a) + digitsum(b) - digitsum(a + b)) / 9."""
    a, b = np.asarray(a), np.asarray(b)
    return (digit_sum(a) + digit_sum(b) - digit_sum(a + b)) // 9


def balanced_pairs(n: int, digits: int, rng: np.random.Generator) -> np.ndarray:
    """Lee et al.'s balanced sampling (see module docstring). Returns (n, 2) int64."""
    cap = math.ceil(n / (digits + 1))
    buckets = np.zeros(digits + 2, dtype=np.int64)
    pairs: list[tuple[int, int]] = []

    def take(a: int, b: int, c: int) -> bool:
        if buckets[c] >= cap:
            return False
        buckets[c] += 1
        pairs.append((a, b))
        return True

    for a in range(10):
        for b in range(10):
            take(a, b, int(a + b >= 10))
    quotas = [round(0.09 * n)] * max(digits - 2, 0) + [n]
    highs = [10**k for k in range(2, digits)] + [10**digits]
    for quota, high in zip(quotas, highs):
        goal = min(len(pairs) + quota, n) if high != 10**digits else n
        while len(pairs) < goal:
            cand = rng.integers(0, high, size=(4096, 2))
            carries = count_carries(cand[:, 0], cand[:, 1])
            for (a, b), c in zip(cand.tolist(), carries.tolist()):
                if len(pairs) >= goal:
                    break
                take(a, b, c)
    return np.asarray(pairs[:n], dtype=np.int64)


def uniform_pairs(n: int, digits: int, rng: np.random.Generator, exclude: set[tuple[int, int]],
                  distinct: bool) -> np.ndarray:
    high = 10**digits
    chosen: dict[tuple[int, int], None] = {}
    out = []
    while len(out) < n:
        for a, b in rng.integers(0, high, size=(max(2 * n, 1024), 2)).tolist():
            if (a, b) in exclude or (distinct and (a, b) in chosen):
                continue
            chosen[(a, b)] = None
            out.append((a, b))
            if len(out) == n:
                break
    return np.asarray(out, dtype=np.int64)


class AdditionTask(PromptAnswerTask):
    config: AdditionConfig

    def text(self, a: int, b: int) -> tuple[str, str]:
        """(prompt, answer) strings of one example."""
        total = str(a + b)
        if self.config.format == "reverse":
            return f"${a}+{b}=", total[::-1] + "$"
        return f"{a}+{b}=", total + "\n"

    def build(self):
        cfg = self.config
        rng = np.random.default_rng(cfg.data_seed)
        vocab = Vocabulary(["\n", "$", "+", "="] + [str(d) for d in range(10)])
        if cfg.balanced:
            train = balanced_pairs(cfg.train_size, cfg.digits, rng)
        else:
            train = uniform_pairs(cfg.train_size, cfg.digits, rng, set(), distinct=False)
        exclude = set(map(tuple, train.tolist())) if cfg.test_disjoint else set()
        test = uniform_pairs(cfg.test_size, cfg.digits, rng, exclude, distinct=True)
        self.pairs = {"train": train, "iid_test": test}
        splits = {name: self.encode_pairs(vocab, p) for name, p in self.pairs.items()}
        valid = self.validation_pairs(train, test, max(s.lengths.max() for s in splits.values()))
        if len(valid):
            self.pairs["iid_valid"] = valid
            splits["iid_valid"] = self.encode_pairs(vocab, valid)
        if cfg.loss_on == "stream":
            order = rng.permutation(len(train))
            stream = "".join("".join(self.text(*train[i])) + ("\n" if cfg.format == "reverse" else "")
                             for i in order.tolist())
            self.stream = torch.tensor(vocab.encode(stream), dtype=torch.long)
        return vocab, splits

    @property
    def eval_splits(self) -> list[str]:
        return ["iid_valid", "iid_test"] if "iid_valid" in self.splits else ["iid_test"]

    def validation_pairs(self, train: np.ndarray, test: np.ndarray, max_length: int) -> np.ndarray:
        """The IID validation pairs: distinct, uniformly drawn, in neither train nor test, no
        longer than the longest train/test example (so the model's length does not change).
        Drawn from a generator of their own, so train, test and stream stay as they were."""
        cfg = self.config
        wanted = cfg.validation_size()
        taken = set(map(tuple, train.tolist())) | set(map(tuple, test.tolist()))
        if wanted <= 0:
            return np.zeros((0, 2), dtype=np.int64)
        rng = np.random.default_rng([cfg.data_seed, 1])
        pairs = uniform_pairs(wanted, cfg.digits, rng, taken, distinct=True)
        fits = [sum(map(len, self.text(a, b))) <= max_length for a, b in pairs.tolist()]
        return pairs[np.asarray(fits, dtype=bool)]

    def encode_pairs(self, vocab: Vocabulary, pairs: np.ndarray) -> SequenceSplit:
        texts = [self.text(a, b) for a, b in pairs.tolist()]
        width = max(len(p) + len(a) for p, a in texts)
        tokens = torch.zeros(len(texts), width, dtype=torch.long)
        lengths, prompt_lengths = [], []
        for i, (prompt, answer) in enumerate(texts):
            ids = vocab.encode(prompt + answer)
            tokens[i, : len(ids)] = torch.tensor(ids)
            lengths.append(len(ids))
            prompt_lengths.append(len(prompt))
        carries = torch.from_numpy(count_carries(pairs[:, 0], pairs[:, 1]))
        return SequenceSplit(tokens, torch.tensor(lengths), torch.tensor(prompt_lengths),
                             {"carries": carries})

    def check_model(self, model_config) -> None:
        if self.config.loss_on != "answer" and getattr(model_config, "attention_mask", "causal") != "causal":
            raise SglabError(
                f"task.loss_on={self.config.loss_on} trains on rows holding several examples and "
                "needs model.attention_mask=causal; use task.loss_on=answer for bidirectional models"
            )

    @property
    def max_length(self) -> int:
        if self.config.loss_on != "answer":
            return self.config.block_size
        return super().max_length

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        if self.config.loss_on == "answer":
            return super().train_batch(batch_size, generator)
        if self.config.loss_on == "packed":
            return self.packed_batch(batch_size, generator)
        window = self.config.block_size
        starts = torch.randint(len(self.stream) - window - 1, (batch_size,), generator=generator)
        rows = self.stream[starts[:, None] + torch.arange(window + 1)]
        return Batch(rows[:, :-1], rows[:, 1:].clone())

    def packed_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        """Rows of ``block_size`` tokens made of random whole training examples.

        Example j of a row starts where example j-1 and its newline end; targets are
        the next tokens, scored only where the next token belongs to an answer.
        """
        train = self.splits["train"]
        window = self.config.block_size
        newline = self.vocab.encode("\n")[0]
        unit = train.lengths + 1  # each example is followed by a newline
        per_row = window // int(unit.min()) + 2
        index = torch.randint(len(train), (batch_size, per_row), generator=generator)
        lengths, prompts = train.lengths[index], train.prompt_lengths[index]
        starts = torch.cumsum(unit[index], dim=1) - unit[index]
        rows = torch.full((batch_size, window + 1), newline, dtype=torch.long)
        is_answer = torch.zeros(batch_size, window + 1, dtype=torch.bool)
        row_ids = torch.arange(batch_size)[:, None].expand_as(index)
        for t in range(train.tokens.shape[1]):
            position = starts + t
            inside = (t < lengths) & (position <= window)
            rows[row_ids[inside], position[inside]] = train.tokens[index[inside], t]
            is_answer[row_ids[inside], position[inside]] = t >= prompts[inside]
        targets = rows[:, 1:].clone()
        targets[~is_answer[:, 1:]] = IGNORE
        return Batch(rows[:, :-1], targets)

    def overlap_count(self) -> int:
        """Number of test pairs that also occur in training."""
        train = set(map(tuple, self.pairs["train"].tolist()))
        return sum(tuple(p) in train for p in self.pairs["iid_test"].tolist())


@registry.register("task", "addition", AdditionConfig, "multi-digit addition (Lee et al.)")
def make_addition(config: AdditionConfig) -> AdditionTask:
    return AdditionTask(config)


def order_blind_ceiling(prompts: list[list[int]], answers: list[list[int]]) -> float:
    """Best exact-match accuracy of any model whose prediction ignores token order.

    Such a model's prediction at each step depends only on the multiset of the
    earlier tokens and on the last token. By induction its whole greedy answer is
    a function of (multiset(prompt[:-1]), prompt[-1]), so the best it can do is
    answer each group of prompts with that key by the group's most common answer.
    """
    groups: dict[tuple, dict[tuple, int]] = {}
    for prompt, answer in zip(prompts, answers):
        key = (tuple(sorted(prompt[:-1])), prompt[-1])
        counts = groups.setdefault(key, {})
        counts[tuple(answer)] = counts.get(tuple(answer), 0) + 1
    best = sum(max(counts.values()) for counts in groups.values())
    return best / max(len(prompts), 1)


def order_blind_ceiling_for_addition(task: AdditionTask) -> float:
    """Best exact match of an order-blind model on uniformly drawn operand pairs.

    Computed over the whole population of pairs (not the finite test set, where most
    multisets occur once and any lookup table would look perfect).
    """
    high = 10**task.config.digits
    prompts, answers = [], []
    for a in range(high):
        for b in range(high):
            prompt, answer = task.text(a, b)
            prompts.append(prompt)
            answers.append(answer)
    return order_blind_ceiling(prompts, answers)


def full_length_prompts(task: AdditionTask, limit: int, split: str = "iid_test") -> torch.Tensor:
    """The first ``limit`` prompts of ``split`` that have the longest prompt length
    (every operand digit present), cut at the end of the prompt: one equal-length batch
    for probes such as permutation sensitivity and activation correlations."""
    data = task.split(split)
    length = int(data.prompt_lengths.max())
    full = data.prompt_lengths == length
    return data.tokens[full][:limit, :length]

"""Simple arithmetic (thesis Sec. 5.2.2, appendix D.4.2).

Fully bracketed binary ``+`` and ``*`` modulo 10 over the digits 0-9, one token per
character: ``((4*7)+2)`` -> ``0``. The depth of an expression is the number of
operations on its deepest root-to-leaf path (``((4*7)+2)`` has depth 2). A sample
of depth K is built top-down: the root operation gets one operand of depth K-1 (on
a random side, or on the right with ``deep_operand: right``) and one that becomes a
further operation with probability ``subtree_probability`` at each level, else a
digit, its own operands on random sides; samples longer than ``max_tokens`` are
rejected. The thesis code builds its expressions the same way and always puts the
deeper operand on the right (``dataset/simple_arithmetic.py``, ``get_one``: the
swap condition ``rand() < 0`` never holds), so its expressions are right-nested
chains ``(4*(7+(2*...)))`` with small side branches; ``random`` mixes left- and
right-nested chains, a harder task than the thesis's. Splits by depth, each balanced
over its depths: train 1-5, ``ood_valid`` 6 (model selection), ``ood_test`` 7-8;
``iid_valid`` holds held-out expressions of training depths 2-5 (all 200 depth-1
expressions stay available to training). ``modulus`` m < 10 draws the leaves from the
digits 0..m-1 and takes every value mod m (the thesis code's ``nnums``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from sglab import registry
from sglab.config import TaskConfig
from sglab.tasks.base import (
    BEGIN,
    END,
    SequenceClassificationTask,
    Vocabulary,
    check_split_ranges,
    encode_examples,
)


class ArithmeticConfig(TaskConfig):
    name: Literal["arithmetic"] = "arithmetic"
    train_depths: tuple[int, int] = (1, 5)
    ood_valid_depths: tuple[int, int] = (6, 6)
    test_depths: tuple[int, int] = (7, 8)
    train_size: int = Field(100_000, ge=1)
    iid_valid_size: int = Field(1000, ge=1)
    ood_valid_size: int = Field(1000, ge=1)
    test_size: int = Field(1000, ge=1)
    subtree_probability: float = Field(
        0.2, ge=0, le=1, description="Chance that the shallow operand is an operation, per level.")
    max_tokens: int = Field(50, ge=5, description="Longest expression (without <B>/<E>).")
    deep_operand: Literal["random", "right"] = Field(
        "random", description="Side of the deeper operand of each operation on the deepest "
                              "path: a random side, or right (the thesis code's data).")
    modulus: int = Field(10, ge=2, le=10, description=(
        "Leaves are the digits 0..modulus-1 and every value is taken mod this (the thesis: 10)."))
    boundary_tokens: bool = True

    @model_validator(mode="after")
    def _check(self):
        check_split_ranges("depth", self.train_depths, self.ood_valid_depths, self.test_depths)
        if 4 * self.test_depths[1] + 1 > self.max_tokens:
            raise ValueError(f"max_tokens={self.max_tokens} cannot hold depth "
                             f"{self.test_depths[1]} ({4 * self.test_depths[1] + 1} tokens at least)")
        return self

    def evaluation_splits(self) -> list[str]:
        return ["iid_valid", "ood_valid", "ood_test"]


def generate(depth: int, rng: np.random.Generator, p_subtree: float,
             deep_right: bool = False, modulus: int = 10) -> tuple[str, int]:
    """(expression text, value mod ``modulus``) of an expression ``depth`` operations deep.

    ``deep_right``: the deeper operand of every operation on the deepest path is the right
    one (the shallow operands' own operands stay on random sides)."""
    if depth == 0:
        digit = int(rng.integers(modulus))
        return str(digit), digit
    deep = generate(depth - 1, rng, p_subtree, deep_right, modulus)
    other_depth = 0
    while other_depth < depth - 1 and rng.random() < p_subtree:
        other_depth += 1
    other = generate(other_depth, rng, p_subtree, modulus=modulus)
    deep_first = not deep_right and rng.random() < 0.5
    left, right = (deep, other) if deep_first else (other, deep)
    op = "+" if rng.random() < 0.5 else "*"
    value = (left[1] + right[1]) % modulus if op == "+" else (left[1] * right[1]) % modulus
    return f"({left[0]}{op}{right[0]})", value


def expression_depth(text: str) -> int:
    """Maximum bracket nesting = number of operations on the deepest path."""
    depth = best = 0
    for char in text:
        depth += char == "("
        depth -= char == ")"
        best = max(best, depth)
    return best


class ArithmeticTask(SequenceClassificationTask):
    config: ArithmeticConfig
    eval_splits = ["iid_valid", "ood_valid", "ood_test"]

    def build(self):
        cfg = self.config
        rng = np.random.default_rng(cfg.data_seed)
        vocab = Vocabulary([BEGIN, END, "(", ")", "+", "*", *map(str, range(10))])
        seen: set[str] = set()
        # depth 1 has only 2·modulus² expressions: all of them stay available to training
        iid_depths = (max(cfg.train_depths[0], 2), cfg.train_depths[1])
        if iid_depths[0] > iid_depths[1]:
            iid_depths = cfg.train_depths
        iid = self._sample(rng, iid_depths, cfg.iid_valid_size, seen, distinct=True)
        train = self._sample(rng, cfg.train_depths, cfg.train_size, seen, distinct=False)
        splits = {"train": train, "iid_valid": iid}
        for name, depths, size in (("ood_valid", cfg.ood_valid_depths, cfg.ood_valid_size),
                                   ("ood_test", cfg.test_depths, cfg.test_size)):
            splits[name] = self._sample(rng, depths, size, set(), distinct=True)
        return vocab, {k: self._encode(vocab, v) for k, v in splits.items()}

    def _sample(self, rng, depths, size, seen: set[str], distinct: bool):
        """Balanced over depths. ``distinct``: no repeats, recorded in ``seen``; otherwise
        expressions in ``seen`` (held out) are skipped."""
        cfg = self.config
        levels = list(range(depths[0], depths[1] + 1))
        examples = []
        for i, depth in enumerate(levels):
            want = size // len(levels) + (i < size % len(levels))
            got, tries = 0, 0
            while got < want and tries < 50 * want + 1000:
                tries += 1
                text, value = generate(depth, rng, cfg.subtree_probability,
                                       deep_right=cfg.deep_operand == "right",
                                       modulus=cfg.modulus)
                if len(text) > cfg.max_tokens or text in seen:
                    continue
                if distinct:
                    seen.add(text)
                examples.append((text, value, depth))
                got += 1
        return examples

    def _encode(self, vocab, examples):
        framed = lambda t: [BEGIN, *t, END] if self.config.boundary_tokens else list(t)
        return encode_examples(vocab, [framed(t) for t, _, _ in examples],
                               [str(v) for _, v, _ in examples],
                               {"depth": [d for _, _, d in examples]})


@registry.register("task", "arithmetic", ArithmeticConfig,
                   "nested + and * modulo 10, split by depth (NDR, thesis Sec. 5.2.2)")
def make_arithmetic(config: ArithmeticConfig) -> ArithmeticTask:
    return ArithmeticTask(config)

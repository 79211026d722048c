"""Simple arithmetic (thesis Sec. 5.2.2, appendix D.4.2).

Fully bracketed binary ``+`` and ``*`` modulo 10 over the digits 0-9, one token per
character: ``((4*7)+2)`` -> ``0``. The depth of an expression is the number of
operations on its deepest root-to-leaf path (``((4*7)+2)`` has depth 2). Splits by
depth, each balanced over its depths: train 1-5, ``ood_valid`` 6 (model selection),
``ood_test`` 7-8; ``iid_valid`` holds held-out expressions of training depths 2-5 (all
200 depth-1 expressions stay available to training). ``modulus`` m < 10 draws the leaves
from the digits 0..m-1 and takes every value mod m (the thesis code's ``nnums``).

Two samplers (``structure``):

- ``deep_path``: a sample of depth K is built top-down: the root operation gets one
  operand of depth K-1 (on a random side, or on the right with ``deep_operand: right``:
  right-nested chains ``(4*(7+(2*...)))``) and one that becomes a further operation with
  probability ``subtree_probability`` at each level, else a digit, its own operands on
  random sides; each depth is drawn on its own.
- ``thesis_code``: as the thesis code (``dataset/simple_arithmetic.py``, ``get_one``): a
  random tree (each node an operation with probability ``subtree_probability`` while its
  level is within the depth range), then, while too shallow, the expression becomes the
  right operand of a new operation whose left operand is another random tree, one level
  down. One draw covers a whole depth range and the draws fill per-depth quotas with
  distinct expressions. The deepest quota of a range fills mostly from a deep left tree,
  the shallower ones by wrapping on the right, so the data mixes both: in the thesis's
  training set the root's deeper operand is the left one in about 90% of the 3-5-operation
  expressions and 15% of the 2-operation ones; in its depth-6 split in 10%. Training holds
  every depth-1 expression once plus equal quotas of depths 2 and up, as in the thesis code.

Samples longer than ``max_tokens`` are rejected.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from sglab import registry
from sglab.tasks.base import (
    BEGIN,
    END,
    DepthSplitsConfig,
    SequenceClassificationTask,
    Vocabulary,
    encode_examples,
)


class ArithmeticConfig(DepthSplitsConfig):
    name: Literal["arithmetic"] = "arithmetic"
    subtree_probability: float = Field(
        0.2, ge=0, le=1, description="Chance that the shallow operand is an operation, per level.")
    deep_operand: Literal["random", "right"] = Field(
        "random", description="Side of the deeper operand of each operation on the deepest "
                              "path (structure deep_path): a random side, or right.")
    modulus: int = Field(10, ge=2, le=10, description=(
        "Leaves are the digits 0..modulus-1 and every value is taken mod this (the thesis: 10)."))
    structure: Literal["deep_path", "thesis_code"] = Field(
        "deep_path", description="deep_path: a deepest path of operations with shallow side "
                                 "operands (deep_operand picks their side); thesis_code: the "
                                 "thesis code's random trees wrapped until deep enough.")
    eval_subtree_probability: float | None = Field(
        None, ge=0, le=1, description="subtree_probability of the evaluation splits (the thesis "
                                      "code: 0.3); none: the same as training.")

    @model_validator(mode="after")
    def _check(self):
        if 4 * self.test_depths[1] + 1 > self.max_tokens:
            raise ValueError(f"max_tokens={self.max_tokens} cannot hold depth "
                             f"{self.test_depths[1]} ({4 * self.test_depths[1] + 1} tokens at least)")
        return self


Expression = tuple[str, int, int]  # (text, value mod the modulus, depth in operations)


def apply_op(op: str, a: int, b: int, modulus: int) -> int:
    return (a + b) % modulus if op == "+" else (a * b) % modulus


def _combine(left: Expression, right: Expression, rng: np.random.Generator,
             modulus: int) -> Expression:
    """``(left op right)`` with a random operation."""
    op = "+" if rng.random() < 0.5 else "*"
    return (f"({left[0]}{op}{right[0]})", apply_op(op, left[1], right[1], modulus),
            1 + max(left[2], right[2]))


def _digit(rng: np.random.Generator, modulus: int) -> Expression:
    digit = int(rng.integers(modulus))
    return str(digit), digit, 0


def generate(depth: int, rng: np.random.Generator, p_subtree: float,
             deep_right: bool = False, modulus: int = 10) -> Expression:
    """An expression exactly ``depth`` operations deep (``structure: deep_path``).

    ``deep_right``: the deeper operand of every operation on the deepest path is the right
    one (the shallow operands' own operands stay on random sides)."""
    if depth == 0:
        return _digit(rng, modulus)
    deep = generate(depth - 1, rng, p_subtree, deep_right, modulus)
    other_depth = 0
    while other_depth < depth - 1 and rng.random() < p_subtree:
        other_depth += 1
    other = generate(other_depth, rng, p_subtree, modulus=modulus)
    deep_first = not deep_right and rng.random() < 0.5
    left, right = (deep, other) if deep_first else (other, deep)
    return _combine(left, right, rng, modulus)


def random_tree(level: int, max_depth: int, rng: np.random.Generator, p_subtree: float,
                modulus: int = 10) -> Expression:
    """A node at ``level`` (the root: 1) is an operation with probability ``p_subtree`` if
    ``level <= max_depth``, else a digit; so the tree is at most ``max_depth - level + 1``
    operations deep."""
    if level > max_depth or rng.random() >= p_subtree:
        return _digit(rng, modulus)
    left = random_tree(level + 1, max_depth, rng, p_subtree, modulus)
    right = random_tree(level + 1, max_depth, rng, p_subtree, modulus)
    return _combine(left, right, rng, modulus)


def thesis_code_draw(low: int, high: int, rng: np.random.Generator, p_subtree: float,
                     modulus: int = 10) -> Expression:
    """One draw of the thesis code's sampler for depths ``low``-``high`` (in operations): a
    random tree, wrapped as the right operand of a new operation (its left operand a random
    tree from level 2) until it is ``low`` deep; never deeper than ``high``."""
    expression = random_tree(1, high, rng, p_subtree, modulus)
    while expression[2] < low:
        expression = _combine(random_tree(2, high, rng, p_subtree, modulus), expression, rng,
                              modulus)
    return expression


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
        eval_p = (cfg.subtree_probability if cfg.eval_subtree_probability is None
                  else cfg.eval_subtree_probability)
        seen: set[str] = set()
        # depth 1 has only 2·modulus² expressions: all of them stay available to training
        iid_depths = (max(cfg.train_depths[0], 2), cfg.train_depths[1])
        if iid_depths[0] > iid_depths[1]:
            iid_depths = cfg.train_depths
        iid = self._sample(rng, iid_depths, cfg.iid_valid_size, seen, distinct=True)
        if cfg.structure == "thesis_code" and cfg.train_depths[0] == 1 < cfg.train_depths[1]:
            # the thesis code: every depth-1 expression once, then quotas of depths 2 and up
            single = [(f"({a}{op}{b})", apply_op(op, a, b, cfg.modulus), 1)
                      for op in "+*" for a in range(cfg.modulus) for b in range(cfg.modulus)]
            rest = self._sample(rng, (2, cfg.train_depths[1]), max(cfg.train_size - len(single), 0),
                                seen, distinct=True)
            train = single + rest
        else:
            train = self._sample(rng, cfg.train_depths, cfg.train_size, seen,
                                 distinct=cfg.structure == "thesis_code")
        splits = {"train": train, "iid_valid": iid}
        for name, depths, size in (("ood_valid", cfg.ood_valid_depths, cfg.ood_valid_size),
                                   ("ood_test", cfg.test_depths, cfg.test_size)):
            splits[name] = self._sample(rng, depths, size, set(), distinct=True, p_subtree=eval_p)
        return vocab, {k: self._encode(vocab, v) for k, v in splits.items()}

    def _sample(self, rng, depths, size, seen: set[str], distinct: bool,
                p_subtree: float | None = None):
        """Balanced over depths. ``distinct``: no repeats, recorded in ``seen``; otherwise
        expressions in ``seen`` (held out) are skipped."""
        cfg = self.config
        p = cfg.subtree_probability if p_subtree is None else p_subtree
        levels = list(range(depths[0], depths[1] + 1))
        quota = {depth: size // len(levels) + (i < size % len(levels))
                 for i, depth in enumerate(levels)}
        # thesis_code: one draw covers the whole range and the quotas filter; deep_path:
        # each depth is drawn on its own
        if cfg.structure == "thesis_code":
            draws = [(levels, lambda: thesis_code_draw(depths[0], depths[1], rng, p,
                                                       cfg.modulus), 200 * size + 1000)]
        else:
            draws = [([depth], lambda depth=depth: generate(
                depth, rng, p, deep_right=cfg.deep_operand == "right", modulus=cfg.modulus),
                50 * quota[depth] + 1000) for depth in levels]
        examples = []
        for wanted, draw, max_tries in draws:
            tries = 0
            while any(quota[depth] for depth in wanted) and tries < max_tries:
                tries += 1
                text, value, depth = draw()
                if not quota[depth] or len(text) > cfg.max_tokens or text in seen:
                    continue
                if distinct:
                    seen.add(text)
                examples.append((text, value, depth))
                quota[depth] -= 1
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

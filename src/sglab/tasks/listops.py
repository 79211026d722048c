"""ListOps with dependency-depth control (thesis Sec. 5.2.3, appendix D.4.3).

Prefix expressions over the digits 0-9 with the operators MIN, MAX, MED (median;
for an even count the floor of the mean of the two middle values) and SM (sum
modulo 10), e.g. ``[MED 4 8 5 [MAX 8 4 9] ]`` -> 6. Tokens: ``[MIN [MAX [MED [SM ]``
and the digits.

The **dependency depth** prunes every branch that no operator selects -- MIN and
MAX select one argument holding the result, MED the one or two middle ones, SM all
of them; among equal values the shallowest argument is taken -- and measures the
depth of what remains. A sample of dependency depth K therefore really needs K
levels of computation. Samples are built top-down with one argument of depth K-1
that must be selected; splits are balanced over dependency depth: train 1-5,
``ood_valid`` 6, ``ood_test`` 7-8.

``structure="thesis_code"`` draws the trees as the thesis code does instead
(``dataset/listops.py``, ``get_one``): a random tree (each argument a list with
probability ``sublist_probability``) as deep as the split's top, wrapped as a non-last
argument of new lists until it is nested deep enough, then filed by dependency depth
into equal quotas. Its trees are bushy: unselected sub-lists are as deep as the rest.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal, NamedTuple

import numpy as np
from pydantic import Field, model_validator

from sglab import registry
from sglab.errors import SglabError
from sglab.tasks.base import (
    BEGIN,
    END,
    DepthSplitsConfig,
    SequenceClassificationTask,
    Vocabulary,
    encode_examples,
)

OPERATORS = ("MIN", "MAX", "MED", "SM")

Tree = int | tuple[str, tuple["Tree", ...]]  # hashable, so values are cached


class ListOpsConfig(DepthSplitsConfig):
    name: Literal["listops"] = "listops"
    min_arguments: int = Field(2, ge=1)
    max_arguments: int = Field(5, ge=1)
    sublist_probability: float = Field(0.3, ge=0, le=1, description="Chance an extra argument is a list.")
    structure: Literal["chain", "thesis_code"] = Field(
        "chain", description="chain: one selected argument per level with small side lists; "
                             "thesis_code: the thesis code's random trees, filed by dependency "
                             "depth")
    operators: tuple[Literal["MIN", "MAX", "MED", "SM"], ...] = Field(
        OPERATORS, min_length=1, description="Operators drawn (thesis: all four); a CPU proxy "
                                             "may leave some out. Only these enter the vocabulary.")

    @model_validator(mode="after")
    def _check(self):
        if self.min_arguments > self.max_arguments:
            raise ValueError("min_arguments must not exceed max_arguments")
        if len(set(self.operators)) != len(self.operators):
            raise ValueError(f"operators {self.operators} repeat one; name each at most once")
        return self


def apply_operator(op: str, values: list[int]) -> tuple[int, list[int] | None]:
    """(result, the argument values that hold it) of ``[op *values]``; None for SM, which
    needs every argument. MED of an even count: the floor of the mean of the two middle
    values, both needed."""
    values = sorted(values)
    if op == "SM":
        return sum(values) % 10, None
    if op == "MIN":
        return values[0], [values[0]]
    if op == "MAX":
        return values[-1], [values[-1]]
    n = len(values)
    wanted = [values[n // 2]] if n % 2 else [values[n // 2 - 1], values[n // 2]]
    return sum(wanted) // len(wanted), wanted


def holders(values: list[int], depths: list[int], wanted: list[int]) -> list[int]:
    """Indices of the arguments holding the ``wanted`` values, the shallowest among equals."""
    pool, chosen = sorted(range(len(values)), key=depths.__getitem__), []
    for v in wanted:
        pick = next(i for i in pool if values[i] == v)
        pool.remove(pick)
        chosen.append(pick)
    return chosen


@lru_cache(maxsize=1 << 16)
def value(tree: Tree) -> int:
    if isinstance(tree, int):
        return tree
    op, args = tree
    return apply_operator(op, [value(a) for a in args])[0]


def selected_arguments(tree: Tree) -> list[Tree]:
    """The arguments an operator needs: its result's holder(s), shallowest among equals."""
    op, args = tree
    values = [value(a) for a in args]
    wanted = apply_operator(op, values)[1]
    if wanted is None:
        return list(args)
    return [args[i] for i in holders(values, [dependency_depth(a) for a in args], wanted)]


@lru_cache(maxsize=1 << 16)
def dependency_depth(tree: Tree) -> int:
    """Depth after pruning unselected branches (a digit has depth 0)."""
    if isinstance(tree, int):
        return 0
    return 1 + max(dependency_depth(a) for a in selected_arguments(tree))


class Drawn(NamedTuple):
    """A tree with what the samplers file it by, computed bottom-up."""

    tree: Tree
    value: int
    dependency: int  # dependency_depth(tree)
    n_tokens: int  # len(tokens(tree))
    nesting: int  # nesting_depth(tree)

    @staticmethod
    def digit(digit: int) -> Drawn:
        return Drawn(digit, digit, 0, 1, 0)

    @staticmethod
    def combine(op: str, args: list[Drawn]) -> Drawn:
        """The list ``[op *args]``; its selected arguments as ``selected_arguments`` picks
        them (the holders of the result, shallowest among equal values)."""
        values = [a.value for a in args]
        result, wanted = apply_operator(op, values)
        needed = (args if wanted is None else
                  [args[i] for i in holders(values, [a.dependency for a in args], wanted)])
        return Drawn((op, tuple(a.tree for a in args)), result,
                     1 + max(a.dependency for a in needed),
                     2 + sum(a.n_tokens for a in args), 1 + max(a.nesting for a in args))


def nesting_depth(tree: Tree) -> int:
    if isinstance(tree, int):
        return 0
    return 1 + max(nesting_depth(a) for a in tree[1])


def tokens(tree: Tree) -> list[str]:
    if isinstance(tree, int):
        return [str(tree)]
    op, args = tree
    return [f"[{op}", *(t for a in args for t in tokens(a)), "]"]


class ListOpsTask(SequenceClassificationTask):
    config: ListOpsConfig
    eval_splits = ["iid_valid", "ood_valid", "ood_test"]

    def generate(self, depth: int, rng: np.random.Generator, budget: int) -> Drawn | None:
        """A tree of dependency depth exactly ``depth`` with at most ``budget`` tokens, or None.

        One argument is a tree of depth ``depth - 1``; the operator and the other arguments
        (digits, or with probability ``sublist_probability`` small lists of depth 1-2) are
        redrawn until that argument is selected. Token count and dependency depth come
        bottom-up with each tree (:class:`Drawn`), not recomputed from the whole tree.
        """
        cfg = self.config
        if depth == 0:
            return Drawn.digit(int(rng.integers(10)))
        deep = self.generate(depth - 1, rng, budget - 3)
        if deep is None:
            return None
        for _ in range(30):
            n_args = int(rng.integers(cfg.min_arguments, cfg.max_arguments + 1))
            op = cfg.operators[int(rng.integers(len(cfg.operators)))]
            args = [self.generate(int(rng.integers(1, min(depth - 1, 2) + 1)), rng, 12)
                    if depth > 1 and rng.random() < cfg.sublist_probability
                    else Drawn.digit(int(rng.integers(10))) for _ in range(n_args - 1)]
            if any(a is None for a in args):
                continue
            args.insert(int(rng.integers(n_args)), deep)
            drawn = Drawn.combine(op, args)
            if drawn.n_tokens <= budget and drawn.dependency == depth:
                return drawn
        return None

    def thesis_code_draw(self, depths: tuple[int, int], rng: np.random.Generator) -> Drawn:
        """One draw of the thesis code's sampler for a split of dependency depths ``depths``
        (in operations; the code counts a digit as depth 1, so its range is one higher): a
        random tree up to the top depth, wrapped while too shallow as an argument (never the
        last) of a new list whose other arguments are random trees. The tree comes with its
        value, dependency depth, token count and nesting depth, computed as it is built."""
        cfg = self.config

        def arguments(most: int, levels: int) -> list[Drawn]:
            count = int(rng.integers(cfg.min_arguments, max(most, cfg.min_arguments) + 1))
            return [subtree(levels) for _ in range(count)]

        def subtree(levels: int) -> Drawn:
            if levels == 1 or rng.random() > cfg.sublist_probability:
                return Drawn.digit(int(rng.integers(10)))
            return node(arguments(cfg.max_arguments, levels - 1))

        def node(args: list[Drawn]) -> Drawn:
            return Drawn.combine(cfg.operators[int(rng.integers(len(cfg.operators)))], args)

        drawn = subtree(depths[1] + 1)
        while drawn.nesting < depths[0]:
            args = arguments(cfg.max_arguments - 1, depths[1])
            args.insert(int(rng.integers(len(args))), drawn)
            drawn = node(args)
        return drawn

    def build(self):
        cfg = self.config
        rng = np.random.default_rng(cfg.data_seed)
        vocab = Vocabulary([BEGIN, END, *(f"[{op}" for op in cfg.operators), "]", *map(str, range(10))])
        seen: set[str] = set()
        splits = {"iid_valid": self._sample(rng, cfg.train_depths, cfg.iid_valid_size, seen, True),
                  "train": self._sample(rng, cfg.train_depths, cfg.train_size, seen, False)}
        for name, depths, size in (("ood_valid", cfg.ood_valid_depths, cfg.ood_valid_size),
                                   ("ood_test", cfg.test_depths, cfg.test_size)):
            splits[name] = self._sample(rng, depths, size, set(), True)
        order = ["train", "iid_valid", "ood_valid", "ood_test"]
        return vocab, {k: self._encode(vocab, splits[k]) for k in order}

    def _sample(self, rng, depths, size, seen: set[str], distinct: bool):
        """Balanced over dependency depth. ``chain``: each depth drawn on its own;
        ``thesis_code``: draws over the whole range, each filed under its dependency depth
        until every quota is full (the thesis code's rejection sampler). ``distinct``: no
        repeats, recorded in ``seen``; otherwise expressions in ``seen`` are skipped."""
        cfg = self.config
        levels = list(range(depths[0], depths[1] + 1))
        quota = {depth: size // len(levels) + (i < size % len(levels))
                 for i, depth in enumerate(levels)}

        def thesis_code() -> tuple[Tree, int] | None:
            drawn = self.thesis_code_draw(depths, rng)
            return None if drawn.n_tokens > cfg.max_tokens else (drawn.tree, drawn.dependency)

        def chain(depth: int) -> tuple[Tree, int] | None:
            drawn = self.generate(depth, rng, cfg.max_tokens)
            return None if drawn is None else (drawn.tree, depth)

        draws = ([(levels, thesis_code, 1000 * size + 10_000)] if cfg.structure == "thesis_code"
                 else [([depth], lambda depth=depth: chain(depth), None) for depth in levels])
        examples = []
        for wanted, draw, max_tries in draws:
            tries = 0
            while any(quota[depth] for depth in wanted):
                tries += 1
                if max_tries is not None and tries > max_tries:
                    short = {d: q for d, q in quota.items() if q}
                    raise SglabError(
                        f"listops (structure {cfg.structure}): {max_tries} draws left depth "
                        f"quotas unfilled ({short} examples missing); raise task.max_tokens, "
                        "lower the depths or the split size")
                found = draw()
                if found is None or not quota.get(found[1]):
                    continue
                tree, depth = found
                text = " ".join(tokens(tree))
                if text in seen:
                    continue
                if distinct:
                    seen.add(text)
                examples.append((tree, depth))
                quota[depth] -= 1
        return examples

    def _encode(self, vocab, examples):
        framed = lambda t: [BEGIN, *t, END] if self.config.boundary_tokens else t
        return encode_examples(vocab, [framed(tokens(t)) for t, _ in examples],
                               [str(value(t)) for t, _ in examples],
                               {"depth": [d for _, d in examples]})


@registry.register("task", "listops", ListOpsConfig,
                   "ListOps with dependency-depth control (NDR, thesis Sec. 5.2.3)")
def make_listops(config: ListOpsConfig) -> ListOpsTask:
    return ListOpsTask(config)

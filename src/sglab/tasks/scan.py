"""SCAN (Lake & Baroni 2018), generated from its grammar and interpretation function.

Grammar (every command it generates; 20,910 in total)::

    C -> S and S | S after S | S
    S -> V twice | V thrice | V
    V -> D opposite DIR | D around DIR | D | U          (D's verb: U or "turn")
    D -> U DIR | turn DIR          DIR -> left | right
    U -> walk | look | run | jump

Interpretation: ``[walk] = I_WALK`` (likewise look, run, jump), ``[turn left] =
I_TURN_LEFT``, ``[u left] = I_TURN_LEFT [u]``, ``[turn opposite left] = I_TURN_LEFT x2``,
``[u opposite left] = I_TURN_LEFT I_TURN_LEFT [u]``, ``[turn around left] =
I_TURN_LEFT x4``, ``[u around left] = (I_TURN_LEFT [u]) x4`` (right analogously),
``[x twice] = [x][x]``, ``[x thrice] = [x][x][x]``, ``[x1 and x2] = [x1][x2]``,
``[x1 after x2] = [x2][x1]``.

Splits (how each is built):

* ``simple``: a random 80/20 split of all commands (16,728 / 4,182), seeded by
  ``data_seed``. Only its distribution matches the published files (they are one
  particular random draw).
* ``length``: train on commands whose action sequence has at most 22 actions (16,990),
  test on the rest (3,920); identical to the published split as a set.
* ``addprim_jump``: test = every command containing ``jump`` except the bare command
  ``jump`` (7,706); train = every command without ``jump`` (13,203) plus the bare
  ``jump`` repeated until it makes up 10% of the training rows (1,467 copies, 14,670
  rows), as in the published files.
* ``addprim_turn_left``: likewise for ``turn left`` (test 1,208; train 19,701 + 2,189
  copies = 21,890 rows).
* ``cutoff_L`` (thesis Sec. 4.2.1, after Newman et al. 2020): commands with at most L
  actions form the pool, those with more form the test set (OOD); 10% of the pool
  (rounded down, seeded by ``data_seed``) is held out as the IID validation set
  ``iid_valid``. Cutoff 26 gives 16,458 / 1,828 / 2,624 (thesis Table C.7); cutoff 22
  reproduces the ``length`` split's test set.

The published line format is ``IN: <command> OUT: <actions>`` (:func:`format_lines`).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from sglab import registry
from sglab.errors import SglabError
from sglab.tasks.seq2seq import Seq2SeqTask, Seq2SeqTaskConfig

PRIMITIVES = ("walk", "look", "run", "jump")
DIRECTIONS = ("left", "right")
ACTIONS = ("I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT")
INPUT_WORDS = ("walk", "look", "run", "jump", "turn", "left", "right", "opposite", "around",
               "twice", "thrice", "and", "after")
FIXED_SPLITS = ("simple", "length", "addprim_jump", "addprim_turn_left")
THESIS_CUTOFFS = (22, 24, 25, 26, 27, 28, 30, 32, 33, 36, 40)
LENGTH_SPLIT_MAX_ACTIONS = 22
_CUTOFF = re.compile(r"cutoff_(\d+)")


def _turn(direction: str) -> str:
    return "I_TURN_LEFT" if direction == "left" else "I_TURN_RIGHT"


def interpret(command: str) -> list[str]:
    """The action sequence of a SCAN command (Lake & Baroni's interpretation function)."""
    words = command.split()
    if not words:
        raise SglabError("empty SCAN command")
    for conjunction in ("and", "after"):  # C -> S and S | S after S
        if conjunction in words:
            i = words.index(conjunction)
            left, right = interpret(" ".join(words[:i])), interpret(" ".join(words[i + 1:]))
            return left + right if conjunction == "and" else right + left
    repeat = {"twice": 2, "thrice": 3}.get(words[-1])  # S -> V twice | V thrice
    if repeat:
        return interpret(" ".join(words[:-1])) * repeat
    return _interpret_verb_phrase(words, command)


def _interpret_verb_phrase(words: list[str], command: str) -> list[str]:
    verb, rest = words[0], words[1:]
    if verb not in (*PRIMITIVES, "turn"):
        raise SglabError(f"{command!r} is not a SCAN command (unknown verb {verb!r})")
    action = [] if verb == "turn" else [f"I_{verb.upper()}"]
    if not rest:
        if verb == "turn":
            raise SglabError(f"{command!r} is not a SCAN command ('turn' needs a direction)")
        return action
    if rest[-1] not in DIRECTIONS or len(rest) > 2 or (len(rest) == 2 and rest[0] not in
                                                        ("opposite", "around")):
        raise SglabError(f"{command!r} is not a SCAN command")
    turn = [_turn(rest[-1])]
    if len(rest) == 1:  # [u left] = TURN [u]
        return turn + action
    if rest[0] == "opposite":  # [u opposite left] = TURN TURN [u]
        return turn * 2 + action
    return (turn + action) * 4  # [u around left] = (TURN [u]) x4


@cache
def all_commands() -> tuple[str, ...]:
    """Every command of the grammar, in a fixed order (20,910)."""
    verb_phrases = list(PRIMITIVES)
    for verb in (*PRIMITIVES, "turn"):
        for direction in DIRECTIONS:
            verb_phrases += [f"{verb} {direction}", f"{verb} opposite {direction}",
                             f"{verb} around {direction}"]
    simple = [f"{v}{suffix}" for v in verb_phrases for suffix in ("", " twice", " thrice")]
    compound = [f"{a} {conj} {b}" for conj in ("and", "after") for a in simple for b in simple]
    return tuple(simple + compound)


Example = tuple[str, str]  # (command, space-separated actions)


@cache
def all_examples() -> tuple[Example, ...]:
    return tuple((c, " ".join(interpret(c))) for c in all_commands())


def _n_actions(example: Example) -> int:
    return len(example[1].split())


def _add_primitive(examples: tuple[Example, ...], primitive: str) -> dict[str, list[Example]]:
    """Train: commands without ``primitive`` + the bare primitive repeated to 10% of rows."""
    bare = next(e for e in examples if e[0] == primitive)
    contains = re.compile(rf"\b{primitive}\b")
    test = [e for e in examples if contains.search(e[0]) and e[0] != primitive]
    base = [e for e in examples if not contains.search(e[0])]
    copies = round(len(base) / 9)  # copies / (len(base) + copies) = 10%
    return {"train": base + [bare] * copies, "ood_test": test}


def build_split(name: str, seed: int = 0) -> dict[str, list[Example]]:
    """The examples of a named split: ``train``, the test split (``iid_test`` for the random
    ``simple`` split, else ``ood_test``) and (cutoff splits) ``iid_valid``."""
    examples = all_examples()
    rng = np.random.default_rng(seed)
    if name == "simple":
        order = rng.permutation(len(examples))
        n_train = int(0.8 * len(examples))
        return {"train": [examples[i] for i in order[:n_train]],
                "iid_test": [examples[i] for i in order[n_train:]]}
    if name == "length":
        return {"train": [e for e in examples if _n_actions(e) <= LENGTH_SPLIT_MAX_ACTIONS],
                "ood_test": [e for e in examples if _n_actions(e) > LENGTH_SPLIT_MAX_ACTIONS]}
    if name == "addprim_jump":
        return _add_primitive(examples, "jump")
    if name == "addprim_turn_left":
        return _add_primitive(examples, "turn left")
    cutoff = parse_cutoff(name)
    pool = [e for e in examples if _n_actions(e) <= cutoff]
    order = rng.permutation(len(pool))
    n_valid = int(0.1 * len(pool))
    return {"train": [pool[i] for i in sorted(order[n_valid:])],
            "iid_valid": [pool[i] for i in sorted(order[:n_valid])],
            "ood_test": [e for e in examples if _n_actions(e) > cutoff]}


def parse_cutoff(name: str) -> int:
    match = _CUTOFF.fullmatch(name)
    longest = max(_n_actions(e) for e in all_examples())
    if not match or not 1 <= int(match.group(1)) < longest:
        raise SglabError(
            f"unknown SCAN split {name!r}; use one of {', '.join(FIXED_SPLITS)} or cutoff_L "
            f"with 1 <= L < {longest} (the thesis uses L in {list(THESIS_CUTOFFS)})"
        )
    return int(match.group(1))


def format_lines(examples: list[Example]) -> str:
    """The published file format: one ``IN: <command> OUT: <actions>`` line per example."""
    return "".join(f"IN: {c} OUT: {a}\n" for c, a in examples)


class ScanConfig(Seq2SeqTaskConfig):
    name: Literal["scan"] = "scan"
    split: str = Field("cutoff_26", description="simple | length | addprim_jump | "
                                                "addprim_turn_left | cutoff_L (e.g. cutoff_26)")

    @field_validator("split")
    @classmethod
    def _check_split(cls, value: str) -> str:
        if value not in FIXED_SPLITS:
            try:
                parse_cutoff(value)
            except SglabError as exc:
                raise ValueError(str(exc)) from None
        return value

    def evaluation_splits(self) -> list[str]:
        if self.split == "simple":
            return ["iid_test"]
        return ["iid_valid", "ood_test"] if self.split.startswith("cutoff_") else ["ood_test"]


class ScanTask(Seq2SeqTask):
    config: ScanConfig

    def build_examples(self) -> dict[str, list[Example]]:
        return build_split(self.config.split, self.config.data_seed)

    def symbols(self) -> list[str]:
        return [*INPUT_WORDS, *ACTIONS]

    @property
    def eval_splits(self) -> list[str]:
        return [s for s in ("iid_valid", "iid_test", "ood_test") if s in self.splits]


@registry.register("task", "scan", ScanConfig, "SCAN commands -> actions (Lake & Baroni), "
                                               "standard and length-cutoff splits")
def make_scan(config: ScanConfig) -> ScanTask:
    return ScanTask(config)

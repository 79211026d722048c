"""Six modules of the Mathematics Dataset (Saxton et al. 2019), generated in sglab.

Character-level question -> answer pairs, e.g. ``What is -5 - 110911?`` -> ``-110916``
(``arithmetic__add_or_sub``), ``What is the hundreds digit of 17105927?`` -> ``9``
(``numbers__place_value``), ``Solve 0 = 4*b + 3*b + 21 for b.`` -> ``-3``
(``algebra__linear_1d``), ``Differentiate 2*j**3 - 5*j + 7 wrt j.`` -> ``6*j**2 - 5``
(``calculus__differentiate``), ``Sort -2, 0.4, 1/3 in decreasing order.`` -> ``0.4, 1/3, -2``
(``comparison__sort``) and ``Collect the terms in -2*w + 7*w**2 + 5*w.`` -> ``7*w**2 + 3*w``
(``polynomials__collect``). The published generator does not install beside current
torch, so these are re-implementations: add_or_sub and place_value with the same question
templates (a representative subset), same answer rules, difficulty by number size; the
other four (:mod:`sglab.tasks.mathematics_modules`, their pure variants only: no
``Let x = ...`` compositions) with the generator's templates and rules for spending the
entropy. The data are statistically similar to the released files, not identical to them.

Difficulty settings (``entropy`` = decimal digits of randomness in a question):

==========  ==============================  ====================  ===============================
split       arithmetic__add_or_sub          numbers__place_value  linear_1d, differentiate, sort,
                                                                  collect
==========  ==============================  ====================  ===============================
train       entropy ~ U[3, 10]              2-9 digit integers    entropy ~ U[3, 10]
            (easy..hard)
iid_valid   interpolate: entropy ~ U[8, 10] interpolate: 2-9      interpolate: entropy 8
                                            digits
ood_test    extrapolate: entropy ~ U[12,    extrapolate: 10-12    entropy 12; sort: the
            14] (the ``*_big`` modules)     digits (new place     generator's ``sort_more`` (9-10
                                            names: billions and   numbers, entropy 12); the
                                            up)                   generator has no extrapolation
                                                                  for linear_1d, differentiate
                                                                  and collect, so 12 is its
                                                                  extrapolation entropy of
                                                                  algebra.py and comparison.py
==========  ==============================  ====================  ===============================

As the generator, the four entropy modules drop and draw again questions over 160 characters
and answers over 30 (add_or_sub never reaches them).

``number_sampling="generator"`` draws add_or_sub as the published generator's
``modules/arithmetic.py`` (entropy U[4, 16] in training and thirds [4, 8), [8, 12), [12, 16]
as its levels, 12 to interpolate, U[16, 20] to extrapolate as ``add_or_sub_big``; the entropy
split at random between two integers or decimals; its templates), and place_value's numbers
as the published generator does
(``modules/numbers.py``): an integer uniform in [1, 10^e + 1] for an entropy e, with e ~ U[3, 10]
in training (so up to 10 digits, the billions place included), e = 8 for interpolate (about 90%
8-digit numbers) and e = 12 for extrapolate (about 90% 12-digit numbers: the ten and hundred
billions places are new).

Difficulty levels (``difficulty_splits``, thesis App. B.3.7: the net trains on every level,
a weight mask on ``easy`` alone, both are tested on ``hard``): the training range is cut
into thirds, as the published generator cuts its entropy range into the easy, medium and
hard training files (entropy [3, 5.33), [5.33, 7.67), [7.67, 10]; place_value:
2-4, 5-7, 8-9 digits, or the entropy thirds with ``number_sampling="generator"``).
``train_difficulty`` trains on one level; ``easy_test``,
``medium_test`` and ``hard_test`` hold ``eval_size`` questions of each level, drawn from
a stream of their own so the other splits stay as they are without them.

As in the thesis code, questions that occur in an evaluation split are removed from
training (deduplication by question text). In add_or_sub the entropy is split at
random between the two operands; each operand is an integer or, with probability
1/2, a decimal with 1-3 decimal places (the operand keeps at least one digit before
the point), and negative with probability 1/2. Answers are exact decimals without
trailing zeros.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Literal, get_args

import numpy as np
import torch
from pydantic import Field

from sglab import registry
from sglab.tasks.mathematics_modules import (
    ADD_SUB_ADD_TEMPLATES,
    ADD_SUB_DISTANCE_TEMPLATES,
    ADD_SUB_SUB_TEMPLATES,
    COLLECT_TEMPLATE,
    DIFFERENTIATE_TEMPLATES,
    DIRECTIONS,
    LETTERS,
    LINEAR_1D_TEMPLATE,
    ORDINALS,
    SORT_TEMPLATES,
    collect_example,
    differentiate_example,
    generator_add_or_sub_example,
    linear_1d_example,
    sort_example,
    sort_more_example,
)
from sglab.tasks.seq2seq import Seq2SeqTask, Seq2SeqTaskConfig

ADD_TEMPLATES = ("What is {p} + {q}?", "Add {p} and {q}.", "Sum {p} and {q}.",
                 "Total of {p} and {q}.", "Put together {p} and {q}.", "{p} + {q}",
                 "Work out {p} + {q}.", "Calculate {p} + {q}.", "Add together {p} and {q}.",
                 "What is {p} plus {q}?", "In base 10, what is {p} + {q}?")
SUB_TEMPLATES = ("What is {p} - {q}?", "Calculate {p} - {q}.", "Work out {p} - {q}.",
                 "{p} - {q}", "What is {p} minus {q}?", "Subtract {q} from {p}.",
                 "What is {p} take away {q}?", "What is the difference between {p} and {q}?",
                 "In base 10, what is {p} - {q}?")
PLACE_NAMES = ("units", "tens", "hundreds", "thousands", "ten thousands", "hundred thousands",
               "millions", "ten millions", "hundred millions", "billions", "ten billions",
               "hundred billions")
# the published generator's _ENTROPY_TRAIN, _ENTROPY_INTERPOLATE and _ENTROPY_EXTRAPOLATE
# (modules/numbers.py, algebra.py, comparison.py; calculus.py and polynomials.py define no
# extrapolation, so differentiate and collect take the others' 12)
GENERATOR_ENTROPY = {"train": (3, 10), "iid_valid": (8, 8), "ood_test": (12, 12)}
# (low, high) entropy, or digit counts for place_value
DIFFICULTY = {
    "arithmetic__add_or_sub": {"train": (3, 10), "iid_valid": (8, 10), "ood_test": (12, 14)},
    "numbers__place_value": {"train": (2, 9), "iid_valid": (2, 9), "ood_test": (10, 12)},
    "algebra__linear_1d": GENERATOR_ENTROPY,
    "calculus__differentiate": GENERATOR_ENTROPY,
    "comparison__sort": GENERATOR_ENTROPY,
    "polynomials__collect": GENERATOR_ENTROPY,
}
Module = Literal["arithmetic__add_or_sub", "numbers__place_value", "algebra__linear_1d",
                 "calculus__differentiate", "comparison__sort", "polynomials__collect"]
MODULES = get_args(Module)

LEVELS = ("easy", "medium", "hard")
ENTROPY_THIRDS = {"easy": (3, 3 + 7 / 3), "medium": (3 + 7 / 3, 3 + 14 / 3), "hard": (3 + 14 / 3, 10)}
# thirds of the training range: entropy, or inclusive digit counts for place_value
DIFFICULTY_LEVELS = {module: ENTROPY_THIRDS for module in MODULES}
DIFFICULTY_LEVELS["numbers__place_value"] = {"easy": (2, 4), "medium": (5, 7), "hard": (8, 9)}
# place_value's entropy ranges with number_sampling="generator" (its training files are the
# thirds of the training range, ENTROPY_THIRDS)
PLACE_VALUE_ENTROPY = GENERATOR_ENTROPY
# add_or_sub's with number_sampling="generator": modules/arithmetic.py's _ADD_SUB_ENTROPY_TRAIN,
# _INTERPOLATE and _EXTRAPOLATE (add_or_sub_big), and the thirds of its training range
ADD_SUB_ENTROPY = {"train": (4, 16), "iid_valid": (12, 12), "ood_test": (16, 20)}
ADD_SUB_THIRDS = {"easy": (4, 8), "medium": (8, 12), "hard": (12, 16)}
# the generator drops longer questions and answers (generate_settings.py), and draws again
MAX_QUESTION_LENGTH, MAX_ANSWER_LENGTH = 160, 30


def format_decimal(value: Decimal) -> str:
    """Plain notation without trailing zeros or a negative zero: 1.50 -> 1.5, -0 -> 0."""
    text = format(value.normalize(), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def random_operand(rng: np.random.Generator, entropy: float) -> Decimal:
    """A signed integer or decimal with about ``entropy`` random decimal digits."""
    digits = max(1, int(round(entropy)))
    magnitude = int(rng.integers(0, 10 ** digits))
    places = int(rng.integers(1, min(3, digits - 1) + 1)) if digits > 1 and rng.random() < 0.5 else 0
    value = Decimal(magnitude).scaleb(-places)
    return -value if rng.random() < 0.5 else value


def add_or_sub_example(rng: np.random.Generator, entropy: float) -> tuple[str, str]:
    share = rng.uniform(0.3, 0.7)
    p, q = random_operand(rng, entropy * share), random_operand(rng, entropy * (1 - share))
    if rng.random() < 0.5:
        template, answer = ADD_TEMPLATES[rng.integers(len(ADD_TEMPLATES))], p + q
    else:
        template, answer = SUB_TEMPLATES[rng.integers(len(SUB_TEMPLATES))], p - q
    question = template.format(p=format_decimal(p), q=format_decimal(q))
    return question, format_decimal(answer)


def place_value_question(number: str, position: int) -> tuple[str, str]:
    """The question for the digit of ``number`` worth 10**position, and its answer."""
    if not number.isdigit() or not 0 <= position < min(len(number), len(PLACE_NAMES)):
        raise ValueError(f"no place {position} in {number!r}")
    question = f"What is the {PLACE_NAMES[position]} digit of {number}?"
    return question, number[len(number) - 1 - position]


_PLACE_VALUE_QUESTION = re.compile(r"What is the ([a-z ]+) digit of (\d+)\?")


def parse_place_value(question: str) -> tuple[int, str]:
    """(position, number) of a place-value question; position 0 is the units digit."""
    match = _PLACE_VALUE_QUESTION.fullmatch(question)
    if match is None or match.group(1) not in PLACE_NAMES:
        raise ValueError(f"not a place-value question: {question!r}")
    return PLACE_NAMES.index(match.group(1)), match.group(2)


def place_value_example(rng: np.random.Generator, digits: int) -> tuple[str, str]:
    leading = str(int(rng.integers(1, 10)))
    rest = "".join(str(int(d)) for d in rng.integers(0, 10, size=digits - 1))
    return place_value_question_about(rng, leading + rest)


def generator_integer(rng: np.random.Generator, entropy: float) -> int:
    """A positive integer as the published generator draws one with ``entropy`` (and
    ``min_abs=1``): uniform in [1, ceil(10**entropy + 1)]."""
    return int(rng.integers(1, math.ceil(10.0 ** entropy + 1) + 1))


def place_value_question_about(rng: np.random.Generator, number: str) -> tuple[str, str]:
    position = int(rng.integers(len(number)))  # counted from the units digit, uniform
    return place_value_question(number, position)


NumberSampling = Literal["digits", "generator"]
Example = Callable[[np.random.Generator, float], tuple[str, str]]
# the modules whose difficulty is an entropy: module -> (rng, entropy) -> (question, answer)
ENTROPY_EXAMPLES: dict[str, Example] = {
    "arithmetic__add_or_sub": add_or_sub_example,
    "algebra__linear_1d": linear_1d_example,
    "calculus__differentiate": differentiate_example,
    "comparison__sort": sort_example,
    "polynomials__collect": collect_example,
}
# ood_test takes the generator's extrapolation module where it is more than a higher entropy
EXTRAPOLATE_EXAMPLES: dict[str, Example] = {"comparison__sort": sort_more_example}
# number_sampling="generator": modules that sglab otherwise draws its own way
GENERATOR_EXAMPLES: dict[str, Example] = {"arithmetic__add_or_sub": generator_add_or_sub_example}


def difficulty_tables(module: str, number_sampling: NumberSampling = "digits"
                      ) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]]:
    """(low, high) per split and per third of the training range (``easy``, ``medium``,
    ``hard``): entropy, or for place_value with ``digits`` the digit count."""
    if number_sampling == "generator":
        if module == "numbers__place_value":
            return PLACE_VALUE_ENTROPY, ENTROPY_THIRDS
        if module == "arithmetic__add_or_sub":
            return ADD_SUB_ENTROPY, ADD_SUB_THIRDS
    return DIFFICULTY[module], DIFFICULTY_LEVELS[module]


def generate(module: str, split: str, n: int, rng: np.random.Generator,
             number_sampling: NumberSampling = "digits") -> list[tuple[str, str]]:
    """``n`` examples of a module at a split's difficulty (duplicates possible)."""
    return generate_in(module, difficulty_tables(module, number_sampling)[0][split], n, rng,
                       number_sampling, extrapolate=split == "ood_test")


def generate_in(module: str, difficulty: tuple[float, float], n: int,
                rng: np.random.Generator, number_sampling: NumberSampling = "digits",
                extrapolate: bool = False) -> list[tuple[str, str]]:
    """``n`` examples with an entropy (or for place_value with ``digits`` a digit count) drawn
    uniformly from ``difficulty`` = (low, high); ``extrapolate``: the module's extrapolation
    variant where it has one (EXTRAPOLATE_EXAMPLES)."""
    low, high = difficulty
    if module in ENTROPY_EXAMPLES:
        example = ENTROPY_EXAMPLES[module]
        if number_sampling == "generator":
            example = GENERATOR_EXAMPLES.get(module, example)
        if extrapolate:
            example = EXTRAPOLATE_EXAMPLES.get(module, example)
        return [within_limits(example, rng, low, high) for _ in range(n)]
    if number_sampling == "generator":
        return [place_value_question_about(rng, str(generator_integer(rng, rng.uniform(low, high))))
                for _ in range(n)]
    return [place_value_example(rng, int(rng.integers(low, high + 1))) for _ in range(n)]


def within_limits(example: Example, rng: np.random.Generator, low: float, high: float
                  ) -> tuple[str, str]:
    """An example with entropy ~ U[low, high], drawn again (entropy too) while the question or
    answer is too long, as the generator's generate.py (add_or_sub's never are)."""
    while True:
        question, answer = example(rng, rng.uniform(low, high))
        if len(question) <= MAX_QUESTION_LENGTH and len(answer) <= MAX_ANSWER_LENGTH:
            return question, answer


FIRST_SYMBOLS = sorted(set("".join(ADD_TEMPLATES + SUB_TEMPLATES + PLACE_NAMES)
                          + "What is the digit of?0123456789-."))
_TEXT = "".join((LINEAR_1D_TEMPLATE, COLLECT_TEMPLATE, *SORT_TEMPLATES, *DIFFERENTIATE_TEMPLATES,
                 *ORDINALS, *DIRECTIONS[True], *DIRECTIONS[False], *ADD_SUB_ADD_TEMPLATES,
                 *ADD_SUB_SUB_TEMPLATES, *ADD_SUB_DISTANCE_TEMPLATES))
# templates without their {placeholders}, variable names, digits, signs and operators
ALL_SYMBOLS = sorted(set(FIRST_SYMBOLS) | set(re.sub(r"\{\w+\}", "", _TEXT)) | set(LETTERS)
                     | set("0123456789-+*/=., "))


class MathematicsConfig(Seq2SeqTaskConfig):
    name: Literal["mathematics"] = "mathematics"
    module: Module = "numbers__place_value"
    train_size: int = Field(100_000, ge=10, description="Training questions (before dedup).")
    eval_size: int = Field(1_000, ge=1, description="Questions per evaluation split.")
    train_difficulty: Literal["all", "easy", "medium", "hard"] = Field(
        "all", description="Train on every difficulty or on one third of the training range "
                           "(the published generator's easy / medium / hard training files).")
    difficulty_splits: bool = Field(
        False, description="Also evaluate on easy_test, medium_test and hard_test (eval_size "
                           "questions of each level, kept out of training).")
    number_sampling: NumberSampling = Field(
        "digits", description="How place_value and add_or_sub draw their numbers (the other "
                              "modules always draw as the published generator). digits: "
                              "sglab's own (place_value: a digit count uniform in 2-9, or 10-12 "
                              "to extrapolate; add_or_sub: entropy U[3, 10] shared 30-70% "
                              "between the operands); generator: as the published generator "
                              "(place_value: an integer uniform in [1, 10^e + 1], e ~ U[3, 10], "
                              "8 to interpolate, 12 to extrapolate; add_or_sub: entropy U[4, 16], "
                              "12, U[16, 20] split at random, integers or decimals, its "
                              "templates).")

    def evaluation_splits(self) -> list[str]:
        levels = [f"{level}_test" for level in LEVELS] if self.difficulty_splits else []
        return ["iid_valid", "ood_test", *levels]


class MathematicsTask(Seq2SeqTask):
    """Splits: ``train``, ``iid_valid`` (interpolate), ``ood_test`` (extrapolate), and with
    ``difficulty_splits`` ``easy_test``, ``medium_test``, ``hard_test``.

    place_value evaluations also log exact match per place, per number length and for
    places that training questions ask about vs new ones (:meth:`example_groups`)."""

    config: MathematicsConfig

    def build_examples(self) -> dict[str, list[tuple[str, str]]]:
        cfg = self.config
        rng = np.random.default_rng(cfg.data_seed)
        sampling = cfg.number_sampling
        splits, levels_of = difficulty_tables(cfg.module, sampling)
        held_out = {split: generate(cfg.module, split, cfg.eval_size, rng, sampling)
                    for split in ("iid_valid", "ood_test")}
        if cfg.difficulty_splits:
            levels = np.random.default_rng([cfg.data_seed, 1])
            held_out.update({f"{level}_test": generate_in(cfg.module, levels_of[level],
                                                          cfg.eval_size, levels, sampling)
                             for level in LEVELS})
        seen = {q for examples in held_out.values() for q, _ in examples}
        difficulty = (splits["train"] if cfg.train_difficulty == "all"
                      else levels_of[cfg.train_difficulty])
        train = [e for e in generate_in(cfg.module, difficulty, cfg.train_size, rng, sampling)
                 if e[0] not in seen]
        return {"train": train, **held_out}

    def example_groups(self, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
        """place_value: ``place`` (k: the digit worth 10**k), ``digits`` (length of the
        number) and ``place_in_train`` (1 if training questions ask for that place)."""
        if self.config.module != "numbers__place_value":
            return {}
        parsed = [parse_place_value(question) for question, _ in pairs]
        place = torch.tensor([position for position, _ in parsed])
        # the longest training number: the top digit count, or the top entropy's digits
        train_high = difficulty_tables(self.config.module, self.config.number_sampling)[0]["train"][1]
        trained_places = math.ceil(train_high)
        return {"place": place, "digits": torch.tensor([len(number) for _, number in parsed]),
                "place_in_train": (place < trained_places).long()}

    def symbols(self) -> list[str]:
        """Every character a question or answer can hold: place_value and add_or_sub drawn
        sglab's way keep their own vocabulary (so their runs stay as they were), the other
        modules and the generator's add_or_sub share one that covers all six."""
        module, sampling = self.config.module, self.config.number_sampling
        if module == "numbers__place_value" or (module == "arithmetic__add_or_sub"
                                                and sampling == "digits"):
            return FIRST_SYMBOLS
        return ALL_SYMBOLS

    def tokenize(self, text: str) -> list[str]:
        return list(text)

    def detokenize(self, tokens: list[str]) -> str:
        return "".join(tokens)


@registry.register("task", "mathematics", MathematicsConfig,
                   "Mathematics Dataset modules (Saxton et al.): add_or_sub, place_value, "
                   "linear_1d, differentiate, sort, collect")
def make_mathematics(config: MathematicsConfig) -> MathematicsTask:
    return MathematicsTask(config)

"""linear_1d, differentiate, sort and collect: answers checked with sympy, difficulty,
reproducibility, vocabulary and the task's splits."""

import re
from fractions import Fraction

import numpy as np
import pytest
import sympy

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.tasks import build_task
from sglab.tasks.mathematics import (
    ENTROPY_THIRDS,
    MAX_ANSWER_LENGTH,
    MAX_QUESTION_LENGTH,
    MODULES,
    MathematicsConfig,
    generate,
    generate_in,
)
from sglab.tasks.mathematics_modules import LETTERS, polynomial_text

NEW = ("algebra__linear_1d", "calculus__differentiate", "comparison__sort", "polynomials__collect")
SYMBOLS = {name: sympy.Symbol(name) for name in LETTERS}


def _parse(text: str) -> sympy.Expr:
    """A polynomial as sympy (Python syntax: ``3*x**2 - 5``; faster than sympy's parser)."""
    return sympy.sympify(eval(text, {"__builtins__": {}}, SYMBOLS))


def _examples(module: str, n: int = 100) -> dict[str, list[tuple[str, str]]]:
    """n examples of train, iid_valid and ood_test each (10 of sort's slow ood_test: the
    generator's length limit drops most sort_more questions)."""
    rng = np.random.default_rng(0)
    return {split: generate(module, split, 10 if split == "ood_test" and module == "comparison__sort"
                            else n, rng) for split in ("train", "iid_valid", "ood_test")}


def _all(module: str) -> list[tuple[str, str]]:
    return [e for examples in _examples(module).values() for e in examples]


def test_linear_1d_answer_solves_the_equation():
    for question, answer in _all("algebra__linear_1d"):
        equation, variable = re.fullmatch(r"Solve (.+ = .+) for ([a-z])\.", question).groups()
        left, right = (_parse(side) for side in equation.split(" = "))
        x, solution = SYMBOLS[variable], sympy.Integer(answer)
        difference = sympy.expand(left - right)  # a*x + b with a != 0: one solution
        assert difference.free_symbols == {x} and sympy.degree(difference, x) == 1, question
        assert left.subs(x, solution) == right.subs(x, solution), question


_DERIVATIVE = re.compile(r"(?:Find|What is) the (?:(first|second|third) )?derivative of (.+?)"
                         r"(?: wrt ([a-z]))?[.?]|Differentiate (.+?)(?: (?:with respect to|wrt) "
                         r"([a-z]))?\.")


def test_differentiate_answer_is_the_derivative_in_sympy_form():
    orders, many_variables = set(), 0
    for question, answer in _all("calculus__differentiate"):
        nth, expression, variable, expression_2, variable_2 = _DERIVATIVE.fullmatch(question).groups()
        expression, variable = expression or expression_2, variable or variable_2
        order = ("first", "second", "third").index(nth or "first") + 1
        polynomial = _parse(expression)
        if variable is None:  # left out only when there is one variable
            (x,) = polynomial.free_symbols
        else:
            x = SYMBOLS[variable]
        gens = sorted(polynomial.free_symbols | {x}, key=str)
        derivative = sympy.Poly(polynomial, *gens)
        for _ in range(order):
            derivative = derivative.diff(x)
        assert sympy.Poly(_parse(answer), *gens) == derivative, question
        # written as sympy writes them (term order, factors), so the printer matches sympy's
        assert (expression, answer) == (str(polynomial), str(_parse(answer)))
        orders.add(order)
        many_variables += len(polynomial.free_symbols) > 1
    assert orders == {1, 2, 3} and many_variables > 30


def test_sort_answer_is_the_numbers_in_the_asked_order():
    kinds, counts = set(), {}
    for split, examples in _examples("comparison__sort").items():
        for question, answer in examples:
            values, direction = re.fullmatch(r"(?:Sort|Put) (.+?)(?: in ([a-z]+) order)?\.",
                                             question).groups()
            numbers = values.split(", ")
            descending = direction in ("descending", "decreasing")
            assert direction in (None, "ascending", "increasing") or descending
            assert len(set(map(Fraction, numbers))) == len(numbers) >= 3  # distinct values
            assert answer.split(", ") == sorted(numbers, key=Fraction, reverse=descending), question
            kinds |= {"/" if "/" in x else "." if "." in x else "int" for x in numbers}
            counts.setdefault(split, []).append(len(numbers))
    assert kinds == {"/", ".", "int"}
    # comparison.py's sort_more: 9 or 10 numbers, one or two more than training's most (8);
    # the generator's 30-character answers keep only short lists (small integers)
    assert max(counts["train"] + counts["iid_valid"]) <= 8 < 9 <= min(counts["ood_test"])


def _terms(polynomial: str) -> int:
    return len(re.split(r" [-+] ", polynomial))


def test_collect_answer_equals_the_expression_with_one_term_per_power():
    for question, answer in _all("polynomials__collect"):
        (expression,) = re.fullmatch(r"Collect the terms in (.+)\.", question).groups()
        collected = _parse(answer)
        assert sympy.expand(_parse(expression) - collected) == 0, question
        assert answer == str(collected)  # sympy's form: highest power first
        assert _terms(answer) == len(sympy.Poly(collected).terms())  # one term per power
        assert _terms(expression) >= _terms(answer) + 2  # the generator writes 2 or more extra


def test_polynomial_text_matches_sympys_printing():
    rng = np.random.default_rng(3)
    for _ in range(200):
        names = [str(n) for n in rng.choice(list(LETTERS), int(rng.integers(1, 5)), replace=False)]
        coefficients = {tuple(int(p) for p in rng.integers(0, 4, len(names))):
                        int(rng.choice([-1, 1])) * int(rng.integers(1, 1000) if rng.random() < .7 else 1)
                        for _ in range(int(rng.integers(1, 7)))}
        expression = sympy.Add(*(c * sympy.Mul(*(SYMBOLS[n] ** p for n, p in zip(names, index)))
                                 for index, c in coefficients.items()))
        assert polynomial_text(coefficients, names) == str(expression)


@pytest.mark.parametrize("module", NEW)
def test_harder_thirds_give_longer_questions(module):
    rng = np.random.default_rng(4)
    easy, hard = (np.mean([len(q) for q, _ in generate_in(module, ENTROPY_THIRDS[level], 150, rng)])
                  for level in ("easy", "hard"))
    assert hard > easy + 3


@pytest.mark.parametrize("module", NEW)
def test_same_seed_same_data_and_length_limits(module):
    first, again, other = (generate(module, "train", 50, np.random.default_rng(seed))
                           for seed in (5, 5, 6))
    assert first == again and first != other
    assert all(len(q) <= MAX_QUESTION_LENGTH and len(a) <= MAX_ANSWER_LENGTH for q, a in first)


def test_vocabulary_covers_every_character():
    for module in MODULES:
        symbols = set(build_task(MathematicsConfig(module=module, train_size=10, eval_size=1))
                      .symbols())
        rng = np.random.default_rng(7)
        text = "".join(q + a for split, n in (("train", 1000), ("iid_valid", 500), ("ood_test", 500))
                       for q, a in generate(module, split, 5 if module == "comparison__sort"
                                            and split == "ood_test" else n, rng))
        levels = "".join(q + a for q, a in generate_in(module, ENTROPY_THIRDS["hard"], 200, rng))
        assert set(text + levels) <= symbols, module


@pytest.mark.parametrize("module", NEW)
def test_task_splits_are_filled_and_held_out_of_training(module):
    config = build_run_config({"task": {"name": "mathematics", "module": module,
                                        "train_size": 300, "eval_size": 5,
                                        "difficulty_splits": True},
                               "model": {"name": "seq2seq"}})
    task = build_task(config.task)
    assert task.eval_splits == ["iid_valid", "ood_test", "easy_test", "medium_test", "hard_test"]
    train = {q for q, _ in task.pairs_text("train")}
    assert len(train) > 200
    for split in task.eval_splits:
        pairs = task.pairs_text(split)
        assert len(pairs) == 5 and not train & {q for q, _ in pairs}


def test_unknown_module_is_refused_with_the_known_ones():
    with pytest.raises(SglabError, match="task.module.*algebra__linear_1d"):
        build_run_config({"task": {"name": "mathematics", "module": "algebra__linear_2d"}})

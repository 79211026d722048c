"""Mathematics generators: answers follow from the questions, difficulty, dedup."""

import re
from decimal import Decimal

import numpy as np
import pytest

from sglab.config import build_run_config
from sglab.tasks import build_task
from sglab.tasks.mathematics import PLACE_NAMES, format_decimal, generate

NUMBER = r"(-?\d+(?:\.\d+)?)"


def _solve_add_or_sub(question: str) -> Decimal:
    p, q = (Decimal(x) for x in re.findall(NUMBER, question.replace("base 10", "")))
    if question.startswith("Subtract"):
        q, p = p, q  # "Subtract {q} from {p}."
    subtract = any(w in question for w in (" - ", "minus", "take away", "difference",
                                           "Subtract"))
    return p - q if subtract else p + q


def test_add_or_sub_answers_are_exact():
    rng = np.random.default_rng(0)
    for split in ("train", "iid_valid", "test"):
        for question, answer in generate("arithmetic__add_or_sub", split, 300, rng):
            assert Decimal(answer) == _solve_add_or_sub(question), question
            assert answer == format_decimal(Decimal(answer))  # canonical form


def test_place_value_answers_are_the_named_digit_and_extrapolation_is_longer():
    rng = np.random.default_rng(1)
    lengths = {}
    for split in ("train", "test"):
        for question, answer in generate("numbers__place_value", split, 300, rng):
            match = re.fullmatch(r"What is the ([a-z ]+) digit of (\d+)\?", question)
            place, number = PLACE_NAMES.index(match.group(1)), match.group(2)
            assert answer == number[len(number) - 1 - place]
            lengths.setdefault(split, []).append(len(number))
    assert max(lengths["train"]) <= 9 < min(lengths["test"])


def test_format_decimal():
    assert [format_decimal(Decimal(x)) for x in ("1.50", "-0.0", "100", "-2.010")] == \
        ["1.5", "0", "100", "-2.01"]


@pytest.mark.parametrize("module", ["arithmetic__add_or_sub", "numbers__place_value"])
def test_task_holds_evaluation_questions_out_of_training(module):
    config = build_run_config({"task": {"name": "mathematics", "module": module,
                                        "train_size": 3000, "eval_size": 300},
                               "model": {"name": "seq2seq"}})
    task = build_task(config.task)
    train = {q for q, _ in task.pairs_text("train")}
    for split in ("iid_valid", "test"):
        pairs = task.pairs_text(split)
        assert len(pairs) == 300 and not train & {q for q, _ in pairs}
    assert task.eval_splits == ["iid_valid", "test"]

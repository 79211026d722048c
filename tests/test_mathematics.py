"""Mathematics generators: answers follow from the questions, difficulty, dedup."""

import re
from decimal import Decimal

import numpy as np
import pytest
import torch

from sglab.config import build_run_config
from sglab.tasks import build_task
from sglab.tasks.mathematics import (
    PLACE_NAMES,
    format_decimal,
    generate,
    parse_place_value,
    place_value_question,
)

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
    for split in ("train", "iid_valid", "ood_test"):
        for question, answer in generate("arithmetic__add_or_sub", split, 300, rng):
            assert Decimal(answer) == _solve_add_or_sub(question), question
            assert answer == format_decimal(Decimal(answer))  # canonical form


def test_place_value_answers_are_the_named_digit_and_extrapolation_is_longer():
    rng = np.random.default_rng(1)
    lengths = {}
    for split in ("train", "ood_test"):
        for question, answer in generate("numbers__place_value", split, 300, rng):
            match = re.fullmatch(r"What is the ([a-z ]+) digit of (\d+)\?", question)
            place, number = PLACE_NAMES.index(match.group(1)), match.group(2)
            assert answer == number[len(number) - 1 - place]
            lengths.setdefault(split, []).append(len(number))
    assert max(lengths["train"]) <= 9 < min(lengths["ood_test"])


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
    for split in ("iid_valid", "ood_test"):
        pairs = task.pairs_text(split)
        assert len(pairs) == 300 and not train & {q for q, _ in pairs}
    assert task.eval_splits == ["iid_valid", "ood_test"]


@pytest.mark.parametrize(("number", "position", "question", "answer"), [
    ("17105927", 2, "What is the hundreds digit of 17105927?", "9"),  # thesis example
    ("17105927", 0, "What is the units digit of 17105927?", "7"),
    ("17105927", 7, "What is the ten millions digit of 17105927?", "1"),
    ("31859", 1, "What is the tens digit of 31859?", "5"),
    ("123456789012", 9, "What is the billions digit of 123456789012?", "3"),
    ("123456789012", 11, "What is the hundred billions digit of 123456789012?", "1"),
    ("40", 0, "What is the units digit of 40?", "0"),
])
def test_place_value_question_names_the_right_digit(number, position, question, answer):
    assert place_value_question(number, position) == (question, answer)
    assert parse_place_value(question) == (position, number)


@pytest.mark.parametrize(("number", "position"), [("123", 3), ("123", -1), ("12a", 0)])
def test_place_value_question_rejects_missing_places(number, position):
    with pytest.raises(ValueError):
        place_value_question(number, position)


def test_parse_place_value_rejects_other_questions():
    for question in ("What is the dozens digit of 123?", "What is 5 + 3?",
                     "What is the tens digit of -12?"):
        with pytest.raises(ValueError):
            parse_place_value(question)


def test_place_value_groups_label_every_example_and_split_the_exact_match():
    config = build_run_config({"task": {"name": "mathematics", "train_size": 500,
                                        "eval_size": 300},
                               "model": {"name": "seq2seq"}})
    task = build_task(config.task)
    for split in ("iid_valid", "ood_test"):
        groups = task.split(split).groups
        for i, (question, _) in enumerate(task.pairs_text(split)):
            position, number = parse_place_value(question)
            assert int(groups["place"][i]) == position and int(groups["digits"][i]) == len(number)
            assert int(groups["place_in_train"][i]) == (position < 9)
    assert bool(task.split("iid_valid").groups["place_in_train"].all())
    assert set(task.split("ood_test").groups["place_in_train"].tolist()) == {0, 1}

    class AlwaysFour(torch.nn.Module):  # answers "4" to every question, then EOS
        def forward(self, input_ids, **_):
            logits = torch.zeros(*input_ids.shape, len(task.vocab))
            logits[:, 0, task.vocab.index["4"]] = 1.0
            logits[:, 1:, task.eos_id] = 1.0
            return logits

    metrics = task.evaluate(AlwaysFour(), "ood_test", batch_size=64)
    answers = [answer for _, answer in task.pairs_text("ood_test")]
    assert metrics["ood_test/exact_match"] == pytest.approx(answers.count("4") / len(answers))
    for group in ("place", "digits", "place_in_train"):
        labels = task.split("ood_test").groups[group]
        values = torch.unique(labels).tolist()
        weighted = sum(metrics[f"ood_test/exact_match/{group}={v}"] * int((labels == v).sum())
                       for v in values) / len(labels)
        assert weighted == pytest.approx(metrics["ood_test/exact_match"])
    assert 0 < metrics["ood_test/exact_match"] < 1
    assert metrics["ood_test/exact_match/place=11"] == pytest.approx(  # scored with its own labels
        sum(a == "4" for a, p in zip(answers, task.split("ood_test").groups["place"]) if p == 11)
        / int((task.split("ood_test").groups["place"] == 11).sum()))


def test_add_or_sub_has_no_place_groups():
    config = build_run_config({"task": {"name": "mathematics", "module": "arithmetic__add_or_sub",
                                        "train_size": 100, "eval_size": 20},
                               "model": {"name": "seq2seq"}})
    assert set(build_task(config.task).split("ood_test").groups) == {"target_length"}

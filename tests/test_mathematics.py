"""Mathematics generators: answers follow from the questions, difficulty, dedup."""

import re
from decimal import Decimal
from fractions import Fraction

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
from sglab.train.evaluate import evaluate

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


def test_generator_sampling_draws_place_value_numbers_as_the_published_generator():
    # modules/numbers.py: an integer uniform in [1, 10^e + 1]; e ~ U[3, 10] in training,
    # 8 for interpolate, 12 for extrapolate: mostly e-digit numbers, and training reaches
    # 10 digits (the billions place), extrapolation the ten and hundred billions
    rng = np.random.default_rng(2)
    lengths = {}
    for split in ("train", "iid_valid", "ood_test"):
        for question, answer in generate("numbers__place_value", split, 2000, rng, "generator"):
            position, number = parse_place_value(question)
            assert answer == number[len(number) - 1 - position] and number[0] != "0"
            lengths.setdefault(split, []).append(len(number))
    train, interpolate, extrapolate = (np.array(lengths[s]) for s in ("train", "iid_valid",
                                                                      "ood_test"))
    assert train.max() == 10 and 0.05 < np.mean(train == 10) < 0.12
    assert 0.85 < np.mean(interpolate == 8) < 0.95 and interpolate.max() == 8
    assert 0.85 < np.mean(extrapolate == 12) < 0.95 and np.mean(extrapolate >= 11) > 0.97


def _solve_generator_add_or_sub(question: str) -> Fraction:
    """The answer modules/arithmetic.py gives: p + q, p - q, or for "distance" / "difference"
    (asked only when p >= q) the gap between the two numbers."""
    first, second = (Fraction(x) for x in re.findall(NUMBER, question))
    if "between" in question:
        return abs(first - second)
    if question.startswith("Subtract") or "less than" in question:  # "{q} ... {p}"
        return second - first
    subtract = " - " in question or "minus" in question or "take away" in question
    return first - second if subtract else first + second


def test_generator_add_or_sub_answers_follow_the_question_and_its_entropy_ranges():
    """number_sampling=generator: add_or_sub as modules/arithmetic.py draws it: entropy
    U[4, 16] in training, 12 to interpolate, U[16, 20] to extrapolate (add_or_sub_big), split
    at random between p and q; integers or decimals, half each; p - q as "distance" or
    "difference" only when p >= q."""
    rng = np.random.default_rng(3)
    digits, decimals, templates = {}, [], set()
    for split in ("train", "iid_valid", "ood_test"):
        for question, answer in generate("arithmetic__add_or_sub", split, 1500, rng, "generator"):
            assert Fraction(answer) == _solve_generator_add_or_sub(question), question
            assert answer == format_decimal(Decimal(answer))  # canonical: no trailing zeros
            if "between" in question:
                assert Fraction(answer) >= 0
            numbers = re.findall(NUMBER, question)
            digits.setdefault(split, []).append(sum(len(re.sub(r"\D", "", x)) for x in numbers))
            decimals += ["." in x for x in numbers]
            templates.add(re.sub(NUMBER, "#", question))
    means = {split: np.mean(values) for split, values in digits.items()}
    assert means["train"] < means["iid_valid"] < means["ood_test"]
    assert max(digits["train"]) <= max(digits["ood_test"])
    assert 0.4 < np.mean(decimals) < 0.6
    # every template of _add_question_or_entity and _sub_question_or_entity appears (with
    # the numbers masked, "between {p} and {q}" and "between {q} and {p}" read alike)
    assert len(templates) == 11 + 8 + 2


def test_generator_add_or_sub_levels_are_thirds_of_4_to_16_and_the_vocabulary_covers_them():
    config = build_run_config({"task": {"name": "mathematics", "module": "arithmetic__add_or_sub",
                                        "number_sampling": "generator", "train_size": 2000,
                                        "eval_size": 300, "difficulty_splits": True},
                               "model": {"name": "seq2seq"}})
    task = build_task(config.task)
    mean_digits = {level: np.mean([sum(len(re.sub(r"\D", "", x)) for x in re.findall(NUMBER, q))
                                   for q, _ in task.pairs_text(f"{level}_test")])
                   for level in ("easy", "medium", "hard")}
    assert mean_digits["easy"] + 2 < mean_digits["medium"] < mean_digits["hard"] - 2
    text = {c for split in ["train", *task.eval_splits] for pair in task.pairs_text(split)
            for c in "".join(pair)}
    assert text <= set(task.symbols())
    # the other modules always draw as the generator: the switch leaves them as they are
    sort = [build_task(build_run_config({"task": {
        "name": "mathematics", "module": "comparison__sort", "number_sampling": sampling,
        "train_size": 50, "eval_size": 20}, "model": {"name": "seq2seq"}}).task).pairs_text("train")
        for sampling in ("digits", "generator")]
    assert sort[0] == sort[1]


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


def _level_task(module, difficulty, splits=True):
    config = build_run_config({"task": {"name": "mathematics", "module": module,
                                        "train_size": 2000, "eval_size": 300,
                                        "train_difficulty": difficulty,
                                        "difficulty_splits": splits},
                               "model": {"name": "seq2seq"}})
    return build_task(config.task)


def _digits(question):
    """Digits of the numbers in a question (not the template's "base 10")."""
    return sum(len(re.sub(r"\D", "", x)) for x in re.findall(NUMBER, question.replace("base 10", "")))


def test_difficulty_levels_are_thirds_of_the_training_range_and_held_out():
    task = _level_task("numbers__place_value", "easy")
    assert task.eval_splits == ["iid_valid", "ood_test", "easy_test", "medium_test", "hard_test"]
    train = {q for q, _ in task.pairs_text("train")}
    assert {len(parse_place_value(q)[1]) for q in train} == {2, 3, 4}  # easy: 2-4 digits
    for level, lengths in (("easy", {2, 3, 4}), ("medium", {5, 6, 7}), ("hard", {8, 9})):
        pairs = task.pairs_text(f"{level}_test")
        assert len(pairs) == 300 and not train & {q for q, _ in pairs}
        assert {len(parse_place_value(q)[1]) for q, _ in pairs} == lengths
    # add_or_sub: entropy [3, 5.33) for easy, [7.67, 10] for hard; a number has at most as
    # many digits as the entropy share it was drawn with, rounded
    task = _level_task("arithmetic__add_or_sub", "all")
    easy = [_digits(q) for q, _ in task.pairs_text("easy_test")]
    hard = [_digits(q) for q, _ in task.pairs_text("hard_test")]
    assert max(easy) <= 6 and np.mean(hard) > max(easy)
    assert max(_digits(q) for q, _ in task.pairs_text("train")) > 6  # every level trains


def test_difficulty_splits_leave_the_other_splits_as_they_were():
    plain = _level_task("arithmetic__add_or_sub", "all", splits=False)
    levels = _level_task("arithmetic__add_or_sub", "all")
    assert plain.eval_splits == ["iid_valid", "ood_test"]
    for split in ("iid_valid", "ood_test"):
        assert plain.pairs_text(split) == levels.pairs_text(split)
    # training loses only the questions the level splits hold out
    held = {q for level in ("easy", "medium", "hard") for q, _ in levels.pairs_text(f"{level}_test")}
    assert [p for p in plain.pairs_text("train") if p[0] not in held] == levels.pairs_text("train")


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

    metrics = evaluate(AlwaysFour(), task, "ood_test", batch_size=64)
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

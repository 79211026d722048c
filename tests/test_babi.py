"""bAbI from local files (fixture in the published layout): story encoding, answer-only
loss, per-task error, missing files, a token DNC trained on it."""

import shutil
from pathlib import Path

import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.tasks.base import IGNORE, target_loss
from sglab.train.evaluate import evaluate
from sglab.train.loop import Trainer

FIXTURE = Path(__file__).parent / "fixtures" / "published" / "babi"


@pytest.fixture
def data_dir(tmp_path):
    return Path(shutil.copytree(FIXTURE, tmp_path / "babi"))


def config(data_dir, *overrides):
    return build_run_config(
        {"task": {"name": "babi", "data_dir": str(data_dir), "tasks": [1, 8], "valid_every": 2},
         "model": {"name": "dnc", "io": "tokens", "embedding_size": 8, "memory_cells": 6,
                   "cell_width": 4, "read_heads": 2, "controller_size": 8, "variant": "DNC-MD"},
         "train": {"steps": 4, "batch_size": 2, "eval_interval": 2, "checkpoint_interval": 2,
                   "optimizer": "rmsprop", "momentum": 0.9, "lr": 1e-3,
                   "target_metric": "iid_valid/exact_match", "threads": 1}}, list(overrides))


def test_story_is_one_sequence_with_thinking_steps_and_answer_targets(data_dir):
    task = build_task(config(data_dir).task)
    decode = task.vocab.decode
    train = task.splits["train"]  # qa1 stories 2 (index 1) and qa8 story 2 (index 1)
    first = train.tokens[0, : int(train.lengths[0])]
    words = decode(first)
    assert words[:6] == ["tom", "went", "to", "the", "hallway", "."]
    question_end = words.index("?")
    assert words[question_end + 1:] == ["<pad>"] * 4  # 3 thinking steps + 1 answer step
    targets = train.targets[0, : int(train.lengths[0])]
    assert (targets[: question_end + 4] == IGNORE).all()
    assert decode(targets[question_end + 4:]) == ["hallway"]
    # a comma answer (task 8) is two answer words
    test = task.splits["iid_test"]
    row = int((test.task == 8).nonzero()[0])
    answers = test.targets[row][test.targets[row] != IGNORE]
    assert decode(answers) == ["milk", "apple"]
    assert len(task.splits["iid_valid"].tokens) == 3  # every 2nd training story, from index 0


def test_loss_reads_answer_words_only(data_dir):
    task = build_task(config(data_dir).task)
    batch = task.train_batch(2, torch.Generator().manual_seed(0))
    logits = torch.randn(*batch.input_ids.shape, len(task.vocab))
    changed = logits.clone()
    changed[batch.targets == IGNORE] = torch.randn_like(changed[batch.targets == IGNORE])
    assert float(target_loss(logits, batch.targets)) == float(target_loss(changed, batch.targets))
    scored = batch.targets != IGNORE
    expected = torch.nn.functional.cross_entropy(logits[scored], batch.targets[scored])
    assert float(target_loss(logits, batch.targets)) == pytest.approx(float(expected))


def test_token_dnc_trains_and_reports_error_per_task(data_dir, tmp_path):
    summary = Trainer(config(data_dir), tmp_path / "runs", printer=None).run()
    final = summary["final"]
    assert {"iid_test/error/task=1", "iid_test/error/task=8"} <= set(final)
    errors = [final["iid_test/error/task=1"], final["iid_test/error/task=8"]]
    # overall exact match is the answer-word-weighted mean of the task errors (1 + 2 words)
    assert 1 - final["iid_test/exact_match"] == pytest.approx((2 * errors[0] + 2 * errors[1]) / 4)
    assert (data_dir / "SHA256SUMS").is_file()


def test_missing_files_are_named(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SglabError, match="qa1_single-supporting-fact_train.txt"):
        build_task(config(empty).task)


def test_evaluation_splits_take_the_tasks_in_turn(data_dir):
    task = build_task(config(data_dir).task)
    test = task.splits["iid_test"]
    assert test.task[:2].tolist() == [1, 8]  # the files are read task by task
    assert task.splits["train"].task[0] == 1 and task.splits["train"].task[-1] == 8
    # a prefix of the test split (train.eval_max_examples) scores every task
    model = build_model(config(data_dir).model, len(task.vocab), task.max_length)
    metrics = evaluate(model, task, "iid_test", batch_size=2, max_examples=2)
    assert {"iid_test/error/task=1", "iid_test/error/task=8"} <= set(metrics)


def test_evaluation_does_not_depend_on_batching(data_dir):
    # stories are batched by length; padding and order must not change any score
    task = build_task(config(data_dir).task)
    model = build_model(config(data_dir).model, len(task.vocab), task.max_length)
    one = evaluate(model, task, "iid_test", batch_size=1)
    every = evaluate(model, task, "iid_test", batch_size=3)
    assert one.keys() == every.keys()
    for key in one:
        assert every[key] == pytest.approx(one[key], rel=1e-5), key

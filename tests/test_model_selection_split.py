"""The best checkpoint is chosen on a validation split, never on the test split by default."""

import pytest
import torch

from sglab.errors import SglabError
from sglab.store import read_metrics
from sglab.tasks import build_task
from sglab.train import Trainer
from tests.conftest import tiny_config


def test_addition_has_an_iid_validation_split_apart_from_train_and_test():
    task = build_task(tiny_config().task)
    assert task.eval_splits == ["iid_valid", "iid_test"]
    pairs = {name: set(map(tuple, p.tolist())) for name, p in task.pairs.items()}
    assert len(pairs["iid_valid"]) == len(task.pairs["iid_valid"]) == 200  # min(1000, test_size)
    assert not pairs["iid_valid"] & pairs["train"] and not pairs["iid_valid"] & pairs["iid_test"]
    # the validation split changes neither the other splits nor the model's length
    assert task.max_length == build_task(tiny_config("task.valid_size=0").task).max_length
    no_valid = build_task(tiny_config("task.valid_size=0").task)
    assert torch.equal(no_valid.splits["iid_test"].tokens, task.splits["iid_test"].tokens)


def test_best_checkpoint_is_chosen_on_iid_valid_by_default(tmp_path):
    config = tiny_config("train.steps=60", "train.lr=0.01")
    summary = Trainer(config, tmp_path, printer=None).run()
    assert summary["select_on"] == "iid_valid"
    assert summary["best"]["metric"] == "iid_valid/exact_match"
    records = read_metrics(tmp_path / config.run_id())
    best = max(records, key=lambda r: r["iid_valid/exact_match"])  # first of the maxima
    assert summary["best"]["step"] == best["step"]
    stored = torch.load(tmp_path / config.run_id() / "checkpoints" / "best.pt", weights_only=True)
    assert stored["step"] == best["step"]


def test_select_on_names_the_split_and_an_unknown_one_is_an_error(tmp_path):
    summary = Trainer(tiny_config("train.select_on=iid_test"), tmp_path, printer=None).run()
    assert (summary["select_on"], summary["best"]["metric"]) == ("iid_test", "iid_test/exact_match")
    with pytest.raises(SglabError, match="select_on=ood_valid is not a split.*Splits: iid_valid, iid_test"):
        tiny_config("train.select_on=ood_valid")


def test_without_a_validation_split_no_checkpoint_is_selected(tmp_path):
    config = tiny_config("task.valid_size=0")
    summary = Trainer(config, tmp_path, printer=None).run()
    assert summary["select_on"] is None and summary["best"] is None
    assert not (tmp_path / config.run_id() / "checkpoints" / "best.pt").exists()

"""``train.loss_reduction``: the loss per target position (sglab's default) or per example
row (the weight-mask code's sequence loss, where a mask penalty's beta is calibrated)."""

import pytest
import torch
import torch.nn.functional as F

from sglab.config import TrainConfig
from sglab.tasks.base import IGNORE, target_loss, training_loss
from tests.conftest import tiny_config
from tests.test_ensemble import assert_same_as_alone, member_configs


@pytest.fixture
def batch():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=generator)
    targets = torch.randint(0, 7, (3, 5), generator=generator)
    targets[0, 2:] = IGNORE  # rows of 2, 5 and 4 scored positions
    targets[2, 4] = IGNORE
    return logits, targets


def per_position_cross_entropy(logits, targets):
    return [float(F.cross_entropy(logits[r, c][None], targets[r, c][None]))
            for r in range(targets.shape[0]) for c in range(targets.shape[1])
            if targets[r, c] != IGNORE]


def test_row_reduction_sums_each_row_and_averages_over_rows(batch):
    logits, targets = batch
    losses = per_position_cross_entropy(logits, targets)
    assert len(losses) == 11
    assert float(target_loss(logits, targets, reduction="row")) == pytest.approx(sum(losses) / 3)
    assert float(target_loss(logits, targets)) == pytest.approx(sum(losses) / 11)
    assert float(target_loss(logits, targets, reduction="sum")) == pytest.approx(sum(losses))
    # the squared loss of the topic models: the same two reductions
    squared = [float(((logits[r, c] - F.one_hot(targets[r, c], 7)) ** 2).sum())
               for r in range(3) for c in range(5) if targets[r, c] != IGNORE]
    assert float(target_loss(logits, targets, "squared", "row")) == pytest.approx(sum(squared) / 3)
    with pytest.raises(ValueError, match="choose mean, sum or row"):
        target_loss(logits, targets, reduction="rows")


def test_training_loss_follows_the_config(batch):
    logits, targets = batch
    rows = training_loss(logits, targets, TrainConfig(loss_reduction="row_sum"))
    tokens = training_loss(logits, targets, TrainConfig())
    # 11 scored positions over 3 rows: the row loss weighs 11/3 times the token mean
    assert float(rows) == pytest.approx(float(tokens) * 11 / 3)


def test_row_sum_ensembles_match_lone_runs_and_default_run_ids_stay(tmp_path):
    configs = member_configs("train.loss_reduction=row_sum")
    assert_same_as_alone(configs, tmp_path / "ensemble")
    # the default run id is that of earlier releases; row_sum is another run
    assert tiny_config().run_id() != tiny_config("train.loss_reduction=row_sum").run_id()
    assert "loss_reduction" not in tiny_config().model_dump(exclude_defaults=True)["train"]

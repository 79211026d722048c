"""``train.flush_denormal``: subnormal floats flushed to zero on a CPU while a run trains,
restored after, and a config that leaves it off keeps its run id."""

import pytest
import torch

from sglab.cli import main
from sglab.config import TrainConfig
from sglab.train import Trainer
from sglab.train.loop import LoneStep, cpu_settings
from tests.conftest import tiny_config

SUBNORMAL = 1e-39  # below float32's smallest normal number, 1.18e-38


def flushed() -> bool:
    """Whether float32 arithmetic now turns a subnormal operand into zero."""
    return (torch.tensor([SUBNORMAL]) * 1.0).item() == 0.0


@pytest.fixture(autouse=True)
def needs_flush_support():
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush subnormal floats")


def test_cpu_settings_flush_inside_the_block_and_restore_after():
    assert not flushed()
    with cpu_settings(TrainConfig(flush_denormal=True), torch.device("cpu")):
        assert flushed()
    assert not flushed()
    with cpu_settings(TrainConfig(), torch.device("cpu")):
        assert not flushed()


def test_training_steps_run_flushed_only_when_the_run_asks(tmp_path, monkeypatch):
    seen = []
    step = LoneStep.step

    def recording(self, runs, lrs):
        seen.append(flushed())
        return step(self, runs, lrs)

    monkeypatch.setattr(LoneStep, "step", recording)
    config = tiny_config("train.steps=10", "train.flush_denormal=true")
    summary = Trainer(config, tmp_path, printer=None).run()
    assert summary["status"] == "finished" and seen == [True] * 10
    assert not flushed()
    seen.clear()
    Trainer(tiny_config("train.steps=10"), tmp_path, printer=None).run()
    assert seen == [False] * 10


def test_off_by_default_keeps_run_ids_and_on_makes_a_new_one():
    plain = tiny_config()
    assert tiny_config("train.flush_denormal=false").run_id() == plain.run_id()
    assert tiny_config("train.flush_denormal=true").run_id() != plain.run_id()


def test_it_is_refused_on_a_gpu_where_it_does_nothing():
    with pytest.raises(ValueError, match="flush_denormal=true has no effect without device=cpu"):
        TrainConfig(device="cuda", flush_denormal=True)


def test_the_cli_refuses_it_on_a_gpu_with_exit_2_and_writes_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert main(["train", "--set", "train.device=cuda", "--set", "train.flush_denormal=true",
                 "--runs-dir", str(runs)]) == 2
    assert "flush_denormal=true has no effect without device=cpu" in capsys.readouterr().err
    assert not runs.exists()

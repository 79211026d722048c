"""train.snapshot_steps keeps the weights of chosen steps for analyses of training dynamics."""

import pytest
import torch

from sglab.errors import SglabError
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.train.ensemble import EnsembleTrainer
from sglab.train.loop import Trainer, execution_run_id, load_model, load_trained, train
from tests.conftest import tiny_config


def test_snapshots_hold_the_weights_of_their_steps(tmp_path):
    config = tiny_config("train.snapshot_steps=[20, 0, 10, 10]")
    assert config.train.snapshot_steps == [0, 10, 20]
    train(config, tmp_path, printer=None)
    run_dir = tmp_path / config.run_id()
    states = {step: load_trained(run_dir, f"step_{step}")[2].state_dict() for step in (0, 10, 20)}
    last = load_trained(run_dir, "last")[2].state_dict()
    name = "blocks.0.attn.qkv.weight"
    torch.manual_seed(config.seed)  # step 0 is the initialization
    task = build_task(config.task)
    fresh = build_model(config.model, len(task.vocab), task.max_length)
    assert torch.equal(fresh.state_dict()[name], states[0][name])
    assert not torch.equal(states[0][name], states[10][name])
    assert not torch.equal(states[10][name], states[20][name])
    assert not torch.equal(states[20][name], last[name])  # 30 steps in all
    assert not (run_dir / "checkpoints" / "step_30.pt").exists()


def test_negative_snapshot_steps_are_rejected():
    with pytest.raises(SglabError, match="snapshot"):
        tiny_config("train.snapshot_steps=[-1]")


def test_ensemble_members_keep_the_snapshots_a_lone_run_keeps(tmp_path):
    configs = [tiny_config(f"seed={seed}", "train.snapshot_steps=[0, 10]", "train.steps=20")
               for seed in (0, 1)]
    EnsembleTrainer(configs, tmp_path / "together", printer=None).run()
    Trainer(configs[1], tmp_path / "alone", printer=None).run()
    for step in (0, 10):
        member_dir = tmp_path / "together" / execution_run_id(configs[1], "ensemble")
        together = load_trained(member_dir, f"step_{step}")[2]
        alone = load_trained(tmp_path / "alone" / configs[1].run_id(), f"step_{step}")[2]
        for (name, a), b in zip(together.state_dict().items(), alone.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=name)


def test_load_model_rebuilds_the_model_from_the_summary_without_the_task(tmp_path, monkeypatch):
    config = tiny_config("train.steps=10")
    train(config, tmp_path, printer=None)
    _, task, expected = load_trained(tmp_path / config.run_id())
    summary = Trainer(config, tmp_path).read_summary()
    assert (summary["vocab_size"], summary["max_length"]) == (len(task.vocab), task.max_length)

    def no_task(*args, **kwargs):
        raise AssertionError("load_model must not build the task")

    monkeypatch.setattr("sglab.train.loop.build_task", no_task)
    loaded_config, model = load_model(tmp_path / config.run_id())
    assert loaded_config == config
    for name, tensor in expected.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name

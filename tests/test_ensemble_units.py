"""Ensemble training under settings beyond tests/test_ensemble.py: RMSprop and SGD members
resumed mid-run, frozen parameters with members of different lengths, the ACT ponder loss,
run tags and store records, the compile request, the thread count, the padding of member
batches and the runs :func:`ensemble_key` lets train together."""

import json

import pytest
import torch

from sglab.config import build_run_config
from sglab.store import RunStore
from sglab.tasks.base import IGNORE, Batch
from sglab.train import ensemble
from sglab.train.checkpoints import load_checkpoint
from sglab.train.ensemble import EnsembleTrainer, _pad_and_stack, ensemble_key
from sglab.train.loop import Trainer, execution_run_id
from tests.conftest import tiny_config
from tests.test_ensemble import assert_same_as_alone, final_weights


class Interrupted(Exception):
    pass


def two_members(*extra):
    return [tiny_config(f"seed={seed}", f"train.lr={lr}", f"train.weight_decay={wd}",
                        "train.grad_clip=0.5", "train.steps=12", "train.eval_interval=6",
                        "train.checkpoint_interval=6", "train.warmup_steps=2", *extra)
            for seed, lr, wd in [(0, 3e-3, 0.1), (1, 1e-3, 0.05)]]


def optimizer_state(run_dir):
    """The per-parameter optimizer state of a run's last checkpoint (entries that hold
    nothing, such as SGD's momentum buffer without momentum, left out)."""
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")["optimizer"]["state"]
    entries = {index: {key: value for key, value in entry.items() if value is not None}
               for index, entry in state.items()}
    return {index: entry for index, entry in entries.items() if entry}


def assert_same_optimizer_state(a, b):
    assert a.keys() == b.keys()
    for index in a:
        assert a[index].keys() == b[index].keys(), index
        for key in a[index]:
            x, y = (torch.as_tensor(v).double() for v in (a[index][key], b[index][key]))
            assert float((x - y).norm()) <= 1e-3 * float(y.norm()) + 1e-12, (index, key)


# ----------------------------------------------------------------------------- padding

def test_pad_and_stack_pads_rows_and_columns_with_pad_ignore_and_masked_keys():
    masked = Batch(torch.tensor([[3, 4, 5], [6, 7, 8]]), torch.tensor([[4, 5, 9], [7, 8, 9]]),
                   torch.tensor([[True, True, False], [True, True, True]]))
    plain = Batch(torch.arange(10, 25).reshape(3, 5), torch.arange(30, 45).reshape(3, 5))
    stacked = _pad_and_stack([masked, plain])
    assert stacked.input_ids.shape == stacked.targets.shape == (2, 3, 5)
    assert torch.equal(stacked.input_ids[0], torch.tensor(
        [[3, 4, 5, 0, 0], [6, 7, 8, 0, 0], [0, 0, 0, 0, 0]]))
    assert torch.equal(stacked.targets[0], torch.tensor(
        [[4, 5, 9, IGNORE, IGNORE], [7, 8, 9, IGNORE, IGNORE], [IGNORE] * 5]))
    assert torch.equal(stacked.input_ids[1], plain.input_ids)
    assert torch.equal(stacked.targets[1], plain.targets)
    mask = stacked.key_padding_mask
    assert mask is not None and mask.dtype == torch.bool and mask.shape == (2, 3, 5)
    # the member's own mask, its padded columns masked, and the filler row sees the first key
    assert torch.equal(mask[0], torch.tensor([[True, True, False, False, False],
                                              [True, True, True, False, False],
                                              [True, False, False, False, False]]))
    assert bool(mask[1].all())  # a member without a mask sees every key of its batch
    assert stacked.source_ids is None and stacked.source_mask is None


# ----------------------------------------------------------------------------- grouping

def test_ensemble_key_ignores_exactly_the_member_fields():
    shared = ("model.init.kind=gamma", "train.early_stop_metric=iid_test/exact_match",
              "train.early_stop_threshold=0.95")
    base = tiny_config(*shared)
    members = tiny_config(*shared, "model.init.gamma=0.5", "seed=7",
                          "task.data_seed=3", "train.lr=2e-3", "train.min_lr=1e-5",
                          "train.weight_decay=0.2", "train.steps=40", "train.warmup_steps=9",
                          "train.early_stop_threshold=0.9", "train.target_threshold=0.8")
    assert ensemble_key(base) is not None and ensemble_key(base) == ensemble_key(members)
    for other in ("train.batch_size=8", "train.grad_clip=0.3", "train.optimizer=sgd",
                  "model.n_heads=4", "train.eval_interval=5", "task.train_size=400"):
        assert ensemble_key(tiny_config(*shared, other)) != ensemble_key(base), other


def moe(impl):
    return tiny_config("model.ffn.kind=sigma_moe", "model.ffn.experts=4",
                       "model.ffn.expert_size=8", "model.ffn.top_k=2", f"model.ffn.impl={impl}")


def test_runs_that_cannot_be_vmapped_have_no_ensemble_key():
    assert ensemble_key(moe("masked")) is not None
    assert ensemble_key(moe("sorted")) is None  # data-dependent shapes
    masked = build_run_config({"model": {"name": "masked", "base_run": "some-run"}})
    assert ensemble_key(masked) is None
    for name in ("lstm", "lstm_seq2seq"):
        config = build_run_config({"task": {"name": "ctl"}, "model": {"name": name}})
        assert ensemble_key(config) is None, name


def test_ensemble_trainer_refuses_incompatible_runs(tmp_path):
    a = tiny_config()
    with pytest.raises(ValueError, match="train.lr"):
        EnsembleTrainer([a, tiny_config("model.d_model=32")], tmp_path)
    with pytest.raises(ValueError, match="member fields"):
        EnsembleTrainer([moe("sorted")], tmp_path)  # even alone: it cannot be vmapped
    EnsembleTrainer([a, tiny_config("seed=3")], tmp_path)  # compatible: accepted


# ----------------------------------------------------------------------------- arithmetic

@pytest.mark.parametrize("optimizer, momentum", [("rmsprop", 0.0), ("rmsprop", 0.9),
                                                 ("sgd", 0.0), ("sgd", 0.9)])
def test_members_resumed_mid_run_match_alone_with_rmsprop_and_sgd(tmp_path, optimizer, momentum):
    configs = two_members(f"train.optimizer={optimizer}", f"train.momentum={momentum}")
    runs, alone = tmp_path / "runs", tmp_path / "alone"
    second = execution_run_id(configs[1], "ensemble")

    def die_at_second_members_checkpoint(line):
        if line.startswith(f"[{second}] eval @ 6"):
            raise Interrupted  # member 0 has saved step 6, member 1 has not

    with pytest.raises(Interrupted):
        EnsembleTrainer(configs, runs, printer=die_at_second_members_checkpoint).run()
    assert Trainer(configs[0], runs, execution="ensemble").checkpoint_step() == 6
    assert Trainer(configs[1], runs, execution="ensemble").checkpoint_step() == 0
    # member 0 resumes from its checkpoint (optimizer state included), member 1 restarts:
    # two ensembles of one member each
    summaries = EnsembleTrainer(configs, runs, printer=None).run()
    assert [s["status"] for s in summaries] == ["finished", "finished"]
    assert [s["step"] for s in summaries] == [12, 12]
    assert [s["ensemble_size"] for s in summaries] == [1, 1]
    for config in configs:
        Trainer(config, alone, printer=None).run()
        a, b = final_weights(runs, config, "ensemble"), final_weights(alone, config)
        for name in a:
            # RMSprop divides by the root of small running averages: rounding grows more
            torch.testing.assert_close(a[name], b[name], rtol=1e-3, atol=1e-5, msg=name)
        # a member's checkpoint is an ordinary single-run checkpoint
        assert_same_optimizer_state(
            optimizer_state(runs / execution_run_id(config, "ensemble")),
            optimizer_state(alone / config.run_id()))


def test_members_of_different_lengths_and_schedules_with_a_frozen_embedding_match_alone(tmp_path):
    # a one-hot embedding is a frozen parameter (stacked as a constant); members leave at
    # different steps and have their own warmup and min_lr; nothing is clipped; bf16
    # precision asks for nothing on a CPU
    shared = ("model.embedding.kind=one_hot", "model.d_model=15", "model.n_heads=3",
              "train.eval_interval=4", "train.checkpoint_interval=4", "train.precision=bf16",
              "train.grad_clip=null")
    configs = [
        tiny_config("seed=0", "train.steps=12", "train.warmup_steps=3", "train.min_lr=1e-4",
                    *shared),
        tiny_config("seed=1", "train.steps=4", "train.warmup_steps=0", "train.min_lr=5e-4",
                    "train.lr=2e-3", *shared),
        tiny_config("seed=2", "train.steps=8", "train.warmup_steps=1", "train.min_lr=0",
                    "train.weight_decay=0.3", *shared),
    ]
    assert len({ensemble_key(c) for c in configs}) == 1
    assert_same_as_alone(configs, tmp_path)


def test_ensemble_of_act_models_adds_each_members_ponder_loss(tmp_path):
    configs = two_members("model.halting.kind=ut", "model.shared_layers=true",
                          "model.halting.loss_weight=0.5")
    assert_same_as_alone(configs, tmp_path)


# ----------------------------------------------------------------------------- bookkeeping

def test_members_are_recorded_with_the_tag_and_finished_ones_are_re_recorded(tmp_path):
    configs = two_members()
    runs = tmp_path / "runs"
    first = EnsembleTrainer(configs, runs, store=RunStore(runs), printer=None,
                            tag="sweep/a").run()
    rows = {row["run_id"]: row for row in RunStore(runs).query()}
    assert {rows[s["run_id"]]["tag"] for s in first} == {"sweep/a"}
    # running finished members again trains nothing: it returns their summaries and
    # records them in the store given, under the tag given
    other = RunStore(tmp_path / "index")
    again = EnsembleTrainer(configs, runs, store=other, printer=None, tag="sweep/b").run()
    assert again == first
    for summary in again:
        stored = json.loads((runs / summary["run_id"] / "summary.json").read_text())
        assert stored == summary
    rows = {row["run_id"]: row for row in other.query()}
    assert set(rows) == {s["run_id"] for s in first}
    assert {row["tag"] for row in rows.values()} == {"sweep/b"}


def test_a_member_finished_by_another_process_meanwhile_is_not_trained_again(tmp_path,
                                                                             monkeypatch):
    configs = two_members()
    runs = tmp_path / "runs"
    EnsembleTrainer(configs[:1], runs, printer=None).run()
    run_dir = runs / execution_run_id(configs[0], "ensemble")
    finished = json.loads((run_dir / "summary.json").read_text())
    metrics = (run_dir / "metrics.jsonl").read_text()
    # the ensemble sees member 0 unfinished; before it locks the member's run directory,
    # another process finishes it
    (run_dir / "summary.json").write_text(json.dumps({**finished, "status": "running"}))
    real_checkpoint_step = Trainer.checkpoint_step

    def finished_meanwhile(trainer):
        if trainer.run_dir == run_dir:
            (run_dir / "summary.json").write_text(json.dumps(finished))
        return real_checkpoint_step(trainer)

    monkeypatch.setattr(Trainer, "checkpoint_step", finished_meanwhile)
    summaries = EnsembleTrainer(configs, runs, printer=None).run()
    assert summaries[0] == finished
    assert (run_dir / "metrics.jsonl").read_text() == metrics  # not trained again
    assert summaries[1]["status"] == "finished" and summaries[1]["step"] == 12


def test_ensemble_trains_with_the_configured_thread_count(tmp_path):
    configs = two_members("train.steps=2", "train.eval_interval=2")
    assert all(c.train.threads == 1 for c in configs)
    torch.set_num_threads(2)
    seen = []
    EnsembleTrainer(configs, tmp_path, printer=lambda line: seen.append(
        torch.get_num_threads())).run()
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2  # restored after training


def test_train_compile_compiles_the_members_vmapped_forward(tmp_path, monkeypatch):
    compiled = []

    def recording_compile(function, *args, **kwargs):  # stands in for the real compiler
        compiled.append(function)
        return function

    configs = two_members("train.steps=4", "train.eval_interval=4", "train.compile=true")
    monkeypatch.setattr(torch, "compile", recording_compile)
    summaries = EnsembleTrainer(configs, tmp_path / "compiled", printer=None).run()
    assert [s["status"] for s in summaries] == ["finished", "finished"]
    assert compiled and all(callable(f) for f in compiled)
    assert ensemble.torch.compile is recording_compile
    compiled.clear()
    plain = [c.model_copy(update={"train": c.train.model_copy(update={"compile": False})})
             for c in configs]
    EnsembleTrainer(plain, tmp_path / "plain", printer=None).run()
    assert compiled == []  # without train.compile nothing is compiled

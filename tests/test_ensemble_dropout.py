"""Ensembles of runs with dropout and of encoder-decoder runs; the planner's choices."""

import pytest
import torch
from torch.func import vmap

from sglab.config import build_run_config
from sglab.models.dropout import Dropout, apply_dropout, keyed_uniform, member_masks
from sglab.store import RunStore
from sglab.sweep.jobs import executions, plan_jobs
from sglab.tasks import build_task
from sglab.train.ensemble import EnsembleTrainer, ensemble_key
from sglab.train.ensemble_cost import (
    CPU_ENSEMBLE_MAX_ROWS,
    GPU_ENSEMBLE_MAX_TOKENS,
    MAX_ENSEMBLE_MEMBERS,
    member_rows_per_op,
    member_tokens_per_step,
    members_for_memory,
)
from tests.conftest import tiny_config
from tests.test_ensemble import assert_same_as_alone


def _member_masks(seeds, p=0.25, shape=(64, 32), step=7):
    """The keep masks that ``apply_dropout`` draws for each member of a vmapped forward."""
    def member(x, seed, step):
        with member_masks(seed, step):
            first = apply_dropout(x, p, True)
            second = apply_dropout(x, p, True)  # the next call in the same forward
        return first, second

    x = torch.ones(len(seeds), *shape)
    steps = torch.full((len(seeds),), step)
    first, second = vmap(member)(x, torch.tensor(seeds), steps)
    return first != 0, second != 0, first


def test_members_with_equal_seeds_get_equal_masks_and_other_seeds_other_masks():
    first, second, values = _member_masks([3, 3, 4])
    assert torch.equal(first[0], first[1])
    assert not torch.equal(first[0], first[2])
    assert not torch.equal(first[0], second[0])  # each dropout call draws a new mask
    # the masks keep 1 - p of the units, kept values are scaled by 1 / (1 - p)
    assert first.float().mean().item() == pytest.approx(0.75, abs=0.02)
    assert torch.allclose(values[first], torch.full_like(values[first], 1 / 0.75))
    # the same seed, step and call number give the same mask outside vmap
    with member_masks(torch.tensor(3), torch.tensor(7)):
        alone = apply_dropout(torch.ones(64, 32), 0.25, True) != 0
    assert torch.equal(alone, first[0])


def test_keyed_masks_change_with_the_step_and_are_uniform():
    u = keyed_uniform(torch.tensor(0), torch.tensor(1), 0, torch.Size([100_000]), "cpu")
    assert 0 <= u.min() and u.max() < 1
    assert u.mean().item() == pytest.approx(0.5, abs=0.01)
    assert torch.histc(u, bins=10, min=0, max=1).div(len(u)).sub(0.1).abs().max() < 0.01
    later = keyed_uniform(torch.tensor(0), torch.tensor(2), 0, torch.Size([100_000]), "cpu")
    assert not torch.equal(u, later)


def test_outside_an_ensemble_dropout_is_torch_dropout():
    x = torch.randn(8, 16)
    torch.manual_seed(5)
    expected = torch.nn.functional.dropout(x, 0.3, True)
    torch.manual_seed(5)
    assert torch.equal(Dropout(0.3).train()(x), expected)
    assert torch.equal(apply_dropout(x, 0.3, False), x)


def test_an_ensemble_with_dropout_trains_and_says_how_its_masks_were_drawn(tmp_path):
    configs = [tiny_config(f"seed={seed}", "model.dropout=0.1", "train.steps=12",
                           "train.eval_interval=6", "train.checkpoint_interval=6")
               for seed in (0, 1, 2)]
    assert len({ensemble_key(c) for c in configs}) == 1 and ensemble_key(configs[0])
    summaries = EnsembleTrainer(configs, tmp_path, store=RunStore(tmp_path), printer=None).run()
    assert [s["status"] for s in summaries] == ["finished"] * 3
    assert all("statistically, not bitwise" in s["dropout_masks"] for s in summaries)
    assert all(s["ensemble_size"] == 3 for s in summaries)


def _seq2seq(seed, lr):
    # no biases: a key bias has a zero gradient in theory, so its Adam steps are rounding
    # noise that differs between any two ways of computing the same forward pass
    return build_run_config({
        "task": {"name": "scan", "split": "cutoff_26"},
        "model": {"name": "seq2seq", "d_model": 32, "d_ff": 64, "n_heads": 4, "n_layers": 2,
                  "dropout": 0.0, "bias": False},
        "train": {"steps": 8, "batch_size": 16, "lr": lr, "eval_interval": 4,
                  "checkpoint_interval": 4, "eval_max_examples": 64, "warmup_steps": 0}},
        [f"seed={seed}"])


def test_an_encoder_decoder_ensemble_equals_its_members_trained_alone(tmp_path):
    configs = [_seq2seq(seed, lr) for seed, lr in [(0, 2e-3), (1, 1e-3), (2, 5e-4)]]
    assert len({ensemble_key(c) for c in configs}) == 1
    assert_same_as_alone(configs, tmp_path)


def test_on_a_cpu_runs_with_dropout_or_an_encoder_stay_alone(monkeypatch):
    dropout = [tiny_config(f"seed={s}", "model.dropout=0.1") for s in (0, 1)]
    seq2seq = [_seq2seq(s, 1e-3) for s in (0, 1)]
    plain = [tiny_config(f"seed={s}") for s in (0, 1)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert executions(dropout + seq2seq + plain, True) == ["alone"] * 4 + ["ensemble"] * 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # device=auto: a GPU
    assert executions(dropout + seq2seq + plain, True) == ["ensemble"] * 6


def test_on_a_gpu_members_with_large_steps_train_alone(monkeypatch):
    """A member step of GPU_ENSEMBLE_MAX_TOKENS tokens or more trains alone on a GPU (the
    lone path's fused attention beat the vmapped one there); smaller steps batch."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # device=auto: a GPU
    small = [tiny_config(f"seed={s}", "model.dropout=0.1") for s in (0, 1)]
    tokens = member_tokens_per_step(small[0])
    assert tokens == small[0].train.batch_size * build_task(small[0].task).max_length
    rows = -(-GPU_ENSEMBLE_MAX_TOKENS // build_task(small[0].task).max_length)  # ceil
    large = [tiny_config(f"seed={s}", "model.dropout=0.1", f"train.batch_size={rows}")
             for s in (0, 1)]
    assert member_tokens_per_step(large[0]) >= GPU_ENSEMBLE_MAX_TOKENS > tokens
    assert executions(small + large, True) == ["ensemble"] * 2 + ["alone"] * 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # CPU: dropout stays alone
    assert executions(small + large, True) == ["alone"] * 4


def test_on_a_cpu_members_with_large_steps_train_alone(monkeypatch):
    """On a CPU a member whose ops see CPU_ENSEMBLE_MAX_ROWS rows or more trains alone (the
    stacked step ran at 0.74-0.92x of a lone run's member-steps/s there); smaller steps batch."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    small = [tiny_config(f"seed={s}") for s in (0, 1)]
    rows = -(-CPU_ENSEMBLE_MAX_ROWS // build_task(small[0].task).max_length)  # ceil
    large = [tiny_config(f"seed={s}", f"train.batch_size={rows}") for s in (0, 1)]
    assert member_tokens_per_step(large[0]) >= CPU_ENSEMBLE_MAX_ROWS
    assert member_tokens_per_step(small[0]) < CPU_ENSEMBLE_MAX_ROWS
    assert executions(small + large, True) == ["ensemble"] * 2 + ["alone"] * 2


def test_on_a_cpu_row_at_a_time_models_count_batch_rows_not_tokens(monkeypatch):
    """An FNN reads each row as one vector, so its ops see the batch rows: a step of more
    tokens than the CPU limit still batches while the rows are fewer."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    fnn = [build_run_config({}, ["task.name=add_mul", "model.name=fnn", "model.hidden=[16]",
                                 "train.batch_size=128", f"seed={s}"]) for s in (0, 1)]
    assert member_tokens_per_step(fnn[0]) >= CPU_ENSEMBLE_MAX_ROWS
    assert member_rows_per_op(fnn[0]) == 128 < CPU_ENSEMBLE_MAX_ROWS
    transformer = [tiny_config(f"seed={s}") for s in (0, 1)]
    assert member_rows_per_op(transformer[0]) == member_tokens_per_step(transformer[0])
    assert executions(fnn, True) == ["ensemble"] * 2


def test_ensemble_sizes_respect_a_memory_budget(tmp_path):
    assert members_for_memory(10, 35) == 3
    assert members_for_memory(100, 35) == 1  # one member always runs
    assert members_for_memory(1, 10**9, cap=64) == 64
    configs = [tiny_config(f"seed={s}") for s in range(10)]
    key = ensemble_key(configs[0])
    jobs = plan_jobs(configs, tmp_path, max_members={key: members_for_memory(10, 35)})
    assert sorted(map(len, jobs)) == [2, 2, 3, 3]
    assert sorted(i for job in jobs for i in job) == list(range(10))
    assert sorted(map(len, plan_jobs(configs, tmp_path))) == [5, 5]  # CPU cap: 8 members
    assert MAX_ENSEMBLE_MEMBERS == 8


def test_a_compiled_ensemble_traces_as_one_graph_and_equals_the_eager_one(tmp_path, monkeypatch):
    """``train.compile`` compiles the members' vmapped forward, keyed dropout masks included,
    into one graph (no graph breaks), and the members train as in the eager ensemble. The
    test compiles with the ``aot_eager`` backend (dynamo and AOT autograd, no C++ code
    generation) to stay fast on a CPU."""
    import torch._dynamo

    compiled_calls = []
    real_compile = torch.compile

    def compile_for_test(fn, **kwargs):
        compiled_calls.append(fn)
        return real_compile(fn, backend="aot_eager", fullgraph=True)

    monkeypatch.setattr(torch, "compile", compile_for_test)
    common = ["model.dropout=0.1", "train.steps=6", "train.eval_interval=6",
              "train.checkpoint_interval=6"]
    eager = [tiny_config(f"seed={s}", *common) for s in (0, 1)]
    compiled = [tiny_config(f"seed={s}", *common, "train.compile=true") for s in (0, 1)]
    assert len({ensemble_key(c) for c in compiled}) == 1 and ensemble_key(compiled[0])
    torch._dynamo.reset()
    expected = EnsembleTrainer(eager, tmp_path / "eager", printer=None).run()
    got = EnsembleTrainer(compiled, tmp_path / "compiled", printer=None).run()
    # the members' vmapped forward was compiled (lone models passed to compile are modules)
    assert any(not isinstance(fn, torch.nn.Module) for fn in compiled_calls)
    for e, g in zip(expected, got):
        assert g["final"]["iid_test/loss"] == pytest.approx(e["final"]["iid_test/loss"], rel=1e-4)

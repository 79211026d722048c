import torch

import sglab
from tests.conftest import tiny_config

TINY = {"task": {"name": "addition", "train_size": 500, "test_size": 200},
        "model": {"n_layers": 1, "n_heads": 2, "d_model": 16},
        "train": {"steps": 20, "batch_size": 16, "eval_interval": 10, "log_interval": 10,
                  "warmup_steps": 5, "checkpoint_interval": 10, "threads": 2}}


def test_train_run_indexes_the_run_and_restores_the_thread_count(tmp_path):
    torch.set_num_threads(1)
    summary = sglab.train_run(TINY, tmp_path, overrides=["seed=3"])
    assert torch.get_num_threads() == 1  # the run used 2, the caller's setting is back
    assert summary["status"] == "finished" and summary["threads"] == 2
    # what it computed on, since float rounding (and so the trajectory) can differ by CPU
    assert summary["processor"] and summary["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert [row["run_id"] for row in sglab.runs(tmp_path)] == [summary["run_id"]]
    assert sglab.runs(tmp_path, where=["seed=4"]) == []
    again = sglab.train_run(TINY, tmp_path, overrides=["seed=3"])  # finished: not retrained
    assert again == summary


def test_load_run_gives_records_and_the_model(tmp_path):
    config = tiny_config("train.steps=20")
    summary = sglab.train_run(config, tmp_path)
    run = sglab.load_run(tmp_path / summary["run_id"])
    assert run.run_id == summary["run_id"] and run.config == config
    assert [r["step"] for r in run.metrics] == [10, 20]
    assert [r["step"] for r in run.training_loss] == [10, 20]
    model = run.model("best")
    assert not model.training and sum(p.numel() for p in model.parameters()) == summary["parameters"]


def test_plain_train_function_indexes_too(tmp_path):
    from sglab.train import train

    config = tiny_config("train.steps=10")
    train(config, tmp_path, printer=None)
    assert [row["run_id"] for row in sglab.runs(tmp_path)] == [config.run_id()]


def test_runs_as_a_data_frame(tmp_path):
    pandas = __import__("pytest").importorskip("pandas")
    summary = sglab.train_run(TINY, tmp_path, overrides=["seed=3"])
    frame = sglab.runs(tmp_path, as_frame=True)
    assert isinstance(frame, pandas.DataFrame) and len(frame) == 1
    row = frame.iloc[0]
    assert row["run_id"] == summary["run_id"] and row["status"] == "finished"
    assert row["config.model.d_model"] == 16 and row["config.seed"] == 3
    assert row["summary.final.iid_test/exact_match"] == summary["final"]["iid_test/exact_match"]
    empty = sglab.runs(tmp_path, where=["seed=4"], as_frame=True)
    assert len(empty) == 0 and "run_id" in empty.columns


def test_runs_as_a_data_frame_without_pandas_says_how_to_install_it(tmp_path, monkeypatch):
    import sys

    import pytest

    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas fails
    with pytest.raises(sglab.SglabError, match="pip install pandas"):
        sglab.runs(tmp_path, as_frame=True)

import json
import os
import subprocess
import sys

import pytest

from sglab.cli import main
from sglab.config import build_run_config
from sglab.errors import RunBusyError, SglabError
from sglab.train import Trainer
from sglab.train.lock import RunLock
from tests.conftest import trainer_paused_at

OVERRIDES = ["task.train_size=500", "task.test_size=200", "model.n_layers=1", "model.n_heads=2",
             "model.d_model=16", "train.steps=40", "train.batch_size=16", "train.eval_interval=10",
             "train.checkpoint_interval=10", "train.log_interval=10", "train.warmup_steps=5",
             "train.threads=1"]

_HOLDER = trainer_paused_at(20, 120)  # held there until killed


def test_second_launch_of_a_running_config_exits_2_naming_the_holder(tmp_path, capsys):
    config = build_run_config({}, OVERRIDES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path), *OVERRIDES],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        for line in holder.stdout:
            if "eval @ 20" in line:
                break
        run_dir = tmp_path / config.run_id()
        metrics_before = (run_dir / "metrics.jsonl").read_text()
        capsys.readouterr()
        argv = ["train", "--runs-dir", str(tmp_path)] + [f"--set={o}" for o in OVERRIDES]
        assert main(argv) == 2
        error = capsys.readouterr().err
        assert f"process {holder.pid}" in error and "being trained" in error
        assert main(["train", "--resume", config.run_id(), "--runs-dir", str(tmp_path)]) == 2
        assert (run_dir / "metrics.jsonl").read_text() == metrics_before  # no second writer
    finally:
        holder.kill()
        holder.wait()
    # the holder died by SIGKILL and left its lock file: it is stale and taken over
    assert (tmp_path / config.run_id() / ".lock").exists()
    summary = Trainer(config, tmp_path, printer=None).run(resume=True)
    assert summary["status"] == "finished" and summary["step"] == 40
    assert not (tmp_path / config.run_id() / ".lock").exists()
    steps = [json.loads(line)["step"] for line in
             (tmp_path / config.run_id() / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and len(steps) == len(set(steps)) * 2  # train + eval, once


def test_lock_is_exclusive_within_one_process_too(tmp_path):
    with RunLock(tmp_path / "run"):
        with pytest.raises(RunBusyError, match=f"process {os.getpid()}"):
            RunLock(tmp_path / "run").acquire()
    with RunLock(tmp_path / "run"):  # released: free again
        pass
    assert not (tmp_path / "run").exists()  # nothing was written: the directory is gone


def test_failed_task_build_leaves_no_run_directory(tmp_path, capsys):
    assert main(["train", "--runs-dir", str(tmp_path), "--set", "task.name=cogs",
                 "--set", f"task.data_dir={tmp_path / 'missing'}"]) == 2
    assert not [p for p in tmp_path.iterdir() if p.name != "runs.db"]



def test_a_symlinked_lock_is_an_error_and_its_target_is_untouched(tmp_path, capsys):
    config = build_run_config({}, OVERRIDES)
    run_dir = tmp_path / config.run_id()
    run_dir.mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (run_dir / ".lock").symlink_to(target)
    with pytest.raises(SglabError, match="is a symbolic link"):
        RunLock(run_dir).acquire()
    argv = ["train", "--runs-dir", str(tmp_path)] + [f"--set={o}" for o in OVERRIDES]
    assert main(argv) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert target.read_text() == "keep me"
    (tmp_path / "dangling").mkdir()
    (tmp_path / "dangling" / ".lock").symlink_to(tmp_path / "would-be-created")
    with pytest.raises(SglabError, match="is a symbolic link"):
        RunLock(tmp_path / "dangling").acquire()
    assert not (tmp_path / "would-be-created").exists()


def test_a_stale_lock_file_is_taken_over_without_o_creat_races(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").write_text('{"pid": 1, "host": "elsewhere"}')  # a killed holder's
    with RunLock(run_dir):
        assert json.loads((run_dir / ".lock").read_text())["pid"] == os.getpid()
    assert not (run_dir / ".lock").exists()


_INDEXED_HOLDER = """
import sys, time, torch
torch.set_num_threads(1)
from sglab.config import build_run_config
from sglab.store import RunStore
from sglab.train import Trainer
config = build_run_config({}, sys.argv[2:])
def printer(line):
    print(line, flush=True)
    if "eval @ 20" in line:
        time.sleep(120)
Trainer(config, sys.argv[1], store=RunStore(sys.argv[1]), printer=printer).run()
"""


def _listed(tmp_path, capsys, run_id):
    capsys.readouterr()
    assert main(["runs", "--runs-dir", str(tmp_path)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(run_id))
    return line.split()[1], int(line.split()[2])


def test_runs_shows_a_live_runs_step_and_a_killed_one_as_interrupted(tmp_path, capsys):
    config = build_run_config({}, OVERRIDES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", _INDEXED_HOLDER, str(tmp_path), *OVERRIDES],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        for line in holder.stdout:
            if "eval @ 20" in line:
                break
        assert _listed(tmp_path, capsys, config.run_id()) == ("running", 20)
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / config.run_id() / ".lock").exists()  # SIGKILL leaves the lock file
    assert _listed(tmp_path, capsys, config.run_id()) == ("interrupted", 20)
    import sglab

    (row,) = sglab.runs(tmp_path)
    assert row["status"] == "interrupted" and row["step"] == 20

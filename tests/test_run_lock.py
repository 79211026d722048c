import json
import os
import subprocess
import sys

import pytest

from sglab.cli import main
from sglab.config import build_run_config
from sglab.errors import RunBusyError
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


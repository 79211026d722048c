"""Pool workers end with the sweep process that started them, however it ends."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import parent_pids
from tests.test_store_and_sweep import TINY

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")


# so long that no run ends before the test stops it, however slowly the other worker starts
ENDLESS = 10**9


def _children(pid: int) -> list[int]:
    return [child for child, parent in parent_pids().items() if parent == pid]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its parent's reaping is left


def test_sigkill_of_a_pool_sweep_kills_its_workers(tmp_path):
    long = {**TINY, "train": {**TINY["train"], "steps": ENDLESS, "log_interval": 50,
                              "eval_interval": 100_000, "checkpoint_interval": 100_000}}
    spec = tmp_path / "grid.yaml"
    spec.write_text(json.dumps({"name": "orphans", "base": long,
                                "grid": {"model.pos_encoding": ["learned", "none"]}}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "sglab.cli", "sweep", str(spec), "--workers", "2",
         "--no-ensemble", "--threads", "1", "--runs-dir", str(tmp_path / "runs"),
         "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = _wait_until_both_train(sweep)
    ended = "".join(seen[-20:])
    workers = [pid for pid in _children(sweep.pid) if _alive(pid)]
    assert len(workers) >= 2, (f"{len(workers)} live children of the sweep (rc {sweep.poll()}); "
                               f"its output:\n{ended}")
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in workers if _alive(pid)]
    for pid in survivors:  # do not leave them running if the test fails
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


def _long_sweep(tmp_path, name: str) -> subprocess.Popen:
    """A sweep of two long tiny runs on a pool of 2 workers, in its own process group (as a
    terminal runs a command, so that a Ctrl-C reaches every process of it)."""
    long = {**TINY, "train": {**TINY["train"], "steps": ENDLESS, "log_interval": 50,
                              "eval_interval": 100_000, "checkpoint_interval": 100_000}}
    spec = tmp_path / "grid.yaml"
    spec.write_text(json.dumps({"name": name, "base": long,
                                "grid": {"model.pos_encoding": ["learned", "none"]}}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "sglab.cli", "sweep", str(spec), "--workers", "2",
         "--no-ensemble", "--threads", "1", "--runs-dir", str(tmp_path / "runs"),
         "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)


STEP_LINE = re.compile(r"\[([^\]\s]+)\] step ([\d,]+)/")


def _wait_until_both_train(sweep: subprocess.Popen, seconds: float = 300) -> list[str]:
    """The sweep's lines until both runs have logged step 50 or later: every ``[run] step
    N/`` on a line counts, as another worker's text may share it."""
    training, seen = set(), []
    deadline = time.monotonic() + seconds
    for line in sweep.stdout:
        seen.append(line)
        training |= {run for run, step in STEP_LINE.findall(line)
                     if int(step.replace(",", "")) >= 50}
        if len(training) == 2:
            return seen
        if time.monotonic() > deadline:
            sweep.kill()
            raise AssertionError(f"no step 50 from both runs in {seconds:.0f} s:\n"
                                 + "".join(seen[-20:]))
    raise AssertionError(f"the sweep ended (rc {sweep.wait()}) before both runs trained:\n"
                         + "".join(seen[-20:]))


@pytest.mark.parametrize("whom", ["group", "parent"])
def test_ctrl_c_of_a_pool_sweep_checkpoints_every_run_and_exits_130(tmp_path, whom):
    # group: Ctrl-C in a terminal (SIGINT to the sweep and its workers); parent: kill -INT
    sweep = _long_sweep(tmp_path, f"ctrl-c-{whom}")
    try:
        _wait_until_both_train(sweep)
        if whom == "group":
            os.killpg(sweep.pid, signal.SIGINT)
        else:
            sweep.send_signal(signal.SIGINT)
        output, _ = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    assert sweep.returncode == 130, output
    assert "Traceback" not in output and "BrokenProcessPool" not in output, output
    assert "interrupted: 2 run(s) checkpointed" in output, output
    assert "resume with: the same command" in output, output
    for summary_path in (tmp_path / "runs").glob("*/summary.json"):
        summary = json.loads(summary_path.read_text())
        assert summary["status"] == "interrupted", summary
        import torch

        checkpoint = torch.load(summary_path.parent / "checkpoints" / "last.pt", weights_only=True)
        assert checkpoint["step"] == summary["step"] >= 50
    assert len(list((tmp_path / "runs").glob("*/summary.json"))) == 2


def test_a_sweep_piped_to_head_stops_quietly_and_fails_no_run(tmp_path):
    # `sglab sweep ... | head -3`: the reader goes away; the workers' runs must not be
    # recorded as failed (BrokenPipeError), and nothing prints a traceback
    quick = {**TINY, "train": {**TINY["train"], "steps": 300, "log_interval": 5,
                               "eval_interval": 100, "checkpoint_interval": 100}}
    spec = tmp_path / "grid.yaml"
    spec.write_text(json.dumps({"name": "piped", "base": quick,
                                "grid": {"model.pos_encoding": ["learned", "none"]}}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "sglab.cli", "sweep", str(spec), "--workers", "2",
         "--no-ensemble", "--threads", "1", "--runs-dir", str(tmp_path / "runs"),
         "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for _ in range(3):
        sweep.stdout.readline()
    sweep.stdout.close()  # as `head -3` exits
    errors = sweep.stderr.read()
    assert sweep.wait(timeout=300) in (0, 1), errors
    assert "Traceback" not in errors and "Exception ignored" not in errors, errors
    statuses = [json.loads(p.read_text())["status"]
                for p in (tmp_path / "runs").glob("*/summary.json")]
    assert "failed" not in statuses and statuses, statuses


class _Writes:
    """A stdout that records each write."""

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        return len(text)

    def flush(self):
        pass


@pytest.mark.parametrize("printer", ["trainer", "sweep worker"])
def test_a_progress_line_and_its_newline_are_one_write(monkeypatch, printer):
    # processes printing to one pipe interleave writes: a line written apart from its
    # newline can end up inside another worker's line
    import inspect

    from sglab.sweep.jobs import _quiet_on_closed_output
    from sglab.train.loop import Trainer

    trainer_print = inspect.signature(Trainer).parameters["printer"].default
    out = _Writes()
    monkeypatch.setattr(sys, "stdout", out)
    (trainer_print if printer == "trainer" else _quiet_on_closed_output())("[run] step 50/100")
    assert [w for w in out.writes if w] == ["[run] step 50/100\n"]

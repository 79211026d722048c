"""Pool workers end with the sweep process that started them, however it ends."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import parent_pids
from tests.test_store_and_sweep import TINY

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")


def _children(pid: int) -> list[int]:
    return [child for child, parent in parent_pids().items() if parent == pid]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its parent's reaping is left


def test_sigkill_of_a_pool_sweep_kills_its_workers(tmp_path):
    long = {**TINY, "train": {**TINY["train"], "steps": 100_000, "log_interval": 50,
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
    training, seen = set(), []
    for line in sweep.stdout:  # wait until both workers train
        seen.append(line)
        if " step 50/" in line:
            training.add(line.split("]")[0])
        if len(training) == 2:
            break
    ended = "".join(seen[-20:])
    assert len(training) == 2, f"the sweep ended (rc {sweep.wait()}) before both runs trained:\n{ended}"
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

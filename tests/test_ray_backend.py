"""The Ray backend on a local Ray instance (2 CPUs, no dashboard), started by the test."""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from sglab.cli import main
from sglab.sweep import SweepSpec, expand
from sglab.sweep.jobs import sweep_run_ids
from tests.test_store_and_sweep import TINY

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def job_worker_pids() -> list[int]:
    """Processes whose title Ray set to the running task's name."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith("ray::run_job"):
            pids.append(int(entry.name))
    return pids


def kill_a_worker_after_first_checkpoint(run_dir: Path, killed: list,
                                         sweep_done: threading.Event) -> None:
    # no fixed deadline: on a loaded machine Ray may take minutes to start its workers
    while not sweep_done.is_set():
        if (run_dir / "checkpoints" / "last.pt").exists():
            for pid in job_worker_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            if killed:
                return
        time.sleep(0.05)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds Ray workers through /proc")
def test_ray_sweep_survives_a_killed_worker_and_lands_in_the_store(local_ray, tmp_path, capsys):
    from sglab.sweep.ray_backend import run_configs_ray

    base = {**TINY, "train": {**TINY["train"], "steps": 600, "eval_interval": 200,
                              "checkpoint_interval": 100, "log_interval": 200}}
    configs = expand(SweepSpec(base=base, grid={"model.pos_encoding": ["learned", "none"]},
                               seeds=2))
    runs = tmp_path / "runs"
    killed: list[int] = []
    sweep_done = threading.Event()
    watcher = threading.Thread(target=kill_a_worker_after_first_checkpoint,
                               args=(runs / sweep_run_ids(configs, True)[0], killed, sweep_done))
    watcher.start()
    try:
        summaries = run_configs_ray(configs, runs, tag="ray-test", printer=lambda _: None,
                                    poll_seconds=1.0)
    finally:
        sweep_done.set()
        watcher.join()
    assert killed, "no Ray worker was running a job when the first checkpoint appeared"
    assert [s["status"] for s in summaries] == ["finished"] * 4
    # (each cell's seeds start as one ensemble; a retry trains members whose checkpoints
    # are at different steps separately, so the summaries need not say "ensemble_size")
    for run_id in sweep_run_ids(configs, True):  # the retry resumed: one line per evaluation
        lines = (runs / run_id / "metrics.jsonl").read_text().splitlines()
        evaluations = [json.loads(line) for line in lines if '"kind": "train"' not in line]
        assert [record["step"] for record in evaluations] == [200, 400, 600]
    capsys.readouterr()
    assert main(["runs", "--runs-dir", str(runs), "--where", "tag=ray-test"]) == 0
    listing = capsys.readouterr().out
    assert all(c.run_id() in listing for c in configs) and "4 run(s)" in listing


def test_ray_cli_rejects_pool_options(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("base: {task: {name: addition}}\n")
    assert main(["sweep", str(spec), "--backend", "ray", "--workers", "2",
                 "--runs-dir", str(tmp_path / "r")]) == 2
    assert "--workers does not apply to --backend ray" in capsys.readouterr().err

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
from tests.processes import parent_pids
from tests.test_store_and_sweep import TINY

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def job_worker_pids() -> list[int]:
    """Processes whose title Ray set to the running task's name, among the descendants of
    this process (the workers of this test's Ray instance, not of another one on the
    machine: a parallel test run or someone's sweep)."""
    parents = parent_pids()

    def descends_from_us(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    pids = []
    for pid in filter(descends_from_us, parents):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cmdline.startswith("ray::run_job"):
            pids.append(pid)
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
    printed: list[str] = []
    sweep_done = threading.Event()
    watcher = threading.Thread(target=kill_a_worker_after_first_checkpoint,
                               args=(runs / sweep_run_ids(configs, True)[0], killed, sweep_done))
    watcher.start()
    try:
        summaries = run_configs_ray(configs, runs, tag="ray-test", printer=printed.append,
                                    poll_seconds=1.0, progress_seconds=0)
    finally:
        sweep_done.set()
        watcher.join()
    assert killed, "no Ray worker was running a job when the first checkpoint appeared"
    assert [s["status"] for s in summaries] == ["finished"] * 4
    # with progress_seconds 0 every poll prints the progress line, read from the run store
    progress = [line for line in printed if "job(s) running or queued" in line]
    assert progress and all(line.startswith("sweep (ray): ") for line in progress)
    assert any(" step " in line for line in progress), progress
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


def test_run_on_ray_trains_every_stage_as_the_local_backend_does(local_ray, tmp_path, capsys):
    """`sglab run NAME --backend ray`: a two-stage experiment (nets, then masks on them)
    trains on Ray with the same run ids and the same numbers as on the local pool."""
    import torch

    def final_metrics(runs: Path, run_ids: list[str]) -> list[dict]:
        return [json.loads((runs / rid / "summary.json").read_text())["final"] for rid in run_ids]

    args = ["run", "masks-add-mul", "--preset", "quick", "--threads", "1"]
    assert main(args + ["--backend", "ray", "--runs-dir", str(tmp_path / "ray-runs"),
                        "--out", str(tmp_path / "ray-out")]) == 0
    assert "sweep (ray)" in capsys.readouterr().out
    # two local workers: the job plan of the 2-CPU Ray instance (ensembles split alike)
    assert main(args + ["--workers", "2", "--runs-dir", str(tmp_path / "local-runs"),
                        "--out", str(tmp_path / "local-out")]) == 0
    on_ray = json.loads((tmp_path / "ray-out" / "results.json").read_text())
    local = json.loads((tmp_path / "local-out" / "results.json").read_text())
    assert on_ray["runs"] == local["runs"] and len(local["runs"]) > 2
    assert {label["role"] for label in on_ray["labels"]} == {"base", "mask"}  # both stages
    ray_final = final_metrics(tmp_path / "ray-runs", on_ray["runs"])
    local_final = final_metrics(tmp_path / "local-runs", local["runs"])
    for a, b in zip(ray_final, local_final):
        assert a.keys() == b.keys()
        assert all(torch.isclose(torch.tensor(float(a[k])), torch.tensor(float(b[k])))
                   for k in a if k != "seconds")
    assert [c["evidence"] for c in on_ray["claims"]] == [c["evidence"] for c in local["claims"]]


@pytest.mark.parametrize("options, message", [
    (["--backend", "ray", "--workers", "2"], "--workers does not apply to --backend ray"),
    (["--address", "10.0.0.1:6379"], "--address only applies to --backend ray"),
    (["--backend", "slurm"], "unknown backend 'slurm'; available: local, ray"),
])
def test_run_rejects_backend_options_that_do_not_apply(options, message, tmp_path, capsys):
    assert main(["run", "masks-add-mul", "--preset", "quick", "--runs-dir", str(tmp_path / "r"),
                 "--out", str(tmp_path / "o")] + options) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not (tmp_path / "o").exists()


def test_jobs_ask_ray_for_a_gpu_when_their_runs_train_on_cuda():
    from sglab.config import build_run_config
    from sglab.sweep.ray_backend import wants_gpu

    def config(device: str):
        return build_run_config(TINY, {"train.device": device})

    assert wants_gpu(config("cuda"), 0) and wants_gpu(config("cuda"), 4)
    assert wants_gpu(config("auto"), 1)  # the default device on a GPU cluster
    assert not wants_gpu(config("auto"), 0) and not wants_gpu(config("cpu"), 8)

"""A quiet sweep says where it stands: its progress line, read from the run store."""

import json
import os
import threading
import time

from sglab.config import build_run_config
from sglab.sweep import local
from sglab.sweep.local import run_configs
from sglab.sweep.progress import SHOWN_RUNS, Heartbeat, progress_line, run_progress
from tests.test_store_and_sweep import TINY


def _run_dir(root, run_id, records, summary):
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_run_progress_reads_the_last_evaluation_past_train_lines_and_a_half_written_one(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert run_progress(run_dir) == "starting"  # no metrics.jsonl yet
    (run_dir / "summary.json").write_text(json.dumps({"steps": 1000, "target_metric": "m"}))
    (run_dir / "metrics.jsonl").write_text(
        '{"step": 250, "m": 0.1}\n{"step": 500, "m": 0.2}\n'
        '{"kind": "train", "step": 600, "train/loss": 0.5}\n{"step": 75')
    assert run_progress(run_dir) == "step 500/1,000 m 0.200"


def test_progress_line_names_the_runs_written_since_the_start_with_step_and_target(tmp_path):
    started = time.time()
    summary = {"status": "running", "steps": 48000, "target_metric": "ood_valid/exact_match"}
    _run_dir(tmp_path, "ctl-a", [{"step": 250, "ood_valid/exact_match": 0.1},
                                 {"step": 6250, "ood_valid/exact_match": 0.1234}], summary)
    _run_dir(tmp_path, "ctl-b", [], {"status": "running", "steps": 6000})
    old = _run_dir(tmp_path, "ctl-old", [{"step": 10}], summary)  # a run of an earlier sweep
    for name in ("metrics.jsonl", "summary.json"):
        os.utime(old / name, (started - 3600, started - 3600))
    line = progress_line(["ctl-a", "ctl-b", "ctl-old", "ctl-never"], tmp_path, done=3,
                         total=17, started=started)
    assert line.startswith("sweep: 3/17 done after 0.0 min; training: ")
    assert "ctl-a step 6,250/48,000 ood_valid/exact_match 0.123" in line
    assert "ctl-b starting" in line
    assert "ctl-old" not in line and "ctl-never" not in line
    assert progress_line(["ctl-never"], tmp_path, 0, 1, started).endswith(
        "nothing has written a record yet")


def test_progress_line_counts_the_runs_it_does_not_name(tmp_path):
    started = time.time()
    ids = [f"run-{i}" for i in range(SHOWN_RUNS + 3)]
    for run_id in ids:
        _run_dir(tmp_path, run_id, [{"step": 5}], {"steps": 10})
    line = progress_line(ids, tmp_path, 0, len(ids), started)
    assert line.count(" step 5/10") == SHOWN_RUNS and line.endswith("; and 3 more")


def test_progress_line_reads_a_real_run(tmp_path):
    started = time.time()
    config = build_run_config(TINY, [])
    [summary] = run_configs([config], tmp_path, workers=1, threads=1, quiet=True,
                            printer=lambda line: None, progress_seconds=0)
    line = progress_line([summary["run_id"]], tmp_path, 0, 1, started)
    metric = summary["target_metric"]
    value = summary["final"][metric]
    assert f"{summary['run_id']} step 10/10 {metric} {value:.3f}" in line


def test_heartbeat_prints_until_the_block_ends_and_survives_a_failing_line():
    lines, beats = [], threading.Event()

    def line():
        if len(lines) >= 2:
            beats.set()
        return f"beat {len(lines)}"

    with Heartbeat(lines.append, line, seconds=0.01):
        assert beats.wait(10)
    count = len(lines)
    time.sleep(0.05)
    assert len(lines) == count and lines[:2] == ["beat 0", "beat 1"]

    failures = []
    with Heartbeat(failures.append, lambda: 1 / 0, seconds=0.01) as heartbeat:
        heartbeat._thread.join(10)  # it stops itself after the first failure
    assert len(failures) == 1 and "progress line failed" in failures[0]
    with Heartbeat(failures.append, lambda: "never", seconds=0):
        pass
    assert len(failures) == 1


def test_a_quiet_sweep_prints_progress_while_its_runs_train(tmp_path, monkeypatch):
    config = build_run_config(TINY, [])
    run_id = config.run_id()
    printed, seen = [], threading.Event()

    def printer(line):
        printed.append(line)
        if "training:" in line:
            seen.set()

    def fake_job(payload, runs_dir, threads, tag, quiet, execution):
        assert quiet
        _run_dir(tmp_path, run_id, [{"step": 5, "test/exact_match": 0.5}],
                 {"status": "running", "steps": 10, "target_metric": "test/exact_match"})
        assert seen.wait(10), printed  # the heartbeat reports the run while it trains
        return [{"run_id": run_id, "status": "finished"}]

    monkeypatch.setattr(local, "run_job", fake_job)
    run_configs([config], tmp_path, workers=1, threads=1, quiet=True, printer=printer,
                progress_seconds=0.01)
    progress = next(line for line in printed if "training:" in line)
    assert f"{run_id} step 5/10 test/exact_match 0.500" in progress
    assert f"sweep: 1/1 done: {run_id} finished" in printed
    loud = []
    monkeypatch.setattr(local, "run_job", lambda *a: [{"run_id": run_id, "status": "finished"}])
    run_configs([config], tmp_path, workers=1, threads=1, quiet=False, printer=loud.append,
                progress_seconds=0.01)
    assert not any("training:" in line for line in loud)  # trainers print their own lines

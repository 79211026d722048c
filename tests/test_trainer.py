import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from sglab.cli import main
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.store import RunStore, read_metrics
from sglab.train import Trainer
from sglab.train.loop import learning_rate
from tests.conftest import tiny_config, trainer_paused_at


def _weights(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


def test_training_learns_and_writes_a_complete_run_directory(tmp_path):
    config = tiny_config("train.steps=60", "train.lr=0.01")
    store = RunStore(tmp_path)
    summary = Trainer(config, tmp_path, store=store, printer=None).run()
    run_dir = tmp_path / config.run_id()
    assert summary["status"] == "finished" and summary["step"] == 60
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "checkpoints/last.pt",
                 "checkpoints/best.pt"):
        assert (run_dir / name).is_file(), name
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [10, 20, 30, 40, 50, 60]
    every_line = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("kind", "eval") for r in every_line] == ["train", "eval"] * 6
    assert records[-1]["iid_test/loss"] < records[0]["iid_test/loss"]
    assert "iid_test/exact_match/carries=0" in records[-1]
    assert store.query(["status=finished"])[0]["run_id"] == config.run_id()
    # a finished run is reused, not retrained
    again = Trainer(config, tmp_path, printer=None).run()
    assert again == summary


def test_same_config_and_seed_give_identical_weights(tmp_path):
    config = tiny_config()
    Trainer(config, tmp_path / "a", printer=None).run()
    Trainer(config, tmp_path / "b", printer=None).run()
    a, b = _weights(tmp_path / "a" / config.run_id()), _weights(tmp_path / "b" / config.run_id())
    assert all(torch.equal(a[k], b[k]) for k in a)


_KILLABLE = trainer_paused_at(40, 60)  # held there until killed


def test_resume_after_sigkill_is_bit_identical(tmp_path):
    overrides = ["task.train_size=500", "task.test_size=200", "model.n_layers=2",
                 "model.n_heads=2", "model.d_model=16", "model.dropout=0.1", "train.steps=80",
                 "train.batch_size=16", "train.eval_interval=10", "train.checkpoint_interval=20",
                 "train.log_interval=10", "train.warmup_steps=5", "train.threads=1"]
    config = build_run_config({}, overrides)
    killed_dir = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", _KILLABLE, str(killed_dir), *overrides],
                            stdout=subprocess.PIPE, text=True, env=env)
    for line in proc.stdout:
        if "eval @ 40" in line:
            break
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    run_dir = killed_dir / config.run_id()
    # killed after the step-40 evaluation, before its checkpoint: resume from step 20 and
    # drop the metric lines of steps 30 and 40
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["step"] == 20
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 8  # train + eval
    resumed = Trainer(config, killed_dir, printer=None).run(resume=True)
    clean = Trainer(config, tmp_path / "clean", printer=None).run()
    a, b = _weights(run_dir), _weights(tmp_path / "clean" / config.run_id())
    assert all(torch.equal(a[k], b[k]) for k in a)
    timeless = lambda record: {k: v for k, v in record.items() if k != "seconds"}
    assert timeless(resumed["final"]) == timeless(clean["final"])
    metrics_a = (run_dir / "metrics.jsonl").read_text().splitlines()
    metrics_b = (tmp_path / "clean" / config.run_id() / "metrics.jsonl").read_text().splitlines()
    strip = lambda lines: [{k: v for k, v in json.loads(x).items() if k != "seconds"} for x in lines]
    assert strip(metrics_a) == strip(metrics_b)


class _Crash(Exception):
    pass


def test_resume_drops_metrics_written_after_the_checkpoint(tmp_path):
    """A crash between two checkpoints leaves extra metric lines (and maybe a torn last
    line); resuming drops them so every step is logged exactly once."""
    config = tiny_config("train.checkpoint_interval=20", "train.steps=40")
    Trainer(config, tmp_path / "clean", printer=None).run()
    clean = (tmp_path / "clean" / config.run_id() / "metrics.jsonl").read_text()

    def crash_after_step_30_eval(line):
        if "eval @ 30" in line:
            raise _Crash

    with pytest.raises(_Crash):
        Trainer(config, tmp_path / "killed", printer=crash_after_step_30_eval).run()
    run_dir = tmp_path / "killed" / config.run_id()
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["step"] == 20
    with (run_dir / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 4')  # torn line of a write cut short
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 7  # 10-30: train + eval; torn
    Trainer(config, tmp_path / "killed", printer=None).run(resume=True)
    strip = lambda text: [{k: v for k, v in json.loads(x).items() if k != "seconds"}
                          for x in text.splitlines()]
    assert strip((run_dir / "metrics.jsonl").read_text()) == strip(clean)
    assert all(torch.equal(a, b) for a, b in zip(_weights(run_dir).values(),
                                                 _weights(tmp_path / "clean" / config.run_id()).values()))


def test_unfinished_run_without_resume_is_refused(tmp_path):
    config = tiny_config()
    trainer = Trainer(config, tmp_path, printer=None)
    trainer.run()
    summary_path = tmp_path / config.run_id() / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["status"] = "running"
    summary_path.write_text(json.dumps(summary))
    with pytest.raises(SglabError, match="pass --resume"):
        Trainer(config, tmp_path, printer=None).run(resume=False)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_checkpoint_is_a_clear_error_not_a_restart(tmp_path, damage):
    config = tiny_config()
    Trainer(config, tmp_path, printer=None).run()
    run_dir = tmp_path / config.run_id()
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["status"] = "running"
    summary_path.write_text(json.dumps(summary))
    ckpt = run_dir / "checkpoints" / "last.pt"
    data = ckpt.read_bytes()
    ckpt.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"not a checkpoint" * 10,
                      "empty": b""}[damage])
    with pytest.raises(SglabError, match="corrupt or truncated"):
        Trainer(config, tmp_path, printer=None).run(resume=True)
    assert ckpt.read_bytes() != data  # nothing was silently rewritten


def test_learning_rate_schedule():
    cfg = tiny_config("train.steps=100", "train.warmup_steps=10", "train.lr=0.01",
                      "train.min_lr=0.001").train
    assert learning_rate(0, cfg) == pytest.approx(0.001)
    assert learning_rate(9, cfg) == pytest.approx(0.01)
    assert learning_rate(10, cfg) == pytest.approx(0.01)
    assert learning_rate(100, cfg) == pytest.approx(0.001)
    assert 0.001 < learning_rate(55, cfg) < 0.01


def test_training_loss_is_recorded_every_log_interval(tmp_path):
    config = tiny_config("train.steps=40", "train.log_interval=5", "train.eval_interval=20")
    Trainer(config, tmp_path, printer=None).run()
    records = read_metrics(tmp_path / config.run_id(), kind="train")
    assert [r["step"] for r in records] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert all(r["train/loss"] > 0 and r["lr"] > 0 for r in records)
    assert records[-1]["train/loss"] < records[0]["train/loss"]


def test_resume_between_logs_keeps_the_training_loss_records_identical(tmp_path):
    """A checkpoint in the middle of a logging window: the window's loss sum travels with
    the checkpoint, so the resumed run writes the same records as an uninterrupted one."""
    config = tiny_config("train.steps=40", "train.log_interval=10", "train.checkpoint_interval=15",
                         "train.eval_interval=20")
    Trainer(config, tmp_path / "clean", printer=None).run()

    def crash_after_step_20_eval(line):
        if "eval @ 20" in line:
            raise _Crash

    with pytest.raises(_Crash):
        Trainer(config, tmp_path / "killed", printer=crash_after_step_20_eval).run()
    Trainer(config, tmp_path / "killed", printer=None).run(resume=True)
    strip = lambda path: [{k: v for k, v in r.items() if k != "seconds"}
                          for r in read_metrics(path / config.run_id(), kind="all")]
    assert strip(tmp_path / "killed") == strip(tmp_path / "clean")


def test_non_finite_loss_fails_the_run_at_its_step_with_valid_json(tmp_path):
    config = tiny_config("train.lr=10000", "train.grad_clip=null", "train.warmup_steps=0",
                         "train.lr_schedule=constant", "train.steps=200")
    store = RunStore(tmp_path)
    summary = Trainer(config, tmp_path, store=store, printer=None).run()
    run_dir = tmp_path / config.run_id()
    assert summary["status"] == "failed"
    assert summary["step"] < 200
    assert f"at step {summary['step']}" in summary["error"]
    assert "train.lr" in summary["error"] and "grad_clip" in summary["error"]
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name} in metrics.jsonl"))
    json.loads((run_dir / "summary.json").read_text(),
               parse_constant=lambda name: pytest.fail(f"bare {name} in summary.json"))
    assert store.query(["status=failed"])[0]["run_id"] == config.run_id()


def test_bit_flipped_checkpoint_is_refused_by_the_cli(tmp_path, capsys):
    config = tiny_config()
    Trainer(config, tmp_path, printer=None).run()
    run_dir = tmp_path / config.run_id()
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    checkpoint = run_dir / "checkpoints" / "last.pt"
    data = bytearray(checkpoint.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    checkpoint.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["train", "--resume", config.run_id(), "--runs-dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert str(checkpoint) in error and ("damaged" in error or "corrupt" in error)
    assert checkpoint.read_bytes() == bytes(data)  # nothing was rewritten


def test_a_run_trained_under_other_code_is_reused_with_a_warning_naming_both(tmp_path):
    from sglab.provenance import provenance

    config = tiny_config("train.steps=10")
    lines: list[str] = []
    summary = Trainer(config, tmp_path, printer=lines.append).run()
    assert summary["sglab"] == provenance()  # the summary records the code that trained it
    run_dir = tmp_path / summary["run_id"]
    stamp = (run_dir / "checkpoints" / "last.pt").stat().st_mtime_ns
    lines.clear()
    Trainer(config, tmp_path, printer=lines.append).run()
    assert not any("warning" in line for line in lines)  # same code: plain reuse
    older = {**summary, "sglab": {**summary["sglab"], "source_hash": "0123456789abcdef",
                                  "commit": "f" * 40}}
    (run_dir / "summary.json").write_text(json.dumps(older))
    lines.clear()
    again = Trainer(config, tmp_path, printer=lines.append).run()
    warning = next(line for line in lines if "warning: reusing" in line)
    assert "source 0123456789abcdef, commit fffffff" in warning
    assert f"source {provenance()['source_hash']}" in warning
    assert again["step"] == summary["step"]
    assert (run_dir / "checkpoints" / "last.pt").stat().st_mtime_ns == stamp  # not retrained


def test_a_metrics_file_that_lost_records_is_an_error_never_a_silent_gap(tmp_path):
    config = tiny_config("train.checkpoint_interval=20", "train.steps=40")

    def crash_after_step_30_eval(line):
        if "eval @ 30" in line:
            raise _Crash

    with pytest.raises(_Crash):
        Trainer(config, tmp_path, printer=crash_after_step_30_eval).run()
    path = tmp_path / config.run_id() / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]))  # the records up to step 20 lost two of their lines
    with pytest.raises(SglabError, match="records were lost"):
        Trainer(config, tmp_path, printer=None).run(resume=True)


def test_a_truncated_final_record_is_an_error_not_a_dropped_evaluation(tmp_path):
    config = tiny_config()
    summary = Trainer(config, tmp_path, printer=None).run()
    run_dir = tmp_path / summary["run_id"]
    path = run_dir / "metrics.jsonl"
    text = path.read_text()
    assert read_metrics(run_dir)[-1]["step"] == summary["step"]
    path.write_text(text[:-20])  # the last evaluation cut short
    with pytest.raises(SglabError, match="cut short"):
        read_metrics(run_dir)
    assert read_metrics(run_dir, while_training=True)[-1]["step"] < summary["step"]
    path.write_text(text.replace("{", "{{", 1))
    with pytest.raises(SglabError, match="line 1 is not a JSON record"):
        read_metrics(run_dir)

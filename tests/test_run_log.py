"""TensorBoard event files: the same scalars as metrics.jsonl, a resumed run's events cut
back to its checkpoint as metrics.jsonl is, no effect on the run id, clear errors."""

import builtins
import struct

import pytest

from sglab.cli import main
from sglab.errors import SglabError
from sglab.store import read_metrics
from sglab.train import Trainer
from sglab.train.run_log import ENV
from tests.conftest import tiny_config

event_pb2 = pytest.importorskip("tensorboardX.proto.event_pb2")


class _Crash(Exception):
    pass


def _scalars(log_dir) -> dict[str, dict[int, float]]:
    """tag -> {step: value} as TensorBoard reads the run's event files: in order, a
    restart event at step s (file_version with a step) drops what was logged at steps >= s."""
    scalars: dict[str, dict[int, float]] = {}
    for path in sorted(log_dir.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime_ns):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4  # length, its crc, the record, its crc
            if event.file_version and event.step:
                for values in scalars.values():
                    for step in [s for s in values if s >= event.step]:
                        del values[step]
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


def test_event_files_hold_the_scalars_of_metrics_jsonl_and_leave_the_run_id(tmp_path, monkeypatch):
    config = tiny_config()
    monkeypatch.setenv(ENV, "1")
    Trainer(config, tmp_path, printer=None).run()
    run_dir = tmp_path / config.run_id()
    scalars = _scalars(run_dir / "tensorboard")
    records = read_metrics(run_dir)
    assert [r["step"] for r in records] == [10, 20, 30]
    for record in records:
        for key in ("iid_test/exact_match", "iid_test/loss", "lr"):
            assert scalars[key][record["step"]] == pytest.approx(record[key], rel=1e-6)
    assert sorted(scalars["train/loss"]) == [10, 20, 30]
    monkeypatch.setenv(ENV, "0")
    assert tiny_config().run_id() == config.run_id()


def test_a_resumed_run_drops_the_events_its_checkpoint_did_not_keep(tmp_path, monkeypatch):
    config = tiny_config("train.checkpoint_interval=20", "train.steps=40")
    monkeypatch.setenv(ENV, "1")
    seen = []

    def crash_after_step_30_eval(line):
        seen.append(line)
        if "eval @ 30" in line:
            raise _Crash

    with pytest.raises(_Crash):
        Trainer(config, tmp_path, printer=crash_after_step_30_eval).run()
    run_dir = tmp_path / config.run_id()
    before = _scalars(run_dir / "tensorboard")["iid_test/loss"]
    assert sorted(before) == [10, 20, 30]
    Trainer(config, tmp_path, printer=None).run(resume=True)  # from the checkpoint at 20
    after = _scalars(run_dir / "tensorboard")["iid_test/loss"]
    records = {r["step"]: r["iid_test/loss"] for r in read_metrics(run_dir)}
    assert sorted(after) == sorted(records) == [10, 20, 30, 40]
    assert after == pytest.approx(records, rel=1e-6)


def test_without_tensorboardx_the_switch_is_a_clear_error_before_any_file(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_tensorboardx(name, *args, **kwargs):
        if name.startswith("tensorboardX"):
            raise ImportError("No module named 'tensorboardX'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboardx)
    monkeypatch.setenv(ENV, "1")
    config = tiny_config()
    with pytest.raises(SglabError, match=r"sglab\[tensorboard\]"):
        Trainer(config, tmp_path, printer=None).run()
    assert not (tmp_path / config.run_id() / "metrics.jsonl").exists()


def test_a_bad_switch_value_exits_2_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV, "maybe")
    assert main(["train", "--runs-dir", str(tmp_path), "--set", "train.steps=10"]) == 2
    assert "SGLAB_TENSORBOARD='maybe'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_cli_switch_writes_event_files(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "0")  # restored after the test (the switch sets it to 1)
    settings = ["task.train_size=500", "task.test_size=200", "model.n_layers=2",
                "model.n_heads=2", "model.d_model=16", "train.steps=10", "train.batch_size=16",
                "train.eval_interval=10", "train.threads=1"]
    overrides = [x for setting in settings for x in ("--set", setting)]
    assert main(["--tensorboard", "train", "--runs-dir", str(tmp_path), *overrides]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert sorted(_scalars(run_dir / "tensorboard")["iid_test/loss"]) == [10]

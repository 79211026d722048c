"""Mistakes a user can make end in one message and exit 2, never a traceback."""

import errno
import json
import os

import pytest

from sglab.cli import main
from sglab.errors import SglabError
from sglab.store import RunStore
from sglab.train import Trainer
from tests.conftest import tiny_config


@pytest.mark.parametrize("content", ["", "# nothing here\n", "name: only-a-name\n", "[1, 2]\n"])
def test_empty_or_mapping_less_sweep_file_is_an_error(tmp_path, capsys, content):
    spec = tmp_path / "grid.yaml"
    spec.write_text(content)
    assert main(["sweep", str(spec), "--runs-dir", str(tmp_path / "runs"),
                 "--out", str(tmp_path / "out")]) == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_runs_dir_that_is_a_file_is_an_error(tmp_path, capsys):
    not_a_dir = tmp_path / "runs"
    not_a_dir.write_text("x")
    for argv in (["runs"], ["train", "--set", "train.steps=1"]):
        assert main([*argv, "--runs-dir", str(not_a_dir)]) == 2
        assert "is a file, not a directory" in capsys.readouterr().err


def test_damaged_summary_is_an_error_and_reindex_names_the_run(tmp_path, capsys):
    config = tiny_config("train.steps=10")
    Trainer(config, tmp_path, printer=None).run()
    summary = tmp_path / config.run_id() / "summary.json"
    summary.write_text('{"run_id": "truncat')
    assert main(["train", "--resume", config.run_id(), "--runs-dir", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert str(summary) in error and "damaged" in error
    assert main(["report", str(tmp_path / config.run_id())]) == 2
    assert "damaged" in capsys.readouterr().err
    assert main(["runs", "--reindex", "--runs-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "indexed 0 runs" in captured.out
    assert f"skipped {config.run_id()}" in captured.err


def test_runs_where_rejects_keys_no_run_has(tmp_path, capsys):
    Trainer(tiny_config("train.steps=10"), tmp_path, printer=None, store=RunStore(tmp_path)).run()
    assert main(["runs", "--runs-dir", str(tmp_path), "--where", "model.pos_encodng=none"]) == 2
    error = capsys.readouterr().err
    assert "model.pos_encodng" in error and "model.pos_encoding" in error  # a suggestion
    for known in ("model.pos_encoding=learned", "final.iid_test/exact_match>=0", "status=finished"):
        assert main(["runs", "--runs-dir", str(tmp_path), "--where", known]) == 0
        assert "1 run(s)" in capsys.readouterr().out, known



# ----------------------------------------------------------------- run ids given to train

def _trained(tmp_path, *overrides):
    config = tiny_config("train.steps=10", *overrides)
    Trainer(config, tmp_path / "runs", printer=None, store=RunStore(tmp_path / "runs")).run()
    return config


def test_an_empty_run_id_is_an_error_not_the_default_run(tmp_path, capsys):
    runs = tmp_path / "runs"
    for argv in (["--resume", ""], ["--resume", "  "], ["--extend", "", "--steps", "10"]):
        assert main(["train", "--runs-dir", str(runs), *argv]) == 2, argv
        assert "empty run id" in capsys.readouterr().err
    assert not runs.exists()  # nothing trained


def test_a_run_outside_the_store_is_not_trained_into_it(tmp_path, capsys):
    outside = _trained(tmp_path / "outside")
    store = tmp_path / "store"
    store.mkdir()
    for option in (["--resume"], ["--extend"]):
        argv = ["train", "--runs-dir", str(store), *option,
                f"../outside/runs/{outside.run_id()}"] + (["--steps", "20"] if option == ["--extend"]
                                                          else [])
        assert main(argv) == 2
        assert "takes a run id, not a path" in capsys.readouterr().err
    assert list(store.iterdir()) == []


def test_a_renamed_run_directory_is_not_trained_under_its_config_id(tmp_path, capsys):
    config = _trained(tmp_path)
    runs = tmp_path / "runs"
    (runs / config.run_id()).rename(runs / "my-copy")
    assert main(["train", "--runs-dir", str(runs), "--resume", "my-copy"]) == 2
    assert f"holds the config of run {config.run_id()}" in capsys.readouterr().err
    assert not (runs / config.run_id()).exists()


# ----------------------------------------------------------------- sweep outputs

def _sweep_file(path, name, seeds=1):
    from tests.test_store_and_sweep import TINY

    path.write_text(json.dumps({"name": name, "base": TINY, "seeds": seeds}))
    return path


def test_two_sweeps_do_not_share_an_output_directory(tmp_path, capsys):
    out, runs = tmp_path / "out", tmp_path / "runs"
    first = _sweep_file(tmp_path / "a.yaml", "alpha")
    common = ["--runs-dir", str(runs), "--out", str(out), "--workers", "1"]
    assert main(["sweep", str(first), *common]) == 0
    report = (out / "results.json").read_text()
    second = _sweep_file(tmp_path / "b.yaml", "beta", seeds=2)
    assert main(["sweep", str(second), *common]) == 2
    error = capsys.readouterr().err
    assert "sweep 'alpha'" in error and str(first) in error and "--out" in error
    assert (out / "results.json").read_text() == report
    assert len(list(runs.glob("*/summary.json"))) == 1  # refused before training
    assert main(["sweep", str(first), *common, "--set", "train.lr=0.01"]) == 2  # another sweep
    capsys.readouterr()
    _sweep_file(first, "alpha", seeds=2)  # the same sweep, edited and rerun
    assert main(["sweep", str(first), *common]) == 0
    assert json.loads((out / "results.json").read_text())["sweep"]["name"] == "alpha"


def test_a_sweep_name_must_be_a_plain_file_name(tmp_path, capsys):
    for name in ("../escape", "a/b", "..", "", ".hidden"):
        spec = _sweep_file(tmp_path / "s.yaml", name)
        assert main(["sweep", str(spec), "--runs-dir", str(tmp_path / "runs")]) == 2, name
        assert "plain file name" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path.parent / "escape").exists()


# ----------------------------------------------------------------- reports

def test_a_report_embeds_only_png_figures_of_its_own_directory(tmp_path, capsys):
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG\r\n\x1a\nSECRET-BYTES")
    (tmp_path / "passwd").write_text("root:x:0:0:SECRET")
    out = tmp_path / "a" / "b" / "report"
    out.mkdir(parents=True)
    (out / "figures").mkdir()
    (out / "figures" / "ok.png").write_bytes(b"\x89PNG\r\n\x1a\nGOOD-BYTES")
    (out / "figures" / "text.png").write_text("not a png")
    (out / "figures" / "link.png").symlink_to(secret)
    files = ["figures/ok.png", "../../../passwd", str(tmp_path / "passwd"), str(secret),
             "../../../secret.png", "figures/link.png", "figures/text.png", "/etc/passwd"]
    (out / "results.json").write_text(json.dumps({
        "title": "crafted", "sections": [{"title": "s", "figures": [{"file": f} for f in files]}]}))
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    import base64

    assert base64.b64encode(b"\x89PNG\r\n\x1a\nGOOD-BYTES").decode() in page
    assert "SECRET" not in page and base64.b64encode(b"root:x:0:0").decode()[:8] not in page
    assert base64.b64encode(b"\x89PNG\r\n\x1a\nSECRET").decode()[:16] not in page
    assert page.count("missing figure") == len(files) - 1


# ----------------------------------------------------------------- damaged inputs

def test_an_alias_bomb_config_is_a_short_error(tmp_path, capsys):
    import time

    levels = "".join(f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]\n"
                     for k in range(1, 10))
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text('l0: &l0 ["lol"]\n' + levels + "train: {steps: *l9}\n")
    assert len(bomb.read_bytes()) < 1000
    started = time.monotonic()
    assert main(["train", "--config", str(bomb), "--runs-dir", str(tmp_path / "runs")]) == 2
    error = capsys.readouterr().err
    assert time.monotonic() - started < 20
    assert len(error) < 3000 and "train.steps = [[[" in error


@pytest.mark.parametrize("option", ["train.lr=.inf", "train.lr=.nan", "train.grad_clip=.inf",
                                    "train.target_threshold=-.inf"])
def test_non_finite_numbers_are_config_errors(tmp_path, capsys, option):
    assert main(["train", "--runs-dir", str(tmp_path / "runs"), "--set", option]) == 2
    assert "finite number" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_config_files_that_cannot_be_read_as_text(tmp_path, capsys):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("task: {name: addition}\n# caf\xe9\n".encode("latin-1"))
    assert main(["train", "--config", str(latin), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "is not UTF-8" in capsys.readouterr().err
    assert main(["sweep", str(latin), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "is not UTF-8" in capsys.readouterr().err
    assert main(["train", "--config", str(tmp_path), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["train", "--set", "task.name=[1]", "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "name must be a string" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_runs_dir_under_a_file_or_a_dangling_link(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for argv in (["runs"], ["train", "--set", "train.steps=1"], ["runs", "--reindex"]):
        assert main([*argv, "--runs-dir", str(tmp_path / "file" / "runs")]) == 2
        assert "is a file" in capsys.readouterr().err
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    assert main(["runs", "--runs-dir", str(tmp_path / "gone")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_dangling_run_directory_link_is_an_error(tmp_path, capsys):
    config = tiny_config("train.steps=10")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / config.run_id()).symlink_to(tmp_path / "moved-away")
    argv = ["train", "--runs-dir", str(runs), "--config", str(tmp_path / "c.yaml")]
    (tmp_path / "c.yaml").write_text(__import__("yaml").safe_dump(config.to_dict()))
    assert main(argv) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert main(["train", "--runs-dir", str(runs), "--resume", config.run_id()]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert main(["runs", "--reindex", "--runs-dir", str(runs)]) == 0
    assert not (tmp_path / "moved-away").exists()


def test_a_corrupt_index_is_an_error_and_reindex_rebuilds_it(tmp_path, capsys):
    config = _trained(tmp_path)
    runs = tmp_path / "runs"
    for name in ("runs.db-wal", "runs.db-shm"):
        (runs / name).unlink(missing_ok=True)
    (runs / "runs.db").write_bytes(b"this is not an SQLite database" * 40)
    capsys.readouterr()
    assert main(["runs", "--runs-dir", str(runs)]) == 2
    error = capsys.readouterr().err
    assert "is damaged" in error and "sglab runs --reindex" in error and "Traceback" not in error
    assert main(["runs", "--runs-dir", str(runs), "--reindex"]) == 0
    captured = capsys.readouterr()
    assert "indexed 1 runs" in captured.out and config.run_id() in captured.out
    assert "runs.db.damaged" in captured.err and (runs / "runs.db.damaged").exists()
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    assert "1 run(s)" in capsys.readouterr().out


def test_reindex_drops_runs_whose_directory_was_deleted(tmp_path, capsys):
    import shutil

    kept, deleted = _trained(tmp_path, "seed=1"), _trained(tmp_path, "seed=2")
    runs = tmp_path / "runs"
    shutil.rmtree(runs / deleted.run_id())
    assert main(["runs", "--runs-dir", str(runs), "--reindex"]) == 0
    out = capsys.readouterr().out
    assert kept.run_id() in out and deleted.run_id() not in out and "1 run(s)" in out


def test_renamed_parameter_in_a_checkpoint_names_the_file(tmp_path, capsys):
    import sglab
    from sglab.train.checkpoints import load_checkpoint, save_checkpoint

    config = _trained(tmp_path)
    run_dir = tmp_path / "runs" / config.run_id()
    for name in ("last.pt", "best.pt"):
        path = run_dir / "checkpoints" / name
        state = load_checkpoint(path)
        key = next(iter(state["model"]))
        state["model"]["renamed." + key] = state["model"].pop(key)
        save_checkpoint(path, state)
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    assert main(["train", "--runs-dir", str(tmp_path / "runs"), "--resume", config.run_id()]) == 2
    error = capsys.readouterr().err
    assert "last.pt" in error and "does not fit the model" in error and "Traceback" not in error
    with pytest.raises(SglabError, match="best.pt"):
        sglab.load_run(run_dir).model("best")
    from sglab.train.loop import load_model  # the library call, not only the CLI

    with pytest.raises(SglabError, match="last.pt.*does not fit the model"):
        load_model(run_dir, "last")


# ----------------------------------------------------------------- the machine

class _FullDisk:
    """``sglab.io``'s view of ``os`` in which writing a file whose name contains ``which``
    fails as on a full disk."""

    def __init__(self, which: str):
        self.which = which

    def __getattr__(self, name):
        return getattr(os, name)

    def fdopen(self, fd, *args, **kwargs):
        handle = os.fdopen(fd, *args, **kwargs)
        if self.which not in os.readlink(f"/proc/self/fd/{fd}"):
            return handle
        which = self.which

        class Full:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                handle.close()

            def write(self, data):
                raise OSError(errno.ENOSPC, "No space left on device", f".../{which}")

            def __getattr__(self, name):
                return getattr(handle, name)

        return Full()


def test_a_full_disk_on_the_first_write_leaves_nothing(tmp_path, monkeypatch, capsys):
    import sglab.io

    monkeypatch.setattr(sglab.io, "os", _FullDisk(""))
    runs = tmp_path / "runs"
    assert main(["train", "--runs-dir", str(runs), "--set", "train.steps=5",
                 "--set", "task.train_size=300", "--set", "task.test_size=50"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no space left" in error
    assert [p.name for p in runs.iterdir() if p.name != "runs.db"] == []


def test_a_full_disk_at_a_checkpoint_keeps_the_run_resumable(tmp_path, monkeypatch, capsys):
    import sglab.io

    config = tiny_config("train.steps=20")
    (tmp_path / "c.yaml").write_text(__import__("yaml").safe_dump(config.to_dict()))
    runs = tmp_path / "runs"
    monkeypatch.setattr(sglab.io, "os", _FullDisk("last.pt"))
    assert main(["train", "--runs-dir", str(runs), "--config", str(tmp_path / "c.yaml")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no space left" in error and "Traceback" not in error
    run_dir = runs / config.run_id()
    assert not list(run_dir.rglob("*.tmp")) and not (run_dir / ".lock").exists()
    monkeypatch.undo()  # space freed
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    assert "interrupted" in capsys.readouterr().out  # not running for ever
    assert main(["train", "--runs-dir", str(runs), "--resume", config.run_id()]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"


def test_an_out_of_memory_batch_is_one_line_with_a_hint(tmp_path, monkeypatch, capsys):
    from sglab.train.loop import LoneStep

    def step(self, runs, lrs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.1 GiB "
                           "total capacity)")

    monkeypatch.setattr(LoneStep, "step", step)
    assert main(["train", "--runs-dir", str(tmp_path / "runs"), "--set", "train.steps=5",
                 "--set", "task.train_size=300", "--set", "task.test_size=50"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "out of memory" in error and "train.batch_size" in error


def test_an_unwritable_out_is_refused_before_training(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    spec = _sweep_file(tmp_path / "s.yaml", "s")
    runs = tmp_path / "runs"
    for argv in (["sweep", str(spec)], ["train", "--set", "train.steps=2"]):
        for out in (tmp_path / "file", tmp_path / "file" / "out"):
            assert main([*argv, "--runs-dir", str(runs), "--out", str(out)]) == 2
            assert "--out" in capsys.readouterr().err
    assert not runs.exists()


def _unshare_works() -> bool:
    import shutil
    import subprocess

    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare -rm (a private mount namespace)")
def test_a_read_only_store_is_listed_and_refuses_training(tmp_path):
    import subprocess
    import sys

    config = _trained(tmp_path)
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}

    def read_only(*argv):  # runs dir bind-mounted read-only, as a colleague's store is
        script = (f'mount --bind "{runs}" "{runs}" && mount -o remount,bind,ro "{runs}" && exec '
                  + " ".join(f"'{a}'" for a in [sys.executable, "-m", "sglab.cli", *argv,
                                                  "--runs-dir", str(runs)]))
        return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True,
                              text=True, env=env, timeout=120)

    listing = read_only("runs")
    assert listing.returncode == 0, listing.stderr
    assert config.run_id() in listing.stdout and "1 run(s)" in listing.stdout
    assert read_only("runs", "--csv").returncode == 0
    training = read_only("train", "--set", "train.steps=2", "--set", "seed=5")
    assert training.returncode == 2, training.stderr
    assert "Traceback" not in training.stderr and training.stderr.startswith("error:")

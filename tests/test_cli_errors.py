"""Mistakes a user can make end in one message and exit 2, never a traceback."""

import pytest

from sglab.cli import main
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


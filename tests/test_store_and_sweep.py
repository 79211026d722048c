import json

import pytest

from sglab.cli import main
from sglab.errors import SglabError
from sglab.store import RunStore
from sglab.sweep import SweepSpec, expand, run_configs

TINY = {
    "task": {"name": "addition", "train_size": 300, "test_size": 50},
    "model": {"n_layers": 1, "n_heads": 1, "d_model": 8},
    "train": {"steps": 10, "batch_size": 8, "eval_interval": 10, "log_interval": 10,
              "warmup_steps": 2, "checkpoint_interval": 10},
}


def test_grid_expansion_is_the_product_times_seeds():
    spec = SweepSpec(base=TINY, grid={"model.pos_encoding": ["learned", "none"],
                                      "model.residual_ablation": [[], [0]]}, seeds=3)
    configs = expand(spec)
    assert len(configs) == 12
    assert len({c.run_id() for c in configs}) == 12
    assert {(c.model.positions.kind, tuple(c.model.block.residual_ablation), c.seed)
            for c in configs} == {
        (p, a, s) for p in ("learned", "none") for a in ((), (0,)) for s in range(3)}


def test_bad_grid_value_fails_before_anything_runs(tmp_path):
    spec = SweepSpec(base=TINY, grid={"model.pos_encoding": ["learned", "bogus"]})
    with pytest.raises(SglabError, match="model.pos_encoding = 'bogus'"):
        expand(spec)


def test_pool_sweep_stores_runs_and_rerun_skips_them(tmp_path, capsys):
    spec = SweepSpec(base=TINY, grid={"model.pos_encoding": ["learned", "none"]}, seeds=1)
    configs = expand(spec)
    summaries = run_configs(configs, tmp_path, workers=2, quiet=True, tag="t")
    assert [s["status"] for s in summaries] == ["finished", "finished"]
    first = [json.loads((tmp_path / s["run_id"] / "summary.json").read_text()) for s in summaries]
    again = run_configs(configs, tmp_path, workers=1, tag="t", printer=lambda _: None)
    assert again == first  # nothing retrained
    assert "already finished" in capsys.readouterr().out
    store = RunStore(tmp_path)
    assert len(store.query(["tag=t"])) == 2
    nope = store.query(["model.pos_encoding=none"])
    assert [r["config"]["model"]["positions"]["kind"] for r in nope] == ["none"]
    # the old flat name and the families' path find the same runs
    assert nope == store.query(["model.positions.kind=none"])
    assert len(store.query(["final.iid_test/exact_match>=0"])) == 2
    assert store.query(["step<5"]) == []
    with pytest.raises(SglabError, match="cannot read filter"):
        store.query(["nonsense"])
    # the index can be rebuilt from the run directories alone
    store.db_path.unlink()
    assert store.reindex() == 2 and len(store.query()) == 2


def test_sweep_cli_writes_a_report(tmp_path, capsys):
    spec_path = tmp_path / "grid.yaml"
    spec_path.write_text(json.dumps({"name": "g", "base": TINY,
                                     "grid": {"model.pos_encoding": ["learned", "none"]}}))
    code = main(["sweep", str(spec_path), "--runs-dir", str(tmp_path / "runs"),
                 "--out", str(tmp_path / "out"), "--workers", "1"])
    assert code == 0
    assert (tmp_path / "out" / "report.html").read_text().count("finished") == 2
    code = main(["runs", "--runs-dir", str(tmp_path / "runs"), "--where", "model.pos_encoding=none"])
    assert code == 0 and "1 run(s)" in capsys.readouterr().out


def test_cli_train_resume_and_report(tmp_path, capsys):
    runs = tmp_path / "runs"
    args = ["train", "--runs-dir", str(runs), "--set", "task.train_size=300",
            "--set", "task.test_size=50", "--set", "model.n_layers=1", "--set", "model.d_model=8",
            "--set", "train.steps=10", "--set", "train.eval_interval=5",
            "--set", "train.log_interval=5", "--set", "train.batch_size=8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "step 5/10" in out and "ETA" in out and "eval @ 10" in out
    run_id = RunStore(runs).query()[0]["run_id"]
    assert main(["train", "--runs-dir", str(runs), "--resume", run_id]) == 0
    assert "already finished" in capsys.readouterr().out
    assert main(["train", "--runs-dir", str(runs), "--resume", "nope"]) == 2
    assert main(["report", str(runs / run_id)]) == 0
    assert "data:image/png;base64" in (runs / run_id / "report.html").read_text()


def test_sweep_can_start_from_an_experiment_preset(tmp_path):
    spec_path = tmp_path / "grid.yaml"
    spec_path.write_text(json.dumps({
        "name": "p", "base": {"train": {"steps": 4, "eval_interval": 4, "log_interval": 4},
                              "task": {"train_size": 300, "test_size": 20}},
        "grid": {"model.pos_encoding": ["none"]}}))
    assert main(["sweep", str(spec_path), "--preset", "symmetry:quick", "--workers", "1",
                 "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == 0
    (row,) = RunStore(tmp_path / "runs").query()
    # the preset's model (3 layers, d=32) with the sweep file's train and task values on top
    assert row["config"]["model"]["n_layers"] == 3 and row["config"]["model"]["d_model"] == 32
    assert row["config"]["train"]["steps"] == 4 and row["config"]["train"]["lr"] == 3e-3
    assert row["config"]["task"]["train_size"] == 300
    assert main(["sweep", str(spec_path), "--preset", "symmetry", "--runs-dir",
                 str(tmp_path / "runs")]) == 2


def test_runs_csv_has_the_rows_of_the_table(tmp_path, capsys):
    import csv
    import io

    spec = SweepSpec(name="c", base=TINY, grid={"model.pos_encoding": ["learned", "none"]})
    run_configs(expand(spec), tmp_path, workers=1, tag="sweep/c", printer=lambda _: None)
    capsys.readouterr()
    assert main(["runs", "--runs-dir", str(tmp_path), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["status"] for row in rows] == ["finished", "finished"]
    assert {row["run_id"] for row in rows} == {c.run_id() for c in expand(spec)}
    assert all(row["step"] == "10" and row["tag"] == "sweep/c" for row in rows)
    assert all(row["target_metric"] == "iid_test/exact_match" and float(row["value"]) >= 0
               for row in rows)
    assert main(["runs", "--runs-dir", str(tmp_path), "--csv", "--json"]) == 2


def test_version_prints_the_version_and_source_hash(capsys):
    from sglab import __version__
    from sglab.provenance import source_hash

    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"sglab {__version__} (source {source_hash()}")

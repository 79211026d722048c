"""End-to-end: the symmetry experiment at its quick preset (about half a minute)."""

import json

import pytest
import torch

from sglab import registry
from sglab.cli import main
from sglab.experiments import run_experiment
from sglab.store import RunStore, read_labels
from sglab.train.loop import processor


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("symmetry")
    results = run_experiment(registry.experiment("symmetry"), "quick", root / "out",
                             root / "runs", workers=2, printer=lambda _: None)
    return root, results


def test_quick_preset_writes_results_and_a_self_contained_report(quick_results):
    root, results = quick_results
    on_disk = json.loads((root / "out" / "results.json").read_text())
    assert on_disk["claims"] == results["claims"]
    ids = [c["id"] for c in results["claims"]]
    assert ids == ["nope-matches-learned-pe", "bidirectional-nope-permutation-invariant",
                   "bidirectional-nope-cannot-learn", "residual-ablation-hurts-convergence",
                   "correlations-off-diagonal"]
    for claim in results["claims"]:
        assert {"id", "statement", "source", "verdict", "evidence", "values"} <= set(claim)
        assert claim["source"].startswith("002_b61e1c6be3673e32.txt, Sec")
    nope = results["claims"][0]
    assert len(nope["values"]["NoPE"]["seeds"]) == 1  # one seed at quick, shown per seed
    assert nope["references"]["NoPE"]["mean"] == 1.0  # "nearly-perfect performance"
    assert results["verdicts"].endswith("NOT MEASURED")
    assert results["provenance"]["runs_trained"] == 9 and results["provenance"]["runs_reused"] == 0
    here = processor(torch.device("cpu"))["processor"]
    assert results["provenance"]["analyzed_on"] == here  # the analysis's machine, recorded
    html = (root / "out" / "report.html").read_text()
    assert f"analyzed on {here}" in html
    assert html.count("data:image/png;base64") >= 3  # curves, bidirectional, correlations
    assert "mean ± std" in html
    assert len(results["runs"]) == 9  # 2 PE x 4 ablations x 1 seed + bidirectional


def test_permutation_invariance_claim_holds_even_untrained(quick_results):
    """Invariance is a property of the architecture, so it holds at any preset."""
    claim = next(c for c in quick_results[1]["claims"]
                 if c["id"] == "bidirectional-nope-permutation-invariant")
    assert claim["verdict"] == "REPRODUCES"


def test_rerun_reuses_finished_runs_and_report_rebuilds(quick_results):
    root, results = quick_results
    checkpoints = sorted((root / "runs").glob("*/checkpoints/last.pt"))
    assert len(checkpoints) == 9
    stamps = [p.stat().st_mtime_ns for p in checkpoints]
    again = run_experiment(registry.experiment("symmetry"), "quick", root / "out2",
                           root / "runs", workers=1, printer=lambda _: None)
    assert [p.stat().st_mtime_ns for p in checkpoints] == stamps  # nothing retrained
    assert [c["verdict"] for c in again["claims"]] == [c["verdict"] for c in results["claims"]]
    assert again["provenance"]["runs_trained"] == 0 and again["provenance"]["runs_reused"] == 9
    (root / "out" / "report.html").unlink()
    assert main(["report", str(root / "out")]) == 0
    assert (root / "out" / "report.html").is_file()


def test_unknown_experiment_and_preset_are_clear_errors(tmp_path, capsys):
    assert main(["run", "symmetri", "--runs-dir", str(tmp_path)]) == 2
    assert "Did you mean 'symmetry'" in capsys.readouterr().err
    assert main(["run", "symmetry", "--preset", "huge", "--runs-dir", str(tmp_path)]) == 2
    assert "presets: quick, default, paper" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_list_shows_the_registered_components(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "addition" in out and "transformer" in out and "symmetry" in out


@pytest.mark.parametrize("override, message", [
    ("model.positions.kind=rotary",
     "'model.positions.kind' is a grid axis of experiment 'symmetry'"),
    # the old flat name of the same setting
    ("model.pos_encoding=rotary", "'model.positions.kind' is a grid axis of experiment 'symmetry'"),
    ("model.residual_ablation=[1]", "'model.block.residual_ablation' is a grid axis"),
    ("seed=7", "use --seeds N"),
])
def test_set_on_a_grid_axis_is_one_clear_error_and_writes_nothing(tmp_path, capsys, override,
                                                                   message):
    runs, out = tmp_path / "runs", tmp_path / "out"
    code = main(["run", "symmetry", "--preset", "quick", "--set", override,
                 "--runs-dir", str(runs), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not runs.exists() and not out.exists()


def test_run_labels_are_stored_and_shown(quick_results):
    root, results = quick_results
    labels = json.loads((root / "out" / "results.json").read_text())["labels"]
    assert [row["run_id"] for row in labels] == results["runs"]
    assert {(row["pe"], row["attention"]) for row in labels} == {
        ("learned", "causal"), ("NoPE", "causal"), ("NoPE", "bidirectional")}
    assert sorted({row["removed"] for row in labels}) == ["{0, 1, 2}", "{0, 1}", "{0}", "{}"]
    html = (root / "out" / "report.html").read_text()
    assert "<h2>Runs</h2>" in html and labels[0]["run_id"] in html


def test_labels_reach_the_run_store_and_the_runs_listing(quick_results, capsys):
    root, results = quick_results
    first = json.loads((root / "out" / "results.json").read_text())["labels"][0]
    assert read_labels(root / "runs" / first["run_id"])["symmetry"]["pe"] == first["pe"]
    chosen = [f"labels.symmetry.pe={first['pe']}", f"labels.symmetry.removed={first['removed']}",
              f"labels.symmetry.attention={first['attention']}"]
    rows = RunStore(root / "runs").query(chosen)
    assert {row["run_id"] for row in rows} == {
        row["run_id"] for row in json.loads((root / "out" / "results.json").read_text())["labels"]
        if (row["pe"], row["removed"], row["attention"])
        == (first["pe"], first["removed"], first["attention"])}
    capsys.readouterr()
    assert main(["runs", "--runs-dir", str(root / "runs"), "--where", chosen[0]]) == 0
    out = capsys.readouterr().out
    assert "[symmetry: attention=" in out and f" pe={first['pe']} " in out
    assert "iid_test/exact_match" in out

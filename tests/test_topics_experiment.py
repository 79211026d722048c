"""End-to-end: the topics experiment at its quick preset."""

import json

import pytest
import yaml

from sglab import registry
from sglab.cli import main
from sglab.experiments import run_experiment

CLAIMS = ["embeddings-block-structure", "one-hot-value-and-attention-topic-structure",
          "two-stage-training", "theory-block-gap", "attention-table"]


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("topics")
    results = run_experiment(registry.experiment("topics"), "quick", root / "out",
                             root / "runs", workers=1, printer=lambda _: None)
    return root, results


def test_quick_preset_writes_every_report_part(quick_results):
    root, results = quick_results
    on_disk = json.loads((root / "out" / "results.json").read_text())
    assert on_disk["claims"] == results["claims"]
    assert [c["id"] for c in results["claims"]] == CLAIMS
    for claim in results["claims"]:
        assert {"id", "statement", "source", "verdict", "evidence", "values",
                "references"} <= set(claim)
        assert claim["source"].startswith("003_bed5f1b5e725c57e.txt")
        assert claim["verdict"] != "NOT MEASURED"  # every claim is measured at quick
    claims = {c["id"]: c for c in results["claims"]}
    table = claims["attention-table"]
    assert len(table["references"]) == 15  # every cell of the seed's table
    assert len(table["values"]["different topic"]) == 5  # one entry per row
    assert table["values"]["uniform"] == pytest.approx(1 / 40)
    assert table["values"]["SGD 0.03: same word"]["seeds"]  # shown per seed
    theory = claims["theory-block-gap"]
    assert theory["references"]["W_V gap"]["mean"] == pytest.approx(0.1156)
    assert theory["values"]["formula"] == pytest.approx(0.11560693, rel=1e-6)
    assert len(results["runs"]) == 5 + 1 + 1 + 2  # grid, SGD 3 (two stages), embeddings, theory
    html = (root / "out" / "report.html").read_text()
    assert html.count("data:image/png;base64") == 3  # Gram matrix, value matrix, weight norms
    for column in ("Optimizer and learning rate", "Avg same-word attention",
                   "Avg same-topic-different-word attention", "Avg different-topic attention",
                   "Adam 0.003", "SGD 0.03", "least squares, N → ∞", "boundary step"):
        assert column in html, column
    theory = next(s for s in results["sections"] if s["title"].startswith("Theory"))
    rows = theory["tables"][0]["rows"]
    assert rows[0][1] == pytest.approx(0.11560693, rel=1e-6)
    assert rows[1][1] == pytest.approx(0.11560693, rel=1e-6)  # exact N -> infinity optimum


def test_rerun_reuses_the_runs(quick_results):
    root, results = quick_results
    checkpoints = sorted((root / "runs").glob("*/checkpoints/last.pt"))
    assert len(checkpoints) == 9
    stamps = [p.stat().st_mtime_ns for p in checkpoints]
    again = run_experiment(registry.experiment("topics"), "quick", root / "out2", root / "runs",
                           workers=1, printer=lambda _: None)
    assert [p.stat().st_mtime_ns for p in checkpoints] == stamps  # nothing retrained
    assert again["claims"] == results["claims"]


def test_cli_lists_the_task_and_experiment(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "topics" in out and "masked LM on topic-model" in out


def test_train_accepts_a_preset_without_a_single_base_config(tmp_path):
    """``topics`` has several run families: `train --preset` starts from its first run."""
    runs = tmp_path / "runs"
    assert main(["train", "--preset", "topics:quick", "--set", "train.steps=2",
                 "--runs-dir", str(runs)]) == 0
    (run_dir,) = list(runs.glob("topics-transformer-*"))
    config = (run_dir / "config.yaml").read_text()
    assert yaml.safe_load(config)["model"]["embedding"]["kind"] == "one_hot"
    assert "optimizer: adamw" in config


def test_seeds_option_reaches_every_run_family():
    experiment = registry.experiment("topics")
    arms = experiment.arms(experiment.preset("quick", seeds=2))
    families = {arm.labels["family"] for arm in arms}
    assert families == {"attention", "embedding", "theory-value", "theory-embedding"}
    for family in families:
        assert {arm.seed for arm in arms if arm.labels["family"] == family} == {0, 1}


def test_attention_runs_keep_their_step_0_weights_for_the_norm_curves():
    experiment = registry.experiment("topics")
    configs = experiment.configs(experiment.preset("quick"), [])
    attention = [c for c in configs if c.model.embedding.kind == "one_hot"
                 and not c.model.attention.uniform]
    assert attention and all(c.train.snapshot_steps == [0] for c in attention)

"""End-to-end: the scan-length experiment at its quick preset."""

import json

import pytest

from sglab import registry
from sglab.experiments import run_experiment


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("scan_length")
    results = run_experiment(registry.experiment("scan-length"), "quick", root / "out",
                             root / "runs", workers=1, printer=lambda _: None)
    return root, results


def test_quick_preset_writes_claims_tables_and_figures(quick_results):
    root, results = quick_results
    assert len(results["runs"]) == 4  # 4 variants x cutoff 26 x 1 seed
    assert [c["id"] for c in results["claims"]] == [
        "iid-validation-near-perfect", "relative-universal-generalizes-to-longer-outputs",
        "iid-early-stopping-loses-ood-accuracy"]
    for claim in results["claims"]:
        assert claim["passed"] in (True, False) and claim["evidence"]
    table = results["sections"][0]["tables"][0]
    assert [row[1] for row in table["rows"]] == ["Transformer", "Universal", "Relative",
                                                 "Relative Universal"]
    assert json.loads((root / "out" / "results.json").read_text())["claims"] == results["claims"]
    html = (root / "out" / "report.html").read_text()
    assert html.count("data:image/png;base64") == 3  # curves, by length, loss vs accuracy


def test_runs_log_iid_and_ood_loss_and_accuracy_at_every_evaluation(quick_results):
    root, results = quick_results
    from sglab.store import read_metrics

    for run_id in results["runs"]:
        records = read_metrics(root / "runs" / run_id)
        assert [r["step"] for r in records] == [20, 40, 60]
        for key in ("iid_valid/loss", "iid_valid/exact_match", "ood_test/loss", "ood_test/exact_match",
                    "ood_test/oracle_exact_match"):
            assert all(key in r for r in records)


def test_default_preset_gives_absolute_variants_more_steps_and_runs_them_first():
    experiment = registry.experiment("scan-length")
    params = experiment.presets["default"]
    configs = experiment.configs(params, [])
    steps = {(c.model.pos_encoding, c.model.universal, c.task.split): c.train.steps
             for c in configs}
    assert len(steps) == 8
    assert all(n == (6500 if pos == "sinusoidal" else 3500) for (pos, _, _), n in steps.items())
    assert [c.train.steps for c in configs] == sorted((c.train.steps for c in configs),
                                                      reverse=True)
    # an explicit step count applies to every variant
    assert {c.train.steps for c in experiment.configs(params, ["train.steps=50"])} == {50}
    with pytest.raises(ValueError, match="unknown variants"):
        experiment.configs({**params, "variant_steps": {"Transfomer": 10}}, [])

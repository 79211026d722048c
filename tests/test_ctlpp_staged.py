"""CTL++ 'S' experiment: presets, the overlap claim's arithmetic, the quick preset end to end."""

import pytest

from sglab import registry
from sglab.cli import main
from sglab.experiments import run_experiment
from sglab.experiments.claims import NotMeasured
from sglab.experiments.ctlpp.ctlpp_staged import (
    overlap_measurements,
    overlap_values,
    rise_along_axes,
)


def test_presets_cover_the_thesis_grid_and_the_corners():
    experiment = registry.experiment("ctlpp-staged")
    paper = experiment.configs(experiment.preset("paper"), [])
    assert len(paper) == 3 * 4 * 5 * 5  # models x shared functions x shared symbols x seeds
    cells = {(c.task.shared_functions, c.task.shared_symbols) for c in paper}
    assert cells == {(f, s) for f in (4, 8, 12, 16) for s in range(2, 7)}
    assert {c.task.variant for c in paper} == {"S"} and {c.task.lengths for c in paper} == {
        "thesis"}
    transformer = [c for c in paper if c.model.name == "transformer"
                   and c.model.positions.kind == "relative"]
    assert len(transformer) == 100 and transformer[0].train.steps == 300_000
    assert (transformer[0].model.d_model, transformer[0].model.ffn.d_ff) == (128, 512)
    ndr = [c for c in paper if c.model.name == "transformer" and c.model.block.kind == "copy_gate"]
    assert {(c.model.attention.kv_bias, c.model.init.ndr_init) for c in ndr} == {
        (True, "ctlpp_code")}  # the CTL++ code's attention
    default = experiment.configs(experiment.preset("default"), [])
    assert {(c.task.shared_functions, c.task.shared_symbols) for c in default} == {
        (4, 2), (4, 6), (16, 2), (16, 6)}
    assert {c.model.name for c in default} == {"lstm"} and len(default) == 4 * 3


def test_default_adds_the_cpu_size_ndr_on_request(tmp_path, capsys):
    experiment = registry.experiment("ctlpp-staged")
    bilstm_only = experiment.configs(experiment.preset("default"), [])
    both = experiment.configs(experiment.preset(
        "default", changes=["train_models=[ndr,bilstm]"]), [])
    ndr = [c for c in both if c.model.name == "transformer"]
    assert len(ndr) == 4 * 3 and [c for c in both if c.model.name == "lstm"] == bilstm_only
    # the `ctlpp` default's NDR, trained long and resumable along the way
    ctlpp_ndr = next(c for c in registry.experiment("ctlpp").configs(
        registry.experiment("ctlpp").preset("default"), []) if c.model.name == "transformer")
    assert ndr[0].model == ctlpp_ndr.model
    assert ndr[0].task.model_dump(exclude={"variant", "shared_functions", "shared_symbols"}) == (
        ctlpp_ndr.task.model_dump(exclude={"variant", "shared_functions", "shared_symbols"}))
    assert ndr[0].train.model_dump(exclude={"steps", "checkpoint_interval"}) == (
        ctlpp_ndr.train.model_dump(exclude={"steps", "checkpoint_interval"}))
    assert (ndr[0].train.batch_size, ndr[0].train.lr, ndr[0].train.steps,
            ndr[0].train.checkpoint_interval) == (256, 2e-3, 30_000, 2000)
    assert {c.task.variant for c in ndr} == {"S"} and ndr[0].task.batch_lengths == "one"
    out, runs = tmp_path / "out", tmp_path / "runs"
    for value in ("[dnc]", "[]"):
        assert main(["run", "ctlpp-staged", "--param", f"train_models={value}",
                     "--runs-dir", str(runs), "--out", str(out)]) == 2
        assert "pick one or more of ndr, bilstm" in capsys.readouterr().err
    assert not runs.exists() and not out.exists()


def test_rise_along_axes_uses_only_cells_that_learned_iid():
    functions, symbols = [4, 16], [2, 6]
    ood = {(4, 2): 0.2, (4, 6): 0.5, (16, 2): 0.4, (16, 6): 1.0}
    iid = dict.fromkeys(ood, 1.0)
    along_f, along_s = rise_along_axes(ood, iid, functions, symbols)
    assert along_f == pytest.approx(((0.4 - 0.2) + (1.0 - 0.5)) / 2)
    assert along_s == pytest.approx(((0.5 - 0.2) + (1.0 - 0.4)) / 2)
    iid[(4, 2)] = 0.5  # this cell did not learn: pairs with it drop out
    along_f, along_s = rise_along_axes(ood, iid, functions, symbols)
    assert along_f == pytest.approx(0.5) and along_s == pytest.approx(0.6)
    assert rise_along_axes(ood, dict.fromkeys(ood, 0.1), functions, symbols) == (None, None)


def test_overlap_values_per_seed_and_the_claims_that_read_them():
    functions, symbols = [4, 16], [2, 6]
    ood = {"ndr": {(4, 2): [0.2, 0.4], (4, 6): [0.5, 0.5], (16, 2): [0.4, 0.6],
                   (16, 6): [1.0, 0.98]},
           "bilstm": {(4, 2): [0.1, 0.1], (4, 6): [0.2, 0.2], (16, 2): [0.3, 0.3],
                      (16, 6): [0.6, 0.4]}}
    iid = {model: dict.fromkeys(cells, 1.0) for model, cells in ood.items()}
    values = overlap_values(ood, iid, functions, symbols)
    assert values["NDR rise over shared functions"] == pytest.approx([0.35, 0.34])
    assert values["NDR rise over shared symbols"] == pytest.approx([0.45, 0.24])
    assert values["NDR 16 functions, 6 symbols"] == [1.0, 0.98]
    assert values["NDR best other cell"] == pytest.approx(0.5)
    assert values["NDR at 16 shared functions"] == pytest.approx([0.7, 0.79])
    assert values["Bi-LSTM at 16 shared functions"] == pytest.approx([0.45, 0.35])
    specs = registry.experiment("ctlpp-staged").spec.claims
    measured = overlap_measurements(specs, values, "trained NDR, Bi-LSTM")
    assert set(measured["staged-needs-overlap"].values) == {
        "NDR 16 functions, 6 symbols", "NDR best other cell"}
    assert set(measured["bilstm-below-ndr-at-16-functions"].values) == {
        "Bi-LSTM at 16 shared functions", "NDR at 16 shared functions"}
    for claim_id in ("transformer-needs-overlap", "transformer-above-ndr-at-16-functions"):
        assert isinstance(measured[claim_id], NotMeasured)
        assert "no Transformer" in measured[claim_id].reason
    # the Bi-LSTM alone (the default): the NDR's claims are not measured, never judged on it
    alone = overlap_measurements(specs, overlap_values({"bilstm": ood["bilstm"]}, iid,
                                                       functions, symbols), "trained Bi-LSTM")
    assert not isinstance(alone["bilstm-needs-overlap"], NotMeasured)
    for claim_id in ("staged-needs-overlap", "bilstm-below-ndr-at-16-functions"):
        assert isinstance(alone[claim_id], NotMeasured) and "no NDR" in alone[claim_id].reason
    # cells that did not learn IID leave no pair for a rise: not measured
    unlearned = {model: dict.fromkeys(cells, 0.1) for model, cells in ood.items()}
    rises = overlap_measurements(specs, overlap_values(ood, unlearned, functions, symbols), "")
    assert isinstance(rises["bilstm-needs-overlap"], NotMeasured)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("ctlpp_staged")
    results = run_experiment(registry.experiment("ctlpp-staged"), "quick", root / "out",
                             root / "runs", workers=1,
                             overrides=["train.steps=20", "train.eval_interval=20",
                                        "task.iid_test_size=100", "task.ood_test_size=100"],
                             printer=lambda _: None)
    return root, results


def test_quick_preset_end_to_end(quick):
    root, results = quick
    assert len(results["runs"]) == 2 * 4
    claims = {c["id"]: c for c in results["claims"]}
    assert list(claims) == ["staged-needs-overlap", "bilstm-needs-overlap",
                            "transformer-needs-overlap", "bilstm-below-ndr-at-16-functions",
                            "transformer-above-ndr-at-16-functions"]
    assert claims["staged-needs-overlap"]["source"] == (
        "001_76659a6d281e669d.txt, Sec. 6.3.2, Fig. 6.4")
    # the NDR trains at quick: its full-overlap cell is read per seed
    assert claims["staged-needs-overlap"]["verdict"] != "NOT MEASURED"
    assert len(claims["staged-needs-overlap"]["values"]["NDR 16 functions, 6 symbols"][
        "seeds"]) == 1
    for claim_id in ("transformer-needs-overlap", "transformer-above-ndr-at-16-functions"):
        assert claims[claim_id]["verdict"] == "NOT MEASURED"
        assert "no Transformer" in claims[claim_id]["evidence"]
    for model in ("ndr", "bilstm"):
        assert (root / "out" / "figures" / f"staged_{model}.png").exists()

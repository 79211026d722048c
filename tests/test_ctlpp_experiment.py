"""CTL++ experiment: presets, symbol-representation clusters, the quick preset end to end."""

import json

import numpy as np
import pytest
import torch

from sglab import registry
from sglab.analysis.symbol_clusters import (
    adjusted_rand_index,
    compatibility_matrix,
    complete_linkage_clusters,
    cosine_matrix,
    group_separation,
    group_specific_gap,
    symbol_clusters,
)
from sglab.analysis.symbol_probes import classifier_inputs, function_groups, pair_correct
from sglab.errors import SglabError
from sglab.experiments import run_experiment
from sglab.experiments.claims import NotMeasured
from sglab.experiments.ctlpp.ctlpp import (
    IID,
    OOD,
    accuracy_measurements,
    representation_measurements,
    wilson,
)
from sglab.experiments.runs import FinishedRun
from sglab.models.transformer import CopyGateBlock
from sglab.train.ensemble import ensemble_key
from sglab.train.loop import load_run_config

GROUPS = np.arange(32) // 16


def test_group_split_vectors_cluster_by_group_and_identical_ones_form_one_cluster():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(2, 16))
    split = centres[GROUPS] + 0.05 * rng.normal(size=(32, 16))
    found = symbol_clusters(np.stack([split, np.ones((32, 16))]), GROUPS)
    assert found.ari[0] == pytest.approx(1.0)
    assert found.separation[0] > 0.5
    assert (found.clusters[1] == 0).all() and found.separation[1] == pytest.approx(0.0)
    # shared representation with noise: clusters unrelated to the groups
    shared = np.ones(16) + 0.05 * rng.normal(size=(32, 16))
    assert abs(adjusted_rand_index(complete_linkage_clusters(cosine_matrix(shared)), GROUPS)) < 0.3
    assert abs(group_separation(cosine_matrix(shared), GROUPS)) < 0.05


def test_adjusted_rand_index_against_hand_computed_values():
    assert adjusted_rand_index([0, 0, 1, 1], [1, 1, 0, 0]) == pytest.approx(1.0)
    # contingency [[2, 0], [1, 1]]: index 1, rows 2, cols 1+0 = 1... computed by hand:
    # pairs(table) = 1, pairs(rows) = 1 + 1 = 2, pairs(cols) = 3 + 0 = 3, total 6
    # expected = 2 * 3 / 6 = 1, max = 2.5 -> ARI = 0
    assert adjusted_rand_index([0, 0, 1, 1], [0, 0, 0, 1]) == pytest.approx(0.0)
    with pytest.raises(SglabError, match="symbols"):
        symbol_clusters(np.zeros((8, 31, 4)), GROUPS)


def test_compatibility_of_a_hand_built_predictor():
    """Fig. E.2's setting: f1 in G_a outputs one of two representations, C_1 (functions
    0-7) read only by G_a, C_2 (8-15) read by both groups; G_b's outputs (cluster C_3) are
    read by both. A predictor right exactly where the representation is readable:"""
    clusters = np.array([0] * 8 + [1] * 8 + [2] * 16)
    correct = np.ones((32, 32))
    correct[:8, 16:] = 0  # C_1 followed by G_b: wrong
    rows, cols, by_cluster = compatibility_matrix(correct, clusters, GROUPS)
    assert rows.tolist() == [0, 1, 2] and cols.tolist() == [0, 1]
    assert by_cluster.tolist() == [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]]
    _, _, by_group = compatibility_matrix(correct, GROUPS, GROUPS)
    assert by_group.tolist() == [[1.0, 0.5], [1.0, 1.0]]  # half of G_a is readable by G_b
    assert group_specific_gap(correct, clusters, GROUPS) == pytest.approx(1.0)
    # a predictor that errs at random, independently of clusters: no group-specific cluster
    noisy = np.random.default_rng(0).random((32, 32)) < 0.7
    assert group_specific_gap(noisy, clusters, GROUPS) < 0.3
    with pytest.raises(SglabError, match="first functions"):
        compatibility_matrix(np.ones((31, 32)), clusters, GROUPS)


def test_wilson_interval():
    low, high = wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson(5, 10)
    assert low + high == pytest.approx(1.0) and high - low < 0.6


def test_presets_use_the_modified_ndr_and_a_bilstm_and_lstm_runs_plan_alone():
    experiment = registry.experiment("ctlpp")
    for name in ("quick", "default", "paper"):
        params = experiment.preset(name)
        configs = experiment.configs(params, [])
        assert len(configs) == len(params["splits"]) * len(params["models"]) * len(params["seeds"])
        assert ("transformer" in params["models"]) == (name == "paper")
        ndr = next(c for c in configs if c.model.name == "transformer")
        assert ndr.model.block.ffn == "gelu_residual" and ndr.model.attention.kind == "geometric"
        assert (ndr.model.n_layers, ndr.model.block.eval_steps, ndr.model.readout) == (8, 10, "first")
        assert ndr.model.block.gate_dropout == 0.1 and ndr.model.block.bias_init == -3
        lstm = next(c for c in configs if c.model.name == "lstm")
        assert lstm.model.bidirectional and not lstm.task.boundary_tokens
        assert ensemble_key(lstm) is None
        # the thesis code's sequence classifier: an end token, embeddings as wide as the state
        assert lstm.model.end_token and lstm.model.embedding_width == lstm.model.d_model
    paper = experiment.configs(experiment.preset("paper"), [])
    assert {c.task.lengths for c in paper} == {"thesis"} and paper[0].train.steps == 80_000
    assert paper[0].model.d_model == 256 and paper[0].model.ffn.d_ff == 512
    # the thesis code's sweeps: dropout 0.5 on the NDR's attention output only, attention
    # dropout 0.1, no weight decay; the Bi-LSTM 128 units per direction
    ndr = next(c for c in paper if c.model.name == "transformer"
               and c.model.block.kind == "copy_gate")
    assert (ndr.model.dropout, ndr.model.block.ffn_dropout,
            ndr.model.attention.dropout, ndr.train.weight_decay) == (0.5, 0.0, 0.1, 0.0)
    # and the CTL++ code's attention: key / value biases, W_v and W_o Xavier over d -> d
    assert ndr.model.attention.kv_bias and ndr.model.init.ndr_init == "ctlpp_code"
    lstm = next(c for c in paper if c.model.name == "lstm")
    assert lstm.model.d_model == 256 and lstm.train.weight_decay == 0.0
    assert {c.task.singles for c in paper} == {False}  # the code trains on 2-6 functions
    assert all(c.task.singles for c in experiment.configs(experiment.preset("default"), []))
    transformer = next(c for c in paper if c.model.name == "transformer"
                       and c.model.positions.kind == "relative")
    assert transformer.train.steps == 300_000 and transformer.train.weight_decay == 0.0025
    assert (transformer.model.d_model, transformer.model.ffn.d_ff, transformer.model.n_heads,
            transformer.model.n_layers) == (128, 512, 4, 8) and transformer.model.block.shared


def test_gelu_residual_block_is_layernorm_of_ffn_plus_input():
    from sglab.config import build_run_config

    config = build_run_config({"model": registry.experiment("ctlpp").preset("quick")["models"]
                               ["ndr"]["model"]}, []).model
    block = CopyGateBlock(config, None).eval()
    seen = {}
    for name in ("resid_mid", "mlp_out"):
        getattr(block, name).register_forward_hook(
            lambda module, args, out, name=name: seen.__setitem__(name, out))
    block(torch.randn(2, 5, config.d_model), None)
    a, ffn, ln = seen["resid_mid"], block.mlp, block.ln_2
    hidden = torch.nn.functional.gelu(a @ ffn.up.weight.T + ffn.up.bias)      # Eq. E.1
    u = torch.nn.functional.layer_norm(hidden @ ffn.out.weight.T + ffn.out.bias + a,
                                       (config.d_model,), ln.weight, ln.bias)  # Eq. E.2
    assert torch.allclose(seen["mlp_out"], u, atol=1e-5)


def test_copy_gate_ffn_dropout_leaves_the_ffns_of_the_appendix_e_layer_dropout_free():
    """App. E.1: "We do not use any dropout in Eq. E.1" -- dropout acts on the attention
    output only. With the attention output zero, a training pass is then deterministic."""
    from sglab.config import build_run_config

    base = registry.experiment("ctlpp").preset("quick")["models"]["ndr"]["model"]
    x = torch.randn(3, 6, base["d_model"])
    outputs = {}
    for ffn_dropout in (None, 0.0):
        block_section = {**base["block"], "gate_dropout": 0.0, "ffn_dropout": ffn_dropout}
        config = build_run_config({"model": {**base, "dropout": 0.5, "block": block_section}},
                                  []).model
        block = CopyGateBlock(config, None).train()
        block.attn.forward = lambda h, mask: torch.zeros_like(h)
        torch.manual_seed(0)
        first = block(x, None)
        outputs[ffn_dropout] = (first, block(x, None))
    assert not torch.allclose(*outputs[None])  # dropout 0.5 inside the FFNs
    assert torch.equal(*outputs[0.0])
    with pytest.raises(SglabError, match="copy_gate=true"):
        build_run_config({"model": {"name": "transformer", "copy_gate_ffn_dropout": 0.0}}, [])


def test_ndr_data_ffn_output_starts_at_the_gain_of_the_appendix_e_code():
    """The thesis code's App. E layer draws W_2 Xavier-uniform with gain 1; the NDR
    code's layer (the field's null) with 5/3. The gate FFN is the same either way."""
    from sglab.config import build_run_config
    from sglab.models import build_model

    model_section = registry.experiment("ctlpp").preset("default")["models"]["ndr"]["model"]
    assert model_section["block"]["data_gain"] == 1.0
    for preset in ("quick", "paper"):
        assert registry.experiment("ctlpp").preset(preset)["models"]["ndr"]["model"][
            "block"]["data_gain"] == 1.0
    weights = {}
    for gain in (1.0, None):
        block_section = {**model_section["block"], "data_gain": gain}
        config = build_run_config({"model": {**model_section, "block": block_section}},
                                  []).model
        torch.manual_seed(0)
        block = build_model(config, 20, 10).blocks[0]
        weights[gain] = block.mlp.out.weight.detach(), block.gate_ffn.out.weight.detach()
    d_ff, d = model_section["ffn"]["d_ff"], model_section["d_model"]
    bound = (6 / (d + d_ff)) ** 0.5  # Xavier-uniform, gain 1
    for gain, expected in ((1.0, bound), (None, 5 / 3 * bound)):
        data = weights[gain][0].abs().max().item()
        assert 0.98 * expected < data <= expected
    assert torch.equal(weights[1.0][1], weights[None][1])
    with pytest.raises(SglabError, match="copy_gate=true and init=torch"):
        build_run_config({"model": {"name": "transformer", "copy_gate_data_gain": 1.0}}, [])
    with pytest.raises(SglabError, match="set init.kind=torch"):
        build_run_config({"model": {"name": "transformer",
                                    "block": {"kind": "copy_gate", "data_gain": 1.0}}}, [])


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("ctlpp")
    results = run_experiment(registry.experiment("ctlpp"), "quick", root / "out", root / "runs",
                             workers=1, overrides=["train.steps=20", "train.eval_interval=20",
                                                  "task.iid_test_size=200",
                                                  "task.ood_test_size=200"],
                             printer=lambda _: None)
    return root, results


def test_quick_preset_end_to_end(quick):
    root, results = quick
    claims = {c["id"]: c for c in results["claims"]}
    assert list(claims) == [
        "iid-solved", "bilstm-generalizes", "ndr-fails-often", "a-harder-than-r",
        "transformer-fails-ood", "successful-seeds-share-representations",
        "failed-seeds-cluster-by-group", "clusters-group-specific"]
    for claim in results["claims"]:
        assert claim["source"].startswith("001_76659a6d281e669d.txt, ")
    # quick trains 'R' only: the claims that read 'A' (or the Transformer) say so
    for claim_id in ("iid-solved", "ndr-fails-often", "a-harder-than-r", "transformer-fails-ood"):
        assert claims[claim_id]["verdict"] == "NOT MEASURED"
    assert "no NDR A" in claims["a-harder-than-r"]["evidence"]
    assert "no Transformer" in claims["transformer-fails-ood"]["evidence"]
    assert len(results["runs"]) == 4
    assert (root / "out" / "figures" / "ood_seeds.png").exists()
    for figure in ("cosine", "iid_ood", "compatibility_cluster", "compatibility_group"):
        assert (root / "out" / "figures" / f"{figure}.png").exists()


def test_pair_correctness_matches_the_models_predictions_one_by_one(quick):
    root, results = quick
    run_dir = root / "runs" / results["runs"][-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    run = FinishedRun({}, load_run_config(run_dir), summary, run_dir)
    task, model = run.task, run.model()
    correct = pair_correct(model, task)
    assert correct.shape == (8, 32, 32)
    rng = np.random.default_rng(0)
    for middle, f1, f2 in rng.integers([8, 32, 32], size=(20, 3)):
        s = task.tables[f1].tolist().index(middle)  # f1(s) = middle
        ids = task.token_ids(torch.tensor([[f1, f2]]), torch.tensor([s]))
        with torch.no_grad():
            predicted = model(ids, key_padding_mask=torch.ones_like(ids, dtype=torch.bool))[0, 0]
        label = task.symbol_ids[task.tables[f2][middle]]
        assert correct[middle, f1, f2] == (predicted.argmax() == label)


def test_classifier_inputs_of_a_trained_run(quick):
    root, results = quick
    run_dir = root / "runs" / results["runs"][0]
    summary = json.loads((run_dir / "summary.json").read_text())
    run = FinishedRun({}, load_run_config(run_dir), summary, run_dir)
    features = classifier_inputs(run.model(), run.task)
    assert function_groups(run.task.tables).tolist() == GROUPS.tolist()
    assert features.shape == (8, 32, run.config.model.d_model)
    # each function reaches the symbol from its own input: all 32 inputs (and rows) differ
    assert len(np.unique(features[0].round(5), axis=0)) == 32


def test_accuracy_claims_read_every_seed_in_seed_order():
    """Table 6.1 and the success rates count every seed (the thesis's NDR seeds all fit);
    the Transformer counts its converged seeds, as the thesis selects 25 of 50."""
    specs = registry.experiment("ctlpp").spec.claims
    iid = {("ndr", "A"): [1.0, 1.0, 0.2], ("ndr", "R"): [1.0, 1.0, 1.0],
           ("bilstm", "A"): [1.0, 1.0, 1.0], ("bilstm", "R"): [1.0, 1.0, 1.0]}
    ood = {("ndr", "A"): [0.3, 0.99, 0.1], ("ndr", "R"): [0.99, 0.98, 0.6],
           ("bilstm", "A"): [0.96, 0.97, 0.98], ("bilstm", "R"): [1.0, 1.0, 1.0]}
    measured = accuracy_measurements(specs, ood, iid)
    assert measured["iid-solved"].values["NDR A"] == [1.0, 1.0, 0.2]
    assert measured["a-harder-than-r"].values == {"NDR A": [0.3, 0.99, 0.1],
                                                  "NDR R": [0.99, 0.98, 0.6]}
    assert measured["ndr-fails-often"].values == {
        "NDR 'A' share of seeds above 0.95": [False, True, False],
        "NDR 'R' share of seeds above 0.95": [True, True, False]}
    assert measured["bilstm-generalizes"].values["Bi-LSTM A"] == [0.96, 0.97, 0.98]
    assert isinstance(measured["transformer-fails-ood"], NotMeasured)
    transformer = {("transformer", "A"): [0.2, 0.9, 0.3], ("transformer", "R"): [0.99, 0.5, 0.7]}
    converged = {("transformer", "A"): [1.0, 0.4, 1.0], ("transformer", "R"): [1.0, 1.0, 0.5]}
    found = accuracy_measurements(specs, {**ood, **transformer}, {**iid, **converged})
    assert found["transformer-fails-ood"].values == pytest.approx({
        "Transformer A": 0.25, "Transformer R": 0.745,
        "Transformer 'R' share of seeds above 0.95": 0.5})
    assert "'A' 2 of 3" in found["transformer-fails-ood"].context
    # one split only: the claims that read the other say which values are missing
    one_split = accuracy_measurements(specs, {k: v for k, v in ood.items() if k[1] == "R"},
                                      {k: v for k, v in iid.items() if k[1] == "R"})
    assert isinstance(one_split["a-harder-than-r"], NotMeasured)
    assert "no NDR A" in one_split["a-harder-than-r"].reason
    assert isinstance(one_split["iid-solved"], NotMeasured)


class _Run:
    """A finished run as the representation claims read it: labels, final accuracies and
    the two measures (symbol clusters, pair correctness)."""

    def __init__(self, seed, iid, ood, clusters, correct, model="ndr"):
        from types import SimpleNamespace

        from sglab.analysis.symbol_clusters import SymbolClusters

        self.labels, self.seed = {"model": model, "split": "R"}, seed
        self.final = {IID: iid, OOD: ood}
        self.task = SimpleNamespace(tables=np.zeros((32, 8), dtype=int))
        separation = [float(len(set(clusters))) for _ in range(8)]
        self.measures = {"symbol_clusters": SymbolClusters([np.eye(32)] * 8, [clusters] * 8,
                                                           separation,
                                                           [adjusted_rand_index(clusters, GROUPS)] * 8),
                         "pair_correct": np.stack([correct] * 8)}

    def __getitem__(self, label):
        return self.labels[label]

    def measure(self, name, compute):
        return self.measures[name]


def test_representation_claims_read_the_ndr_seeds_that_succeed_or_fit_and_fail(tmp_path):
    experiment = registry.experiment("ctlpp")
    specs = experiment.spec.claims
    split = np.array([0] * 8 + [1] * 8 + [2] * 16)  # C_1 read by G_a only (Fig. E.2a)
    specific = np.ones((32, 32))
    specific[:8, 16:] = 0
    noisy = (np.random.default_rng(1).random((32, 32)) < 0.6).astype(float)
    one = np.zeros(32, dtype=int)
    runs = [_Run(0, 1.0, 0.6, split, specific),  # fits IID, fails OOD
            _Run(1, 1.0, 1.0, one, noisy),  # generalizes
            _Run(2, 0.3, 0.2, split, noisy),  # did not fit IID: in neither group
            _Run(3, 1.0, 0.5, one, specific),  # fails OOD with one cluster per symbol
            _Run(4, 1.0, 0.4, split, specific, model="bilstm")]  # not the NDR
    measured = representation_measurements(specs, runs)
    shared = measured["successful-seeds-share-representations"]
    assert shared.values == {"largest ARI over symbols": [pytest.approx(0.0)]}
    assert "NDR R seed 1" in shared.context and "seed 4" not in shared.context
    clustered = measured["failed-seeds-cluster-by-group"]
    assert clustered.values["largest ARI over symbols"] == pytest.approx(
        [adjusted_rand_index(split, GROUPS), 0.0])
    assert "seed 0, NDR R seed 3" in clustered.context and "seed 2" not in clustered.context
    gaps = measured["clusters-group-specific"].values["largest group-specific gap"]
    assert gaps == [pytest.approx(1.0), 0.0]  # one cluster per symbol: no group-specific one
    none_failing = representation_measurements(specs, runs[1:3])
    assert isinstance(none_failing["clusters-group-specific"], NotMeasured)
    assert isinstance(none_failing["failed-seeds-cluster-by-group"], NotMeasured)
    assert isinstance(representation_measurements(specs, [runs[0]])[
        "successful-seeds-share-representations"], NotMeasured)
    figures = experiment.compatibility(runs, tmp_path)
    assert len(figures) == 2 and (tmp_path / "figures" / "compatibility_cluster.png").exists()

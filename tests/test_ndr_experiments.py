"""End to end: ndr-ctl and ndr-arithmetic at their quick presets; routing traces; the NDR
experiments' grids."""

import json

import numpy as np
import pytest
import torch

from sglab import registry
from sglab.analysis.routing import (
    RoutingProbe,
    active_steps,
    first_open_steps,
    gate_activity,
    max_over_heads,
    routing_trace,
)
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.experiments import run_experiment
from sglab.experiments.claims import Measured, NotMeasured, Verdict, judge
from sglab.experiments.ndr.ndr_grid import selection_points
from sglab.experiments.ndr.ndr_routing import answer_columns, gates_open_in_order, readout_by_length
from sglab.io import finite_or_none
from sglab.models import build_model
from sglab.store import read_metrics


@pytest.fixture(scope="module")
def ctl_quick(tmp_path_factory):
    root = tmp_path_factory.mktemp("ndr-ctl")
    results = run_experiment(registry.experiment("ndr-ctl"), "quick", root / "out", root / "runs",
                             workers=1, printer=lambda _: None)
    return root, results


def test_ctl_quick_preset_writes_claims_tables_and_routing_figures(ctl_quick):
    root, results = ctl_quick
    claims = {c["id"]: c for c in results["claims"]}
    assert list(claims) == list(registry.experiment("ndr-ctl").spec.claims)
    assert list(claims)[:6] == [
        "ndr-generalizes-both-directions", "transformers-fail-on-longer", "rel-gate-forward-only",
        "abs-rel-gate-both-directions", "lstm-forward-bilstm-both", "act-is-no-copy-gate"]
    for claim in claims.values():
        assert claim["source"].startswith("001_76659a6d281e669d.txt, ")
        assert claim["evidence"]
    # the quick preset ablates 4 steps in both directions: the other depths are not measured
    measured_depths = {k for k, c in claims.items() if "depth" in k
                       and c["verdict"] != Verdict.NOT_MEASURED.value}
    assert measured_depths == {"ndr-needs-depth-4-forward", "ndr-needs-depth-4-backward"}
    assert claims["ndr-needs-depth-8-forward"]["evidence"].startswith("not measured: ")
    # every measured claim shows its values per seed and the thesis's numbers beside ours
    ndr = claims["ndr-generalizes-both-directions"]
    assert set(ndr["values"]) == {"NDR forward", "NDR backward"}
    assert len(ndr["values"]["NDR forward"]["seeds"]) == 1
    assert ndr["references"]["NDR backward"]["mean"] == 1.0
    assert "ours" in ndr["references"]["NDR backward"]
    act = claims["act-is-no-copy-gate"]
    assert act["verdict"] != Verdict.NOT_MEASURED.value  # the quick preset has the ACT rows
    assert "+ geom. + ACT-U backward" in act["values"]
    gates = claims["ndr-gates-open-in-order"]
    if gates["verdict"] != Verdict.NOT_MEASURED.value:
        assert set(gates["values"]) == {"Spearman ρ(position, step)",
                                        "fraction of function columns that open"}
    # 13 models (5 with ACT) x 2 directions + the shallow NDR x 2 directions
    assert len(results["runs"]) == 28
    table = results["sections"][0]["tables"][0]
    assert [row[0] for row in table["rows"]] == [
        "Transformer", "+ rel", "+ geom.", "+ rel + gate", "+ abs/rel + gate", "NDR",
        "Transformer + ACT-A", "+ rel + ACT-A", "+ rel + ACT-U", "+ geom. + ACT-A",
        "+ geom. + ACT-U", "LSTM", "BiLSTM", "NDR, 4 steps"]
    assert "test backward" in table["columns"]
    html = (root / "out" / "report.html").read_text()
    assert html.count("data:image/png;base64") >= 3  # curves, attention, gates
    stored = json.loads((root / "out" / "results.json").read_text())["claims"]
    # a gate order with fewer than 3 opening columns has ρ = NaN, stored as null
    assert stored == finite_or_none(results["claims"])
    assert "NaN" not in (root / "out" / "results.json").read_text()
    labels = {(entry["model"], entry["direction"]) for entry in results["labels"]}
    assert ("NDR", "backward") in labels and ("NDR, 4 steps", "forward") in labels
    # Sec. 5.2.1's readout analysis: every gated model, every seed, every evaluation split
    readout = next(s for s in results["sections"] if s["title"].startswith("Where the readout"))
    rows = readout["tables"][0]["rows"]
    assert [row[:2] for row in rows] == [["+ rel + gate", "0"], ["+ abs/rel + gate", "0"],
                                         ["NDR", "0"]]
    assert readout["tables"][0]["columns"][2:] == ["iid_valid", "ood_valid", "ood_test",
                                                   "readout switch r (1 relative, 0 absolute)"]
    # only + abs/rel + gate has the switch (Eq. D.7)
    assert [row[-1] == "-" for row in rows] == [True, False, True]
    assert len(readout["figures"]) == 1
    # the depth ablation tested with more steps: at its training depth the analysis scores
    # exactly what the run's own evaluation logged at the selected checkpoint (the quick
    # preset's evaluations score every input, as the analysis does)
    longer = next(s for s in results["sections"] if s["title"].startswith("The depth ablation"))
    steps_table = longer["tables"][0]
    assert steps_table["columns"] == ["model", "direction", "test, training depth",
                                      "test, 2 steps more", "test, 4 steps more"]
    assert [row[:2] for row in steps_table["rows"]] == [["NDR, 4 steps", "forward"],
                                                        ["NDR, 4 steps", "backward"]]
    shallow = next(row for row in table["rows"] if row[0] == "NDR, 4 steps")
    for row, direction in zip(steps_table["rows"], ("forward", "backward")):
        logged = shallow[table["columns"].index(f"test {direction}")]
        assert row[2].split()[0] == logged.split()[0]
    # which checkpoint is kept: the first-best column is the selected record the claims read
    kept = next(s for s in results["sections"] if s["title"] == "Which checkpoint is kept")
    kept_rows = kept["tables"][0]["rows"]
    assert [row[:2] for row in kept_rows] == [["+ rel + gate", 0], ["+ abs/rel + gate", 0],
                                              ["NDR", 0]]
    ndr_backward = claims["ndr-generalizes-both-directions"]["values"]["NDR backward"]
    assert float(kept_rows[2][2].split()[0]) == pytest.approx(ndr_backward["seeds"][0], abs=5e-4)


def test_arithmetic_quick_preset_measures_every_claim(tmp_path):
    results = run_experiment(registry.experiment("ndr-arithmetic"), "quick", tmp_path / "out",
                             tmp_path / "runs", workers=1, printer=lambda _: None)
    claims = {c["id"]: c for c in results["claims"]}
    assert list(claims) == ["ndr-best-on-deeper-arithmetic", "ndr-fits-iid-arithmetic",
                            "baselines-fit-iid-arithmetic"]
    assert all(c["verdict"] != Verdict.NOT_MEASURED.value for c in claims.values())
    assert set(claims["ndr-best-on-deeper-arithmetic"]["values"]) == {
        "NDR", "Transformer", "+ rel", "+ abs/rel + gate", "LSTM", "BiLSTM"}
    assert set(claims["ndr-best-on-deeper-arithmetic"]["references"]) == set(
        claims["ndr-best-on-deeper-arithmetic"]["values"])
    table = results["sections"][0]["tables"][0]
    assert table["columns"][-1] == "thesis IID / test"
    assert table["rows"][-1][-1] == "0.98 / 0.82"  # the BiLSTM row: thesis IID / test


def test_selected_checkpoint_is_the_best_ood_validation_record(ctl_quick):
    root, results = ctl_quick
    for run_id in results["runs"]:
        summary = json.loads((root / "runs" / run_id / "summary.json").read_text())
        records = read_metrics(root / "runs" / run_id)  # evaluations, not training loss
        best = max(r["ood_valid/exact_match"] for r in records)
        assert summary["best"]["value"] == best
        assert summary["best"]["metric"] == "ood_valid/exact_match"


def test_selection_points_keep_the_first_and_last_best_validation_records():
    records = [{"step": 1, "ood_valid/exact_match": 0.5, "ood_test/exact_match": 0.4},
               {"step": 2, "train/loss": 1.0},  # a training record: not an evaluation
               {"step": 3, "ood_valid/exact_match": 0.9, "ood_test/exact_match": 0.8},
               {"step": 4, "ood_valid/exact_match": 0.7, "ood_test/exact_match": 0.95},
               {"step": 5, "ood_valid/exact_match": 0.9, "ood_test/exact_match": 0.3},
               {"step": 6, "ood_valid/exact_match": 0.6, "ood_test/exact_match": 0.2}]
    assert selection_points(records) == {"first best": (3, 0.8), "last best": (5, 0.3),
                                         "final": (6, 0.2), "peak test": (4, 0.95)}
    assert selection_points([{"step": 1, "train/loss": 1.0}]) is None


def test_routing_trace_has_one_map_per_step_including_extra_test_steps():
    config = build_run_config({"task": {"name": "ctl"}}, [
        "model.attention=geometric", "model.copy_gate=true", "model.norm=post",
        "model.attention_mask=bidirectional", "model.pos_encoding=none", "model.readout=last",
        "model.d_model=16", "model.n_heads=2", "model.shared_layers=true", "model.n_layers=3",
        "model.eval_steps=6"])
    torch.manual_seed(0)
    model = build_model(config.model, 24, 14)
    ids = torch.randint(1, 24, (2, 9))
    mask = torch.arange(9)[None] < torch.tensor([[7], [9]])
    trace = routing_trace(model, ids, mask)
    assert trace["attention"].shape == (6, 2, 7, 7)  # steps, heads, real columns only
    assert trace["gates"].shape == (6, 7, 16)
    assert max_over_heads(trace["attention"]).shape == (6, 7, 7)
    activity = gate_activity(trace["gates"])
    assert torch.all((activity > 0) & (activity < 0.5))  # bias -3: gates start nearly closed
    assert not active_steps(trace["gates"]).any()


@pytest.mark.parametrize("direction, column", [("forward", 4), ("backward", 1)])
def test_answer_column_is_the_column_of_the_function_applied_last(direction, column):
    """f0 then f1 then f2 applied to a symbol: forward '<B> s f0 f1 f2 <E>', backward
    '<B> f2 f1 f0 s <E>'; the answer ends in f2's column."""
    from sglab.tasks import build_task

    task = build_task(build_run_config({"task": {"name": "ctl", "direction": direction,
                                                 "train_size": 200}}).task)
    functions, symbols = np.array([[0, 1, 2]]), np.array([3])
    encoded = task._encode(task.vocab, [(functions, symbols)])
    ids = encoded.tokens[:, : int(encoded.lengths[0])]
    assert int(answer_columns(task, ids)[0]) == column
    assert task.vocab.decode([int(ids[0, column])]) == [task.function_names[2]]
    value = task.tables[1, task.tables[0, 3]]  # the value f2 is applied to
    assert task.symbol_names[task.tables[2, value]] == task.vocab.decode(
        [int(encoded.labels[0])])[0]


def test_readout_by_length_matches_the_single_input_trace():
    """The batched readout measure equals the attention of the readout column on the
    answer's column read from one input at a time, and its accuracy the model's."""
    from sglab.tasks import build_task

    config = build_run_config({"task": {"name": "ctl", "direction": "backward",
                                        "train_size": 200, "test_size": 40,
                                        "ood_valid_size": 40, "iid_valid_size": 40}}, [
        "model.attention=geometric", "model.copy_gate=true", "model.norm=post",
        "model.attention_mask=bidirectional", "model.pos_encoding=none", "model.readout=last",
        "model.d_model=16", "model.n_heads=2", "model.shared_layers=true", "model.n_layers=3",
        "model.eval_steps=5"])
    task = build_task(config.task)
    torch.manual_seed(0)
    model = build_model(config.model, len(task.vocab), len(task.vocab))
    cells = readout_by_length(model, task, per_length=4)
    assert {c.split for c in cells} == {"iid_valid", "ood_valid", "ood_test"}
    assert [c.functions for c in cells if c.split == "ood_test"] == [9, 10]
    for cell in cells:
        examples = task.split(cell.split)
        index = torch.nonzero(examples.groups["length"] == cell.functions).flatten()[:4]
        attention, correct = [], []
        for i in index.tolist():
            batch = examples.subset(torch.tensor([i])).batch()
            trace = routing_trace(model, batch.input_ids, batch.key_padding_mask)
            last = max_over_heads(trace["attention"])[-1]  # [N, N] at the 5th step
            assert trace["attention"].shape[0] == 5
            attention.append(float(last[-1, int(answer_columns(task, batch.input_ids)[0])]))
            with torch.no_grad():
                logits = model(batch.input_ids, key_padding_mask=batch.key_padding_mask)
            correct.append(int(logits[0, 0].argmax()) == int(examples.labels[i]))
        assert cell.examples == len(index)
        assert cell.on_answer == pytest.approx(np.mean(attention), abs=1e-5)
        assert cell.accuracy == pytest.approx(np.mean(correct))
        assert cell.relative_share is None  # geometric attention has no absolute/relative switch


def test_readout_switch_is_the_last_steps_switch_of_the_readout_column():
    """+ abs/rel + gate (Eq. D.7): the readout's switch r is sigmoid(W_ar h + b_ar) of the
    readout column's input to the last step, one input at a time, mean over heads."""
    from sglab.models.abs_rel import AbsRelGatedAttention
    from sglab.tasks import build_task

    config = build_run_config({"task": {"name": "ctl", "direction": "backward",
                                        "train_size": 200, "test_size": 40,
                                        "ood_valid_size": 40, "iid_valid_size": 40}}, [
        "model.attention=abs_rel_gated", "model.copy_gate=true", "model.norm=post",
        "model.attention_mask=bidirectional", "model.pos_encoding=none", "model.readout=last",
        "model.d_model=16", "model.n_heads=2", "model.shared_layers=true", "model.n_layers=3"])
    task = build_task(config.task)
    torch.manual_seed(0)
    model = build_model(config.model, len(task.vocab), len(task.vocab))
    with torch.no_grad():  # open the copy gates and spread the switch away from 0.5, so
        for module in model.modules():  # columns change over steps and a wrong one shows
            if isinstance(module, AbsRelGatedAttention):
                module.switch.weight.normal_(0, 3)
        for name, parameter in model.named_parameters():
            if name.endswith("gate_ffn.out.bias"):
                parameter.fill_(0.0)
    cells = readout_by_length(model, task, per_length=3)
    attentions = [m for m in model.modules() if isinstance(m, AbsRelGatedAttention)]
    for cell in cells[:4] + cells[-2:]:
        examples = task.split(cell.split)
        index = torch.nonzero(examples.groups["length"] == cell.functions).flatten()[:3]
        shares = []
        for i in index.tolist():
            batch = examples.subset(torch.tensor([i])).batch()
            inputs = []  # every step's attention input, in order
            hooks = [a.register_forward_pre_hook(
                lambda m, args, inputs=inputs: inputs.append((m, args[0]))) for a in attentions]
            with torch.no_grad():
                model(batch.input_ids, key_padding_mask=batch.key_padding_mask)
                module, x = inputs[-1]
                shares.append(float(torch.sigmoid(module.switch(x))[0, -1].mean()))
                first = float(torch.sigmoid(module.switch(inputs[0][1]))[0, -1].mean())
                other = float(torch.sigmoid(module.switch(x))[0, 0].mean())
            for hook in hooks:
                hook.remove()
            assert len(inputs) == 3  # one shared layer, three steps
            assert min(abs(first - shares[-1]), abs(other - shares[-1])) > 1e-3
        assert cell.relative_share == pytest.approx(np.mean(shares), abs=1e-5)


def test_first_open_steps():
    activity = np.array([[0.1, 0.9, 0.0], [0.7, 0.9, 0.2], [0.2, 0.1, 0.3]])
    assert first_open_steps(activity) == [2, 1, None]
    # relative: halfway between each column's lowest and highest value; a flat column never opens
    partial = np.array([[0.03, 0.26, 0.05], [0.04, 0.28, 0.05], [0.25, 0.34, 0.06],
                        [0.32, 0.44, 0.06]])
    assert first_open_steps(partial, threshold=None) == [3, 4, None]


@pytest.mark.parametrize("name", ["ndr-arithmetic", "ndr-listops"])
def test_depth_experiments_build_valid_grids(name):
    experiment = registry.experiment(name)
    for preset in ("quick", "default", "paper"):
        configs = experiment.configs(experiment.preset(preset), [])
        models = {(c.model.name, c.model.attention.kind, c.model.positions.kind)
                  if c.model.name == "transformer" else (c.model.name,) for c in configs}
        assert len(configs) == 6 * len(experiment.preset(preset)["seeds"])
        assert ("transformer", "geometric", "none") in models
        assert all(c.train.target_metric == "ood_valid/exact_match" for c in configs)


def test_arithmetic_paper_grid_follows_the_thesis_code():
    """The thesis code's sampler; the gate-less transformers read the first column, the gated
    ones the last; dropout 0.5 on every transformer (simple_arithmetics_*.yaml)."""
    experiment = registry.experiment("ndr-arithmetic")
    params = experiment.preset("paper")
    runs = {arm.labels["variant"]: config for arm, config
            in zip(experiment.arms(params), experiment.configs(params, []))}
    assert {(c.task.structure, c.task.eval_subtree_probability) for c in runs.values()} == {
        ("thesis_code", 0.3)}
    assert {k: runs[k].model.readout for k in ("transformer", "rel", "abs_rel_gate", "ndr")} == {
        "transformer": "first", "rel": "first", "abs_rel_gate": "last", "ndr": "last"}
    assert {runs[k].model.dropout for k in ("transformer", "rel", "abs_rel_gate", "ndr")} == {0.5}
    # one input length per batch in the code's transformer sweeps, mixed in its RNN sweep
    assert {k: runs[k].task.train_sampling for k in runs} == {
        "transformer": "bucketed", "rel": "bucketed", "abs_rel_gate": "bucketed",
        "ndr": "bucketed", "lstm": "dataset", "bilstm": "dataset"}
    assert runs["lstm"].task.boundary_tokens is False
    # simple_arithmetics_reltrafo_kaiming.yaml: key dropout 0.1, none on the weights
    assert [(runs[k].model.attention.weight_dropout, runs[k].model.attention.key_dropout)
            for k in ("transformer", "rel")] == [(0.0, 0.0), (0.0, 0.1)]
    assert _attention_as_code(runs) == {"transformer": (False, False), "rel": (False, True)}
    # simple_arithmetics_gated.yaml: the gated relative attention drops its keys at 0.1
    assert _abs_rel_dropouts(runs) == (0.0, 0.1)
    listops = registry.experiment("ndr-listops")
    params = listops.preset("paper")
    runs = {arm.labels["variant"]: config for arm, config
            in zip(listops.arms(params), listops.configs(params, []))}
    assert runs["ndr"].model.ffn.d_ff == 2 * runs["ndr"].model.d_model
    assert (runs["ndr"].train.weight_decay, runs["rel"].train.weight_decay) == (0.09, 0.05)
    # torch.optim.AdamW(self.model.parameters(), weight_decay=wd): biases and gains decay too
    assert {config.train.weight_decay_on for config in runs.values()} == {"all"}
    assert {config.task.train_sampling for config in runs.values()} == {"bucketed"}
    # listops_big_reluni.yaml: key dropout 0.05 on the relative attention, none on weights
    assert [(runs[k].model.attention.weight_dropout, runs[k].model.attention.key_dropout)
            for k in ("transformer", "rel")] == [(0.0, 0.0), (0.0, 0.05)]
    assert _attention_as_code(runs) == {"transformer": (False, False), "rel": (False, True)}
    assert _abs_rel_dropouts(runs) == (0.0, 0.1)  # listops_big_lowlr_ndr.yaml


def _attention_as_code(runs) -> dict:
    """(biases, learned scale) of every softmax arm: the thesis code's attention has no
    biases (multi_head_attention.py:128-129, multi_head_relative_pos_attention.py:125-126)
    and its relative attention trains its scale (multi_head_relative_pos_attention.py:23)."""
    return {name: (config.model.attention.bias, config.model.attention.learned_scale)
            for name, config in runs.items() if getattr(config.model, "attention", None)
            is not None and config.model.attention.kind == "softmax"}


def _abs_rel_dropouts(runs) -> tuple[float, float]:
    attention = runs["abs_rel_gate"].model.attention
    return attention.dropout, attention.key_dropout


def test_listops_default_preset_is_the_measured_cpu_proxy():
    """The thesis code's trees, 300k lists of MIN / MAX / MED with 2-3 arguments, every run's
    learning rate decaying to 1e-4 over its own steps, the NDR 10k steps (README, P54)."""
    experiment = registry.experiment("ndr-listops")
    params = experiment.preset("default")
    runs = {arm.labels["variant"]: config for arm, config
            in zip(experiment.arms(params), experiment.configs(params, []))}
    assert {(c.task.structure, c.task.train_size, c.task.operators, c.task.max_arguments)
            for c in runs.values()} == {("thesis_code", 300_000, ("MIN", "MAX", "MED"), 3)}
    assert {(c.train.lr_schedule, c.train.min_lr, c.train.warmup_steps)
            for c in runs.values()} == {("cosine", 1e-4, 0)}
    assert (runs["ndr"].train.steps, runs["ndr"].train.lr, runs["ndr"].train.batch_size) == (
        10_000, 2e-3, 64)
    assert (runs["ndr"].model.block.ffn, runs["ndr"].model.attention.dropout) == (
        "gelu_residual", 0.1)
    assert (runs["ndr"].model.n_layers, runs["ndr"].model.block.eval_steps) == (10, 12)
    # variant_train sets one variant's fields: here the gated baseline's steps and the
    # LSTMs' batch (the other transformers keep the preset's 64)
    assert {k: c.train.steps for k, c in runs.items()} == {
        "ndr": 10_000, "abs_rel_gate": 2000, "transformer": 2000, "rel": 2000, "lstm": 6000,
        "bilstm": 6000}
    assert {k: c.train.batch_size for k, c in runs.items()} == {
        "ndr": 64, "abs_rel_gate": 64, "transformer": 64, "rel": 64, "lstm": 128, "bilstm": 128}


def test_ctl_default_preset_trains_on_uniform_lengths_with_thesis_depth():
    experiment = registry.experiment("ndr-ctl")
    params = experiment.preset("default")
    arms = experiment.arms(params)
    configs = experiment.configs(params, [])
    runs = {(arm.labels["variant"], arm.labels["direction"]): config
            for arm, config in zip(arms, configs)}
    assert {config.task.train_sampling for config in configs} == {"uniform"}
    for condition in ("forward", "backward"):
        ndr = runs[("ndr", condition)]
        assert ndr.model.n_layers == 14 and ndr.model.block.eval_steps == 20  # 14 in training
        assert ndr.model.attention.kind == "geometric" and ndr.model.block.kind == "copy_gate"
        assert ndr.train.target_metric == "ood_valid/exact_match"
    assert runs[("ndr", "backward")].train.steps > 2 * runs[("ndr", "forward")].train.steps
    # the NDR and its depth ablation draw one length per batch (the thesis code's NDR
    # sweeps bucket by length); every other model mixes lengths within a batch
    one_length = {key for key, config in runs.items() if config.task.batch_lengths == "one"}
    depths = [4, 6, 8, 10, 12]  # Table 5.2's shallow NDRs, forward
    assert one_length == {("ndr", "forward"), ("ndr", "backward"),
                          *((f"ndr@{steps}", "forward") for steps in depths)}
    # the gated baselines use the thesis code's layer: 1 head, ReLU data FFN 4 d wide, tanh
    for key in ("rel_gate", "abs_rel_gate"):
        for condition in ("forward", "backward"):
            model = runs[(key, condition)].model
            assert (model.n_heads, model.block.ffn, model.ffn.d_ff, model.block.update_norm,
                    model.init.ndr_init) == (1, "relu", 4 * model.d_model, "tanh", "code")
    assert runs[("abs_rel_gate", "forward")].train.steps == 24_000
    assert runs[("abs_rel_gate", "backward")].train.steps == 3000
    assert runs[("rel_gate", "forward")].train.steps == runs[("rel_gate", "backward")].train.steps
    assert runs[("ndr", "forward")].model.block.ffn == "gelu_residual"
    shallow = sorted(key for key in runs if key[0].startswith("ndr@"))
    assert shallow == sorted((f"ndr@{steps}", "forward") for steps in depths)  # one direction
    for steps in depths:  # trained and tested at its depth, as long as the 14-step NDR forward
        config = runs[(f"ndr@{steps}", "forward")]
        assert config.model.n_layers == config.model.block.eval_steps == steps
        assert config.train.steps == runs[("ndr", "forward")].train.steps
    assert [arm.labels["model"] for arm in arms[:2]] == ["NDR", "NDR"]  # slowest start first


def test_ctl_paper_preset_carries_table_d3():
    experiment = registry.experiment("ndr-ctl")
    params = experiment.preset("paper")
    runs = {(arm.labels["variant"], arm.labels["direction"]): config
            for arm, config in zip(experiment.arms(params), experiment.configs(params, []))}
    ndr = runs[("ndr", "backward")]
    assert (ndr.model.d_model, ndr.model.n_heads, ndr.model.ffn.d_ff, ndr.model.n_layers) == \
        (256, 1, 512, 14)
    assert (ndr.model.dropout, ndr.model.attention.dropout, ndr.model.block.gate_dropout) == \
        (0.5, 0.1, 0.1)
    assert (ndr.train.batch_size, ndr.train.lr, ndr.train.steps, ndr.train.weight_decay,
            ndr.train.grad_clip, ndr.train.betas) == (512, 1.5e-4, 30_000, 0.01, 5.0,
                                                      (0.9, 0.999))
    assert ndr.task.train_sampling == "bucketed" and ndr.model.block.ffn == "relu"
    # the thesis code buckets lengths only for the NDR and its depth ablation
    assert runs[("ndr@8", "forward")].task.train_sampling == "bucketed"
    for variant in ("transformer", "abs_rel_gate", "rel_gate", "lstm"):
        assert runs[(variant, "forward")].task.train_sampling == "dataset"
    assert runs[("lstm", "forward")].task.boundary_tokens is False
    # the thesis code's classifier heads score the 8 symbols only
    assert {config.task.scored_classes for config in runs.values()} == {"labels"}
    assert runs[("abs_rel_gate", "forward")].train.lr == 2e-4
    assert runs[("abs_rel_gate", "forward")].model.ffn.d_ff == 1024  # hard-coded 4 d in the code
    assert runs[("transformer", "forward")].model.n_layers == 11
    assert runs[("lstm", "forward")].model.d_model == 200
    assert runs[("bilstm", "forward")].train.batch_size == 256
    # the code's softmax attention drops no weights; its relative attention drops the keys
    # at transformer.attention_dropout (ctl_ndr_no_absgate.yaml: 0.1; the baselines: 0)
    softmax = {variant: (config.model.attention.weight_dropout, config.model.attention.key_dropout)
               for (variant, direction), config in runs.items() if direction == "forward"
               and config.model.name == "transformer" and config.model.attention.kind == "softmax"}
    assert softmax == {"transformer": (0.0, 0.0), "rel": (0.0, 0.0), "rel_gate": (0.0, 0.1),
                       "transformer_act": (0.0, 0.0), "rel_act": (0.0, 0.0),
                       "rel_act_ut": (0.0, 0.0)}
    forward = {variant: config for (variant, direction), config in runs.items()
               if direction == "forward" and config.model.name == "transformer"}
    assert _attention_as_code(forward) == {
        "transformer": (False, False), "rel": (False, True), "rel_gate": (False, True),
        "transformer_act": (False, False), "rel_act": (False, True), "rel_act_ut": (False, True)}
    assert _abs_rel_dropouts(forward) == (0.0, 0.1)  # ctl_ndr.yaml: attention_dropout 0.1
    # the code's + geom. layer normalises its attention rows; its NDR does not (norm_att 0)
    geometric = {variant: config.model.attention.normalize for variant, config in forward.items()
                 if config.model.attention.kind == "geometric"}
    assert geometric == {"geom": True, "geom_act": True, "geom_act_ut": True, "ndr": False,
                         **{f"ndr@{steps}": False for steps in (4, 6, 8, 10, 12)}}


@pytest.mark.parametrize("name, default", [
    ("ndr-ctl", "labels"), ("ndr-listops", "labels"), ("ndr-arithmetic", "labels"),
    ("ctlpp", "vocabulary"), ("ctlpp-staged", "vocabulary")])
def test_paper_presets_score_only_the_labels(name, default):
    # the defaults of the CTL++ experiments keep the vocabulary until re-measured
    experiment = registry.experiment(name)
    for preset, scored in (("paper", "labels"), ("default", default)):
        configs = experiment.configs(experiment.preset(preset), [])
        assert {config.task.scored_classes for config in configs} == {scored}


def _probe(gates):
    tokens = ["<B>", "a", "b", "c", "d", "101", "<E>"]
    return RoutingProbe(tokens, "011", "011", np.zeros((6, 1, 7, 7)),
                        None if gates is None else np.asarray(gates, dtype=float))


def test_gate_order_claim_reads_the_measured_gates():
    # backward CTL: the function next to the symbol (column 4) opens first, then leftwards
    spec = registry.experiment("ndr-ctl").spec.claims["ndr-gates-open-in-order"]
    staircase = np.full((6, 7), 0.1)
    for column, step in {4: 1, 3: 2, 2: 3, 1: 4}.items():
        staircase[step:, column] = 0.9
    measured = gates_open_in_order(_probe(staircase))
    assert isinstance(measured, Measured)
    assert measured.values == {"Spearman ρ(position, step)": pytest.approx(-1.0),
                               "fraction of function columns that open": 1.0}
    assert judge("ndr-gates-open-in-order", spec, measured).verdict == Verdict.REPRODUCES
    wrong_way = gates_open_in_order(_probe(staircase[:, [0, 4, 3, 2, 1, 5, 6]]))
    assert judge("ndr-gates-open-in-order", spec, wrong_way).verdict == Verdict.FAILS
    unmeasured = gates_open_in_order(_probe(None))
    assert isinstance(unmeasured, NotMeasured)
    assert judge("ndr-gates-open-in-order", spec, unmeasured).verdict == Verdict.NOT_MEASURED


def test_arms_label_every_run_and_grid_axes_reject_overrides():
    experiment = registry.experiment("ndr-arithmetic")
    arms = experiment.arms(experiment.preset("quick"))
    assert [arm.labels["model"] for arm in arms] == [
        "NDR", "Transformer", "+ rel", "+ abs/rel + gate", "LSTM", "BiLSTM"]
    assert {arm.labels["condition"] for arm in arms} == {"all"}
    ctl = registry.experiment("ndr-ctl")
    with pytest.raises(SglabError, match="'task.direction' is a grid axis"):
        ctl.configs(ctl.preset("quick"), ["task.direction=forward"])


@pytest.mark.parametrize("name", ["ndr-ctl", "ndr-arithmetic", "ndr-listops"])
def test_default_presets_run_their_seeds_and_params_are_checked(name):
    experiment = registry.experiment(name)
    # ndr-ctl: 5 seeds as Tables 5.1-5.2; arithmetic and ListOps 3 (their cost on 2 cores)
    assert experiment.preset("default")["seeds"] == \
        ([0, 1, 2, 3, 4] if name == "ndr-ctl" else [0, 1, 2])
    assert experiment.preset("paper")["seeds"] == [0, 1, 2, 3, 4]
    with pytest.raises(SglabError, match="variant 'ndr'"):
        experiment.preset("quick", changes=["variants.ndr.model.d_model=wide"])
    if name == "ndr-ctl":
        with pytest.raises(SglabError, match="unknown conditions"):
            experiment.preset("quick", changes=["routing_condition=sideways"])
        with pytest.raises(SglabError, match="extra_test_steps"):
            experiment.preset("quick", changes=["depth_ablation={steps: [4], extra_test_steps: [0]}"])
        assert experiment.preset("default")["depth_ablation"]["extra_test_steps"] == [2, 4]


def test_arithmetic_default_budgets():
    """Gated models 8k steps of 64, the others 2k of 128; the NDR with the App. E FFN."""
    experiment = registry.experiment("ndr-arithmetic")
    params = experiment.preset("default")
    runs = {arm.labels["variant"]: config for arm, config
            in zip(experiment.arms(params), experiment.configs(params, []))}
    examples = {k: c.train.steps * c.train.batch_size for k, c in runs.items()}
    assert examples == {"ndr": 512_000, "abs_rel_gate": 512_000, "transformer": 256_000,
                        "rel": 256_000, "lstm": 256_000, "bilstm": 256_000}
    assert runs["ndr"].model.block.ffn == "gelu_residual"
    assert runs["abs_rel_gate"].model.block.ffn == "relu"
    assert runs["ndr"].train.batch_size == 64 and runs["rel"].train.batch_size == 128

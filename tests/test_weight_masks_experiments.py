"""The weight-mask experiments at their quick presets, end to end (two stages: base nets,
then masks on them). masks-scan and masks-math: tests/test_weight_masks_scan.py and
tests/test_weight_masks_math.py."""

import json

import pytest
import torch

from sglab.analysis import weight_masks as wm
from sglab.experiments.base import run_experiment
from sglab.experiments.masks import weight_masks
from sglab.registry import experiment


@pytest.mark.parametrize("name", ["masks-add-mul", "masks-double-add"])
def test_quick_preset_end_to_end(name, tmp_path, monkeypatch):
    results = run_experiment(experiment(name), "quick", tmp_path / "out", tmp_path / "runs",
                             workers=1, threads=1, printer=lambda line: None)
    labels = results["labels"]
    models = results["params"]["models"]
    edited = experiment(name).edited  # variants that mask another variant's nets
    assert "FNN" in models and any(m.startswith("LSTM") for m in models)
    assert (name == "masks-double-add") == ("FNN sanity" in models)
    bases = {x["model"]: x["run_id"] for x in labels if x["role"] == "base"}
    masks = [x for x in labels if x["role"] == "mask"]
    assert set(bases) == set(models) - set(edited)  # no base net of their own
    assert len(masks) == len(models) * (1 + len(experiment(name).subsets))
    for mask in masks:  # every mask run masks the base run of its model (or the one it edits)
        variant = mask["model"]
        config = (tmp_path / "runs" / mask["run_id"] / "config.yaml").read_text()
        assert f"base_run: {bases[edited.get(variant, (variant,))[0]]}" in config
        assert ("base_edit: copy_pair_io" in config) == (variant in edited)
    claims = {c["id"]: c for c in results["claims"]}
    assert list(claims) == list(experiment(name).spec.claims)  # every claim, in spec order
    assert {f"{claim}[{model}]" for model in models for claim in
            ("mask-specializes", "inverted-mask-fails-own", "full-mask-keeps-accuracy")} <= set(claims)
    assert {f"sanity-sharing-near-total[{v}]" for v in edited} <= set(claims)
    # the quick nets do not learn the task, so no claim is judged on them; a claim on a
    # variant the preset does not train says so
    assert {c["verdict"] for c in claims.values()} == {"NOT MEASURED"}
    for claim_id, claim in claims.items():
        variant = claim_id.partition("[")[2][:-1]
        reason = "the unmasked nets reach only" if variant in models else \
            "is not among this preset's models"
        assert reason in claim["evidence"], claim_id
    tables = results["sections"][0]["tables"]
    assert tables[0]["columns"][:3] == ["tested", "none", "full"]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["experiment"] == name
    # with the check on the unmasked nets lifted, the same (reused) runs give every claim of
    # a trained variant a verdict: its values are measured under the names its rules read
    monkeypatch.setattr(weight_masks, "guarded", lambda claims, *args, **kwargs: claims)
    judged = run_experiment(experiment(name), "quick", tmp_path / "judged", tmp_path / "runs",
                            workers=1, threads=1, printer=lambda line: None)
    assert judged["runs"] == results["runs"]
    for claim in judged["claims"]:
        trained = claim["id"].partition("[")[2][:-1] in models
        assert (claim["verdict"] != "NOT MEASURED") == trained, claim["id"]
        assert not trained or claim["values"], claim["id"]


class Base(dict):
    """The three things ``mask_arms`` reads of a finished base run: labels, id, seed."""
    run_id, seed = "base", 0


def test_lstm_nets_and_masks_train_their_own_number_of_steps():
    add_mul = experiment("masks-add-mul")
    # four different step counts, so that a variant reading another's shows
    params = {**add_mul.preset("default"), "base_steps": 300, "lstm_base_steps": 500,
              "mask_steps": 200, "lstm_mask_steps": 400}
    steps = {arm.labels["model"]: arm.config().train.steps for arm in add_mul.arms(params)}
    assert steps == {"FNN": params["base_steps"], "LSTM": params["lstm_base_steps"]}

    bases = [Base(model=variant) for variant in ("FNN", "LSTM")]
    masks = {(a.labels["model"], a.labels["mask"]): a.config().train.steps
             for a in add_mul.mask_arms(params, bases)}
    assert masks == {**{("FNN", m): params["mask_steps"] for m in ("full", "add", "mul")},
                     **{("LSTM", m): params["lstm_mask_steps"] for m in ("full", "add", "mul")}}
    del params["lstm_base_steps"], params["lstm_mask_steps"]  # without them: the shared steps
    assert {arm.config().train.steps for arm in add_mul.arms(params)} == {params["base_steps"]}
    assert {a.config().train.steps for a in add_mul.mask_arms(params, bases)} == \
        {params["mask_steps"]}


def test_paper_lstm_is_the_thesis_codes_two_layers_with_its_own_beta():
    # RobertCsordas/modules: the LSTM has 2 layers of 256 (profiles add_mul, tuple); on
    # double addition its masks use beta 1e-4 where the FNN's use 4e-4 (sweeps tuple_rnn,
    # tuple_feedforward_big)
    double_add = experiment("masks-double-add")
    params = {**double_add.preset("paper"), "seeds": [0]}
    layers = {arm.labels["model"]: arm.config().model for arm in double_add.arms(params)}
    assert {m: (c.name, getattr(c, "n_layers", None)) for m, c in layers.items()} == {
        "FNN": ("fnn", None), "LSTM": ("lstm", 2), "LSTM forced": ("lstm", 2)}

    bases = [Base(model=variant) for variant in ("FNN", "LSTM", "LSTM forced")]
    betas = {(a.labels["model"], a.labels["mask"]): a.base["model"]["beta"]
             for a in double_add.mask_arms(params, bases)}
    assert len(betas) == 4 * 3  # FNN sanity masks the FNN's net
    assert {b for (m, _), b in betas.items() if m.startswith("FNN")} == {4e-4}
    assert {b for (m, _), b in betas.items() if m.startswith("LSTM")} == {1e-4}
    del params["lstm_beta"]  # without it every mask uses the shared beta
    assert {a.base["model"]["beta"] for a in double_add.mask_arms(params, bases)} == {4e-4}
    assert {arm.config().model.n_layers for arm in double_add.arms({**params, "lstm_layers": 1})
            if arm.labels["model"] == "LSTM"} == {1}
    add_mul = experiment("masks-add-mul").preset("paper")
    assert add_mul["lstm_layers"] == 2 and add_mul["lstm_beta"] is None  # the shared beta


def test_tried_masks_invert_each_subtask_mask_whole_and_in_the_hidden_layers():
    one, zero = torch.ones(2, 2), torch.zeros(2, 2)
    full = {"first": one, "middle": one, "last": one}
    add = {"first": one, "middle": zero, "last": zero}
    tried = wm.tried_masks({"full": full, "add": add}, ["add"])
    assert list(tried) == ["none", "full", "full, first half", "full, second half", "add",
                           "not add", "not add (hidden)"]

    def same(masks, expected):
        return all(torch.equal(masks[n], expected[n]) for n in expected)

    assert same(tried["not add"], {"first": zero, "middle": one, "last": one})
    # hidden-only inversion (Tab. B.2): the first and last layers keep the full-task mask
    assert same(tried["not add (hidden)"], {"first": one, "middle": one, "last": one})
    assert same(tried["none"], {"first": one, "middle": one, "last": one})
    assert wm.weight_layers({"w": one, "b": torch.ones(2)}) == ["w"]

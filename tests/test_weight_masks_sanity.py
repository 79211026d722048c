"""The sanity check of the double-addition masks (thesis App. B.3.1, Fig. B.2): masks on a
copy of the FNN with pair 1's input and output weights copied onto pair 2's."""

import hashlib

import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.models.masked import load_base_run
from sglab.registry import experiment
from sglab.tasks import build_task
from sglab.train.loop import train

VOCAB, WIDTH = 11, 8  # double_add: padding + 10 digits; a1 a0 b1 b0 c1 c0 d1 d0


def settings(steps, lr=1e-2):
    return {"steps": steps, "batch_size": 32, "lr": lr, "lr_schedule": "constant",
            "warmup_steps": 0, "weight_decay": 0.0, "eval_interval": steps,
            "log_interval": steps, "checkpoint_interval": steps}


def base_config(steps=60, **model):
    fnn = {"name": "fnn", "hidden": [24, 16], "outputs": 4, "passes": "per_pair"}
    return build_run_config({"task": {"name": "double_add", "train_size": 2000,
                                      "valid_size": 200},
                             "model": fnn | model, "train": settings(steps)})


def mask_config(run_id, steps=4, **model):
    return build_run_config({"task": {"name": "double_add", "subset": "pair1",
                                      "valid_size": 200},
                             "model": {"name": "masked", "base_run": run_id,
                                       "base_edit": "copy_pair_io", **model},
                             "train": settings(steps)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A per-pair FNN trained on double_add (pairs with their own I/O weights)."""
    runs = tmp_path_factory.mktemp("runs")
    return runs, train(base_config(), runs, printer=None)["run_id"]


def edited_net(runs):
    runs_dir, run_id = runs
    return build_model(mask_config(run_id).model, VOCAB, WIDTH, runs_dir=runs_dir).eval()


def checkpoint_digest(runs):
    runs_dir, run_id = runs
    return hashlib.sha256((runs_dir / run_id / "checkpoints" / "last.pt").read_bytes()).hexdigest()


def test_edit_makes_pair_2_answer_exactly_like_pair_1(runs):
    model = edited_net(runs)
    plain = load_base_run(*runs)
    task = build_task(mask_config(runs[1]).task)
    ids = task.split("iid_test")["tokens"][:200].clone()
    ids[:, 4:] = ids[:, :4]  # pair 2's digits = pair 1's
    with torch.no_grad():
        out, before = model(ids), plain(ids)
    # the same digits give pair 2 the logits (and answers) pair 1 gets
    assert torch.allclose(out[:, 2:], out[:, :2], atol=1e-5)
    assert torch.equal(out[:, 2:].argmax(-1), out[:, :2].argmax(-1))
    assert not torch.allclose(before[:, 2:], before[:, :2], atol=1e-3)  # unedited: they differ
    assert torch.equal(out[:, :2], before[:, :2])  # pair 1 is untouched
    other = task.split("iid_test")["tokens"][:200]  # other inputs: pair 1 is untouched too
    with torch.no_grad():
        assert torch.equal(model(other)[:, :2], plain(other)[:, :2])


def test_edit_copies_exactly_pair_1s_columns_and_rows(runs):
    edited = dict(edited_net(runs).base.named_parameters())
    plain = dict(load_base_run(*runs).named_parameters())
    per_position = VOCAB - 1  # one-hot without padding
    pair = 4 * per_position  # pair 1: positions 0-3, pair 2: positions 4-7
    slots = 2 * VOCAB  # pair 1: answer slots 0-1, pair 2: 2-3, VOCAB logits each
    first, last = "layers.0", "layers.2"
    assert edited[f"{first}.weight"].shape == (24, WIDTH * per_position)
    assert torch.equal(edited[f"{first}.weight"][:, pair:], plain[f"{first}.weight"][:, :pair])
    assert torch.equal(edited[f"{first}.weight"][:, :pair], plain[f"{first}.weight"][:, :pair])
    assert torch.equal(edited[f"{last}.weight"][slots:], plain[f"{last}.weight"][:slots])
    assert torch.equal(edited[f"{last}.bias"][slots:], plain[f"{last}.bias"][:slots])
    assert torch.equal(edited[f"{last}.weight"][:slots], plain[f"{last}.weight"][:slots])
    assert not torch.equal(edited[f"{first}.weight"], plain[f"{first}.weight"])
    for name in (f"{first}.bias", "layers.1.weight", "layers.1.bias"):  # shared already
        assert torch.equal(edited[name], plain[name])


def test_mask_training_on_the_edit_leaves_the_base_run_unchanged(runs):
    runs_dir, run_id = runs
    before = checkpoint_digest(runs)
    weights = {n: p.clone() for n, p in load_base_run(runs_dir, run_id).named_parameters()}
    summary = train(mask_config(run_id, steps=6), runs_dir, printer=None)
    assert summary["status"] == "finished"
    assert checkpoint_digest(runs) == before
    after = dict(load_base_run(runs_dir, run_id).named_parameters())
    assert all(torch.equal(weights[n], after[n]) for n in weights)
    # the mask run computes with the edit: it is rebuilt with the copied weights
    rebuilt = build_model(mask_config(run_id, steps=6).model, VOCAB, WIDTH, runs_dir=runs_dir)
    assert torch.equal(rebuilt.base.layers[0].weight[:, 40:], after["layers.0.weight"][:, :40])


def test_the_edit_needs_a_per_pair_fnn_on_double_add(runs, tmp_path):
    lstm = {"name": "lstm", "d_model": 8, "dropout": 0.0, "outputs": 4,
            "input_mode": "repeat", "repeat_steps": 6}
    others = {  # what the error calls each base run
        "lstm trained on double_add": build_run_config(
            {"task": {"name": "double_add", "train_size": 200, "valid_size": 50},
             "model": lstm, "train": settings(2)}),
        "fnn (passes=single) trained on double_add": base_config(2, passes="single"),
        "fnn (passes=single) trained on add_mul": build_run_config(
            {"task": {"name": "add_mul", "valid_size": 50},
             "model": {"name": "fnn", "hidden": [8]}, "train": settings(2)}),
    }
    for shown, config in others.items():
        run_id = train(config, tmp_path, printer=None)["run_id"]
        with pytest.raises(SglabError, match=r"base_edit=copy_pair_io needs an fnn base run") as e:
            build_model(mask_config(run_id).model, VOCAB, WIDTH, runs_dir=tmp_path)
        message = str(e.value)
        assert "\n" not in message and f"is a {shown};" in message
    with pytest.raises(SglabError, match="does not combine with model.train_base"):
        mask_config(runs[1], train_base=True)
    with pytest.raises(SglabError, match="base_edit"):
        mask_config(runs[1], base_edit="swap")


def test_edited_variant_needs_the_variant_it_edits():
    double_add = experiment("masks-double-add")
    params = double_add.preset("quick")
    with pytest.raises(SglabError, match="'FNN sanity' masks the nets of 'FNN'"):
        double_add.arms({**params, "models": ["FNN sanity"]})
    arms = double_add.arms(params)  # the sanity variant trains no base net of its own
    assert sorted({arm.labels["model"] for arm in arms}) == ["FNN", "LSTM forced"]

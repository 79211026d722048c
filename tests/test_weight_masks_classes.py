"""Class removal with weight masks (thesis Sec. 3.4): the digits task, the CNN under the
masked model, masks fixed from another run, the drop/IoU analyses and the experiment."""

import json

import numpy as np
import pytest
import torch
from torch.func import functional_call

from sglab.analysis import weight_masks as wm
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.experiments.base import run_experiment
from sglab.experiments.claims import Verdict, judge_all
from sglab.models import build_model
from sglab.models.masked import MaskedConfig, MaskedModel
from sglab.registry import experiment
from sglab.tasks import build_task
from sglab.tasks.digits import load_images, pixel_permutation, split_indices
from sglab.train.evaluate import evaluate

CLAIMS = ["full-mask-keeps-accuracy", "removed-class-drops-most",
          "removed-class-drops-more-than-any-other", "mask-seeds-agree"]


def digits(**fields):
    return build_task(build_run_config({"task": {"name": "digits", **fields},
                                        "model": {"name": "cnn"}}).task)


def small_cnn(**fields):
    config = build_run_config({"task": {"name": "digits"},
                               "model": {"name": "cnn", "channels": [3, 5], "hidden": [8],
                                         **fields}}).model
    torch.manual_seed(0)
    return build_model(config, 17, 64).eval()


def test_digits_split_is_stratified_disjoint_and_deterministic():
    _, labels = load_images()
    index = split_indices(labels, 0.15, 0.15, seed=0)
    together = np.concatenate(list(index.values()))
    assert len(together) == len(labels) == 1797 and len(set(together.tolist())) == 1797
    share = np.bincount(labels, minlength=10) / len(labels)
    for name, rows in index.items():  # each class in the data's proportion (two rounded cuts)
        counts = np.bincount(labels[rows], minlength=10)
        assert np.all(np.abs(counts - share * len(rows)) <= 2.0), name
    assert len(index["iid_test"]) == 270 and len(index["train"]) == 1257
    again = split_indices(labels, 0.15, 0.15, seed=0)
    other = split_indices(labels, 0.15, 0.15, seed=1)
    assert all(np.array_equal(index[k], again[k]) for k in index)
    assert not np.array_equal(index["iid_test"], other["iid_test"])
    a, b = digits(), digits()
    assert torch.equal(a.split("iid_test")["pixels"], b.split("iid_test")["pixels"])
    assert int(a.split("train")["pixels"].max()) == 16 and len(a.vocab) == 17


def test_remove_class_leaves_training_only():
    task = digits(remove_class=3)
    batch = task.train_batch(4000, torch.Generator().manual_seed(0))
    assert batch.input_ids.shape == (4000, 64) and batch.targets.shape == (4000, 1)
    assert not bool((batch.targets == 3).any())
    assert set(batch.targets.unique().tolist()) == set(range(10)) - {3}
    full = digits().train_batch(4000, torch.Generator().manual_seed(0))
    assert bool((full.targets == 3).any())
    assert bool((task.split("iid_test")["labels"] == 3).any())

    class Always3(torch.nn.Module):
        def forward(self, ids, key_padding_mask=None):
            return torch.nn.functional.one_hot(torch.full((len(ids), 1), 3), 10).float()

    metrics = evaluate(Always3(), task, "iid_test", 64)
    labels = task.split("iid_test")["labels"]
    assert metrics["iid_test/tpr/class=3"] == 1.0 and metrics["iid_test/tpr/class=0"] == 0.0
    assert metrics["iid_test/exact_match"] == pytest.approx(float((labels == 3).float().mean()))
    assert metrics["iid_test/tpr"] == pytest.approx(0.1)


def test_permutation_is_a_fixed_bijection_of_the_pixels():
    perm = pixel_permutation(5)
    assert torch.equal(perm.sort().values, torch.arange(64))
    assert torch.equal(perm, pixel_permutation(5)) and not torch.equal(perm, pixel_permutation(6))
    plain, permuted = digits(), digits(permutation=5)
    assert torch.equal(permuted.split("iid_test")["pixels"],
                       plain.split("iid_test")["pixels"][:, perm])
    assert torch.equal(permuted.split("iid_test")["labels"], plain.split("iid_test")["labels"])


def test_resized_digits_keep_labels_and_images_and_permute_all_positions():
    plain, big = digits(), digits(side=28, permutation=5)
    small, large = plain.split("iid_test")["pixels"], digits(side=28).split("iid_test")["pixels"]
    assert large.shape == (len(small), 784) and big.max_length == 784
    assert int(large.min()) >= 0 and int(large.max()) <= 16
    # bilinear resizing keeps each image: its mean level within half a level, and the
    # 2x2-pooled 16x16 version correlated with the original pixels
    assert float((large.float().mean(1) - small.float().mean(1)).abs().max()) < 0.5
    sixteen = digits(side=16).split("iid_test")["pixels"].float().view(-1, 1, 16, 16)
    pooled = torch.nn.functional.avg_pool2d(sixteen, 2).flatten(1)
    assert float(torch.corrcoef(torch.stack([pooled.flatten(), small.float().flatten()]))[0, 1]) > 0.95
    assert torch.equal(big.split("iid_test")["pixels"], large[:, pixel_permutation(5, 28)])
    assert torch.equal(big.split("iid_test")["labels"], plain.split("iid_test")["labels"])


def test_bad_digits_and_cnn_settings_are_sglab_errors():
    with pytest.raises(SglabError, match="remove_class=10 is not a class"):
        build_run_config({"task": {"name": "digits", "remove_class": 10}})
    with pytest.raises(SglabError, match="model.classes=10"):
        digits().check_model(build_run_config({"task": {"name": "digits"},
                                                "model": {"name": "cnn", "classes": 4}}).model)
    config = build_run_config({"task": {"name": "digits"}, "model": {"name": "cnn"}}).model
    with pytest.raises(SglabError, match="square"):
        build_model(config, 17, 60)
    with pytest.raises(SglabError, match="fixed and model.fixed_from go together"):
        build_run_config({"task": {"name": "digits"},
                          "model": {"name": "masked", "base_run": "x", "fixed": ["output.*"]}})


def test_cnn_under_the_masked_model():
    base = small_cnn()
    model = MaskedModel(MaskedConfig(base_run="unused"), base)
    assert model.masked_names == ["convs.0.weight", "convs.1.weight", "hidden.0.weight",
                                  "output.weight"]  # biases only with mask_biases
    with_biases = MaskedModel(MaskedConfig(base_run="unused", mask_biases=True), base)
    assert "convs.0.bias" in with_biases.masked_names
    ids = digits().split("iid_test")["pixels"][:8]
    ones = {n: torch.ones_like(m) for n, m in model.final_masks().items()}
    with model.use_masks(ones):
        assert torch.equal(model.eval()(ids), base(ids))
    torch.manual_seed(1)
    masks = {n: (torch.rand(4, *m.shape) < 0.6).float() for n, m in ones.items()}
    together = model.forward_masked(ids, masks)
    weights = dict(base.named_parameters())
    for k in range(4):  # sample k masks slice k of the batch, as a lone masked call would
        alone = functional_call(base, {n: weights[n] * masks[n][k] for n in masks},
                                (ids[2 * k:2 * k + 2],))
        assert torch.allclose(together[2 * k:2 * k + 2], alone, atol=1e-5)
    assert not torch.allclose(together[:2], base(ids[:2]), atol=1e-3)


def test_fixed_masks_are_used_and_not_trained():
    base = small_cnn()
    zero_out = {"output__weight": torch.zeros(10, 8)}
    config = MaskedConfig(base_run="unused", fixed=["output.*"], fixed_from="control")
    model = MaskedModel(config, base, zero_out)
    assert "output.weight" not in model.masked_names and "output__weight" not in model.logits
    assert torch.equal(model.final_masks()["output.weight"], torch.zeros(10, 8))
    ids = torch.randint(0, 17, (8, 64))
    bias = base.output.bias.expand(8, 10)
    assert torch.allclose(model.eval()(ids)[:, 0], bias)  # output weights all removed
    assert torch.allclose(model.train()(ids)[:, 0], bias)  # in every mask sample too
    with pytest.raises(SglabError, match="has no mask of the shape of output.weight"):
        MaskedModel(config, base, {"output__weight": torch.zeros(3, 3)})
    with pytest.raises(SglabError, match="no masked parameter matches"):
        MaskedModel(MaskedConfig(base_run="u", fixed=["nope.*"], fixed_from="c"), base, {})


def test_class_removal_analyses_on_hand_built_inputs():
    reference = torch.tensor([1.0, 0.8, 0.5, 0.0])
    masked = torch.tensor([0.9, 0.2, 0.5, 0.0])
    assert torch.allclose(wm.relative_drops(reference, masked), torch.tensor([0.1, 0.75, 0, 0]))
    drops = wm.removal_drops(reference, masked, removed=1)
    assert drops["target"] == pytest.approx(0.75)
    assert drops["others_mean"] == pytest.approx(0.1 / 3)
    assert drops["others_max"] == pytest.approx(0.1)
    assert drops["max_other_over_target"] == pytest.approx(0.1 / 0.75)
    assert wm.removal_drops(reference, reference, 0)["max_other_over_target"] == float("inf")
    a = {"x": torch.tensor([1.0, 1, 0]), "y": torch.tensor([[1.0, 0]])}
    b = {"x": torch.tensor([1.0, 0, 0]), "y": torch.tensor([[1.0, 1]])}
    assert wm.masks_iou(a, b) == pytest.approx(2 / 4) and wm.masks_iou(a, a) == 1.0
    table = wm.confusion(torch.tensor([0, 1, 1, 2]), torch.tensor([0, 0, 1, 1]), 3)
    assert table.tolist() == [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]


def test_quick_preset_end_to_end(tmp_path):
    results = run_experiment(experiment("masks-class-removal"), "quick", tmp_path / "out",
                             tmp_path / "runs", workers=1, threads=1, printer=lambda line: None)
    labels = results["labels"]
    params = results["params"]
    base = [x for x in labels if x["role"] == "base"]
    controls = [x for x in labels if x.get("mask") == "full"]
    removals = [x for x in labels if x.get("mask", "").startswith("remove")]
    assert len(base) == len(params["seeds"]) and len(controls) == 2 * len(base)
    assert len(removals) == len(params["removed"]) * len(base)
    control0 = next(x["run_id"] for x in controls if x["mask_seed"] == "0")
    for removal in removals:  # the output layer fixed from the seed-0 control mask
        config = (tmp_path / "runs" / removal["run_id"] / "config.yaml").read_text()
        assert f"fixed_from: {control0}" in config and "remove_class:" in config
    claims = results["claims"]
    assert [c["id"] for c in claims] == CLAIMS
    assert {c["source"].split(", ")[0] for c in claims} == {"001_76659a6d281e669d.txt"}
    for claim in claims:  # judged on a net that solves the digits, else not measured
        if claim["verdict"] == "NOT MEASURED":
            assert "accuracy on iid_test" in claim["evidence"]
        else:
            assert all(len(v["seeds"]) == 1 for v in claim["values"].values()
                       if isinstance(v, dict))
    tables = results["sections"][0]["tables"]
    assert tables[0]["columns"][:3] == ["mask", "accuracy", "0"]
    assert [row[0] for row in tables[0]["rows"]] == ["none", "full", "remove 0", "remove 3"]
    assert (tmp_path / "out" / "figures" / "class-removal-drops.png").is_file()
    assert json.loads((tmp_path / "out" / "results.json").read_text())["experiment"] == \
        "masks-class-removal"


def removal_seed(target: float, other: float, largest: float, iou: float = 0.93,
                 unmasked: float = 0.97, kept: float = 0.99, removed=(0, 3)) -> dict:
    """Measures of one net: every removal mask drops its class by ``target`` and the others
    by ``other`` on average (``largest`` at most); the control mask keeps ``kept`` of the
    unmasked accuracy; the two control masks agree by ``iou``."""
    drops = {"target": target, "others_mean": other, "others_max": largest}
    return {"accuracy": {"none": unmasked, "full": unmasked * kept},
            "drops": {c: drops for c in removed}, "iou": iou}


@pytest.mark.parametrize(("seeds", "expected"), [
    # Fig. 3.7, B.3.8, B.2.1: the removed class drops 40-60%, the others little
    ([removal_seed(0.5, 0.05, 0.15), removal_seed(0.45, 0.04, 0.2)],
     ["REPRODUCES", "REPRODUCES", "REPRODUCES", "REPRODUCES"]),
    # the other classes drop as much: no class-exclusive weights
    ([removal_seed(0.5, 0.45, 0.6), removal_seed(0.45, 0.4, 0.5)],
     ["REPRODUCES", "FAILS", "FAILS", "REPRODUCES"]),
    # a control mask that loses accuracy; masks that disagree on one net
    ([removal_seed(0.5, 0.05, 0.15, kept=0.9), removal_seed(0.5, 0.05, 0.15, iou=0.7)],
     ["FAILS", "REPRODUCES", "REPRODUCES", "FAILS"]),
    # nets that do not solve the task: nothing is judged
    ([removal_seed(0.5, 0.05, 0.15, unmasked=0.5)], ["NOT MEASURED"] * 4),
])
def test_class_removal_claims_on_constructed_measures(seeds, expected):
    exp = experiment("masks-class-removal")
    params = exp.preset("quick")
    claims = judge_all(exp.spec.claims, exp.measured(params, seeds))
    assert [c.id for c in claims] == CLAIMS
    assert [c.verdict for c in claims] == [Verdict(v) for v in expected]
    drops = next(c for c in claims if c.id == "removed-class-drops-most")
    if drops.verdict != Verdict.NOT_MEASURED:
        assert len(drops.values["removed-class drop"]["seeds"]) == len(seeds)
        assert len(drops.values["removed-class drop per class"]) == len(params["removed"])


def test_mask_norms_masks_layernorm_gains_and_biases_but_not_other_biases():
    """The authors' masked LayerNorm names its parameters gamma/beta, so their `bias_no_mask`
    filter leaves them masked: a zero mask on a gain removes that channel after the norm."""
    from sglab.models import build_model

    config = build_run_config({}, ["model.d_model=8", "model.n_heads=2", "model.n_layers=1",
                                   "model.bias=true"]).model
    torch.manual_seed(0)
    base = build_model(config, 10, 6)
    plain = MaskedModel(MaskedConfig(base_run="unused"), base).masked_names
    norms = MaskedModel(MaskedConfig(base_run="unused", mask_norms=True), base)
    norm_names = {n for m, module in base.named_modules() if isinstance(module, torch.nn.LayerNorm)
                  for n in (f"{m}.weight", f"{m}.bias")}
    assert norm_names and not norm_names & set(plain)
    assert set(norms.masked_names) == set(plain) | norm_names
    assert not any(n.endswith(".bias") and n not in norm_names for n in norms.masked_names)
    ln = next(m for m in base.modules() if isinstance(m, torch.nn.LayerNorm))
    name = next(n for n in norm_names if base.get_submodule(n.rsplit(".", 1)[0]) is ln
                and n.endswith("weight"))
    masks = {n: torch.ones_like(m) for n, m in norms.final_masks().items()}
    masks[name][3] = 0
    seen = []
    handle = ln.register_forward_hook(lambda module, args, out: seen.append(out))
    with norms.use_masks(masks):
        norms.eval()(torch.randint(0, 10, (2, 6)))
    handle.remove()
    out = seen[0].detach()
    assert torch.all(out[..., 3] == ln.bias[3])  # the gain's mask removed the channel: bias only
    assert out[..., 2].std() > 0

"""Masks trained together with the weights, tasks in sequence (thesis Sec. 3.2.3, App.
B.3.6): frozen weights, the frozen set, chained base runs, bad input and the experiment."""

import json
import shutil

import pytest
import torch

from sglab.analysis import mask_measures as mm
from sglab.analysis import weight_masks as wm
from sglab.cli import main
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.experiments.base import run_experiment
from sglab.experiments.claims import Verdict, judge_all
from sglab.models import build_model
from sglab.models.masked import load_base_run
from sglab.registry import experiment
from sglab.tasks import build_task
from sglab.train.loop import train

FIRST = "layers.0.*"
CLAIMS = ["sharing-low-while-capacity-free", "output-layer-fills-first",
          "own-mask-keeps-accuracy", "biased-init-raises-sharing"]
LAYERS = ["layers.0.weight", "layers.1.weight", "layers.2.weight", "layers.3.weight"]


def settings(steps, lr):
    return {"steps": steps, "batch_size": 32, "lr": lr, "lr_schedule": "constant",
            "warmup_steps": 0, "weight_decay": 0.0, "eval_interval": steps,
            "log_interval": steps, "checkpoint_interval": steps, "threads": 1}


def task_config(permutation):
    return {"name": "digits", "permutation": permutation}


def transfer_config(base_run, permutation, frozen_from=(), steps=30, seed=0, **model):
    """Logits start near 0 at a high lr, so that 30 steps leave a mask with gaps."""
    return build_run_config({"task": task_config(permutation),
                             "model": {"name": "masked", "base_run": base_run,
                                       "train_base": True, "frozen_from": list(frozen_from),
                                       "mask_biases": True, "beta": 1e-2, "logit_init": 0.3,
                                       **model},
                             "train": settings(steps, 5e-2)}, {"seed": seed})


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """An FNN on digits, then tasks 1 and 2 (permutations 1, 2) with trained weights, the
    second freezing the first's mask; a sibling first task on the same net."""
    runs = tmp_path_factory.mktemp("runs")
    base = train(build_run_config({"task": task_config(1),
                                   "model": {"name": "fnn", "hidden": [12, 10], "outputs": 1,
                                             "classes": 10, "input_encoding": "value"},
                                   "train": settings(40, 1e-2)}), runs, printer=None)["run_id"]
    first = train(transfer_config(base, 1, unfrozen=[FIRST]), runs, printer=None)["run_id"]
    second = train(transfer_config(first, 2, [first], seed=1, unfrozen=[FIRST]), runs,
                   printer=None)["run_id"]
    sibling = train(transfer_config(base, 1, seed=2), runs, printer=None)["run_id"]
    return runs, base, first, second, sibling


def state(runs, run_id):
    return torch.load(runs / run_id / "checkpoints" / "last.pt", weights_only=True)["model"]


def final_masks(runs, run_id):
    return {k[len("logits."):]: v > 0 for k, v in state(runs, run_id).items()
            if k.startswith("logits.")}


def trained_weights(runs, run_id):
    return {k[len("weights."):]: v for k, v in state(runs, run_id).items()
            if k.startswith("weights.")}


def test_frozen_weights_stay_bit_identical_while_free_ones_train(chain):
    runs, base, first, second, _ = chain
    before, after = trained_weights(runs, first), trained_weights(runs, second)
    used = final_masks(runs, first)
    assert set(before) == set(after) == set(used)  # weights and biases of all four layers
    frozen_count = free_count = 0
    for key, mask in used.items():
        if key.startswith("layers__0__"):  # reset for each task, never frozen
            assert not torch.equal(before[key], after[key])
            continue
        frozen_count, free_count = frozen_count + int(mask.sum()), free_count + int((~mask).sum())
        assert torch.equal(after[key][mask], before[key][mask])
        if bool((~mask).any()):
            assert not torch.equal(after[key][~mask], before[key][~mask])
    assert frozen_count > 0 and free_count > 0
    # the next task starts from these weights: load_base_run reads them from the checkpoint
    net = dict(load_base_run(runs, second).named_parameters())
    assert all(torch.equal(net[k.replace("__", ".")], w) for k, w in after.items())


def test_training_moves_only_free_weights_and_the_frozen_set_is_honoured(chain):
    runs, base, first, second, _ = chain
    config = transfer_config(second, 3, [first, second], unfrozen=[FIRST],
                             frozen_logit_init=2.0, logit_init=-1.0)
    torch.manual_seed(0)
    model = build_model(config.model, 17, 64, runs_dir=runs).train()
    union = {k: final_masks(runs, first)[k] | final_masks(runs, second)[k]
             for k in final_masks(runs, first)}
    for name in model.masked_names:
        expected = torch.zeros_like(union[model.key(name)]) if name.startswith("layers.0.") \
            else union[model.key(name)]
        assert torch.equal(model.frozen_masks[name], expected)
        logits = model.mask_logits()[name].detach()
        assert bool((logits[expected] == 2.0).all()) and bool((logits[~expected] == -1.0).all())
    start = {n: w.detach().clone() for n, w in model.base_weights().items()}
    task = build_task(config.task)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.5)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):  # weight decay would move every stored entry; the frozen ones hold
        batch = task.train_batch(32, generator)
        loss = torch.nn.functional.cross_entropy(model(batch.input_ids)[:, 0],
                                                 batch.targets[:, 0]) + model.aux_loss
        optimizer.zero_grad()
        loss.backward()
        for name in model.masked_names:
            grad = model.weights[model.key(name)].grad
            assert bool((grad[model.frozen_masks[name]] == 0).all())
        optimizer.step()
    now = model.base_weights()
    for name, frozen in model.frozen_masks.items():
        assert torch.equal(now[name][frozen], start[name][frozen])
        assert bool((now[name][~frozen] != start[name][~frozen]).any())
    saved = model.state_dict()  # checkpoints hold the weights computed with
    assert all(torch.equal(saved[f"weights.{model.key(n)}"], now[n]) for n in now)


def test_free_weights_start_fresh_or_from_the_base(chain):
    runs, base, first, _, _ = chain
    fresh, kept = (build_model(transfer_config(first, 2, [first], reset_free=reset,
                                               unfrozen=[FIRST]).model, 17, 64, runs_dir=runs)
                   for reset in (True, False))
    net = dict(load_base_run(runs, first).named_parameters())
    for name, frozen in fresh.frozen_masks.items():
        assert torch.equal(kept.base_weights()[name], net[name])
        if name.startswith("layers.0."):
            assert not bool(frozen.any())
            continue
        assert torch.equal(fresh.base_weights()[name][frozen], net[name][frozen])
        assert not torch.equal(fresh.base_weights()[name][~frozen], net[name][~frozen])


def test_first_layer_frozen_as_in_the_authors_code(chain, tmp_path, capsys):
    """``first_layer: frozen`` leaves no layer unfrozen, so the first layer's used weights are
    frozen like the others'; ``reset`` keeps it free for every task; any other value is an
    error before the base nets train."""
    runs, base, _, _, sibling = chain  # sibling: a first task with nothing unfrozen
    transfer = experiment("masks-transfer")
    assert transfer.unfrozen({"first_layer": "reset"}) == [FIRST]
    assert transfer.unfrozen({"first_layer": "frozen"}) == []
    assert main(["run", "masks-transfer", "--preset", "quick", "--param", "first_layer=both",
                 "--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "first_layer = 'both': Input should be 'reset' or 'frozen'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()
    model = build_model(transfer_config(sibling, 2, [sibling]).model, 17, 64, runs_dir=runs)
    used = final_masks(runs, sibling)
    net = dict(load_base_run(runs, sibling).named_parameters())
    for name in ("layers.0.weight", "layers.0.bias"):
        frozen = model.frozen_masks[name]
        assert torch.equal(frozen, used[model.key(name)])
        assert torch.equal(model.base_weights()[name][frozen], net[name][frozen])
    assert bool(model.frozen_masks["layers.0.weight"].any())


def test_fnn_xavier_init_and_standardized_pixel_values():
    """The thesis code's FNN: Xavier-normal weights (ReLU gain, gain 1 on the output layer),
    zero biases, and images standardized by a mean and a std before the first layer."""
    def fnn(**fields):
        config = build_run_config({"task": task_config(1),
                                   "model": {"name": "fnn", "hidden": [600, 500], "outputs": 1,
                                             "classes": 10, "input_encoding": "value",
                                             **fields}})
        return build_model(config.model, 17, 64)

    torch.manual_seed(0)
    model = fnn(init="xavier", input_mean=0.3, input_std=0.4)
    for i, layer in enumerate(model.layers):
        fan_out, fan_in = layer.weight.shape
        gain = 1.0 if i == len(model.layers) - 1 else 2 ** 0.5
        expected = gain * (2 / (fan_in + fan_out)) ** 0.5
        assert abs(float(layer.weight.detach().std()) / expected - 1) < 0.06, i
        assert bool((layer.bias == 0).all())
    default = fnn()
    first = default.layers[0]  # PyTorch's init: uniform within 1/sqrt(fan_in), biases too
    assert float(first.weight.detach().abs().max()) <= 64 ** -0.5 and bool(first.bias.any())
    ids = torch.randint(0, 17, (5, 64))
    model.load_state_dict(default.state_dict())
    x = (ids.float() / 16 - 0.3) / 0.4
    for i, layer in enumerate(model.layers):
        x = layer(x) if i == len(model.layers) - 1 else torch.relu(layer(x))
    assert torch.allclose(model(ids).squeeze(1), x, atol=1e-6)
    assert not torch.allclose(default(ids), model(ids))
    with pytest.raises(SglabError, match="input_encoding=value"):
        build_run_config({"task": task_config(1), "model": {"name": "fnn", "input_mean": 0.3}})


def test_paper_preset_uses_the_thesis_codes_init_and_standardized_inputs():
    transfer = experiment("masks-transfer")
    paper = transfer.arms(transfer.presets["paper"])[0].base["model"]
    default = transfer.arms(transfer.presets["default"])[0].base["model"]
    assert (paper["init"], paper["input_mean"], paper["input_std"]) == ("xavier", 0.1307,
                                                                         0.3081)  # MNIST's
    assert default["init"] == "torch" and "input_mean" not in default
    digits = transfer.arms({**transfer.presets["default"], "standardize": True})[0].base["model"]
    assert (digits["input_mean"], digits["input_std"]) == (0.305, 0.376)  # the 8x8 digits'
    resized = {**transfer.presets["default"], "side": 28}
    assert transfer.arms(resized)[0].base["task"] == {"name": "digits", "permutation": 1,
                                                      "side": 28}
    assert "side" not in transfer.arms(transfer.presets["default"])[0].base["task"]


def test_transfer_sharing_counts_reuse_of_earlier_masks():
    earlier = [torch.tensor([1, 1, 0, 0, 0, 0]), torch.tensor([0, 1, 1, 0, 0, 0])]
    current = torch.tensor([0, 0, 1, 1, 1, 1])
    assert wm.transfer_sharing(current, earlier) == pytest.approx(1 / 4)
    assert wm.transfer_sharing(current, []) == 0.0
    assert wm.used_fraction([*earlier, current]) == pytest.approx(1.0)
    assert wm.used_fraction(earlier) == pytest.approx(0.5)


def test_chain_sharing_per_task_and_layer():
    first = {"a": torch.tensor([1, 1, 0, 0]), "b": torch.tensor([1, 0])}
    second = {"a": torch.tensor([0, 1, 1, 0]), "b": torch.tensor([0, 1])}
    out = mm.chain_sharing([first, second])
    assert out["layers"] == ["a", "b"]
    assert out["sharing"] == [{"a": 0.0, "b": 0.0}, {"a": 0.5, "b": 0.0}]
    assert out["chance"] == [{"a": 0.0, "b": 0.0}, {"a": 0.5, "b": 0.5}]
    assert out["used"] == [{"a": 0.5, "b": 0.5}, {"a": 0.75, "b": 1.0}]
    assert out["density"] == [{"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}]


def test_bad_transfer_input_is_a_sglab_error(chain, tmp_path):
    runs, base, first, second, sibling = chain
    with pytest.raises(SglabError, match="frozen_from=.* has no effect without train_base=true"):
        build_run_config({"task": task_config(1), "model": {"name": "masked", "base_run": base,
                                                            "frozen_from": [first]}})
    with pytest.raises(SglabError, match="fixed does not combine with model.train_base"):
        transfer_config(base, 1, fixed=["layers.3.*"], fixed_from=first)

    def build(config, where=runs):
        return build_model(config.model, 17, 64, runs_dir=where)

    with pytest.raises(SglabError, match="frozen_from=nope: no such run"):
        build(transfer_config(first, 2, ["nope"], unfrozen=[FIRST]))
    with pytest.raises(SglabError, match="not a mask run with model.train_base"):
        build(transfer_config(first, 2, [base], unfrozen=[FIRST]))
    with pytest.raises(SglabError, match="neither model.base_run"):  # another chain's mask
        build(transfer_config(first, 2, [sibling], unfrozen=[FIRST]))
    with pytest.raises(SglabError, match="must keep base_run"):  # its first layer was reset
        build(transfer_config(second, 3, [first, second]))
    with pytest.raises(SglabError, match="unfrozen: no masked parameter matches"):
        build(transfer_config(base, 1, unfrozen=["nothing.*"]))
    shutil.copytree(runs, tmp_path / "runs")  # an unfinished earlier task
    summary_path = tmp_path / "runs" / first / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary_path.write_text(json.dumps({**summary, "status": "running"}))
    with pytest.raises(SglabError, match="is 'running', not finished"):
        build(transfer_config(second, 3, [first, second], unfrozen=[FIRST]), tmp_path / "runs")
    plain = train(build_run_config({"task": task_config(1),
                                    "model": {"name": "masked", "base_run": base},
                                    "train": settings(2, 1e-2)}), runs, printer=None)["run_id"]
    with pytest.raises(SglabError, match="a mask on a frozen net"):
        build(transfer_config(plain, 2))


def test_quick_preset_end_to_end(tmp_path):
    exp = experiment("masks-transfer")
    results = run_experiment(exp, "quick", tmp_path / "out", tmp_path / "runs", workers=1,
                             threads=1, printer=lambda *a: None)
    params = exp.preset("quick")
    roles = [label["role"] for label in results["labels"]]
    tasks, seeds = params["tasks"], len(params["seeds"])
    assert roles.count("base") == seeds  # one unmasked net a chain, on the first task
    assert roles.count("mask") == tasks * seeds * len(params["variants"])
    masks = [label for label in results["labels"] if label["role"] == "mask"]
    assert [label["task"] for label in masks] == [str(t) for t in range(1, tasks + 1)]
    claims = {c["id"]: c for c in results["claims"]}
    assert list(claims) == CLAIMS
    assert {c["source"].split(", ")[0] for c in claims.values()} == {"001_76659a6d281e669d.txt"}
    # the quick preset trains one mask initialization: nothing to compare the biased one with
    assert claims["biased-init-raises-sharing"]["verdict"] == "NOT MEASURED"
    section = results["sections"][0]
    assert len(section["figures"]) == 2 and section["tables"]
    assert (tmp_path / "out" / "report.html").is_file()


def measured_chain(sharing: float, used: list[float], accuracy: float = 0.97, tasks: int = 3) -> dict:
    """Measures of one chain: every task after the first shares ``sharing`` of its mask in
    every layer, earlier tasks use 0.3 of each layer before it; after the last task the
    layers (input, hidden 1, hidden 2, output) are ``used``; each task keeps ``accuracy``
    under its own mask, the unmasked net 0.97."""
    return {"sharing": [{n: 0.0 if t == 0 else sharing for n in LAYERS} for t in range(tasks)],
            "chance": [{n: 0.0 if t == 0 else 0.3 for n in LAYERS} for t in range(tasks)],
            "used": [dict(zip(LAYERS, used)) for _ in range(tasks)],
            "accuracy": [accuracy] * tasks, "reference": 0.97}


@pytest.mark.parametrize(("chains", "expected"), [
    # Fig. 3.4: little sharing while capacity is free, the output layer full first
    ({"uniform 2": [measured_chain(0.1, [1.0, 0.4, 0.5, 0.9])] * 2},
     ["REPRODUCES", "REPRODUCES", "REPRODUCES", "NOT MEASURED"]),
    # full transfer, hidden layers fuller than the output layer, masks that lose accuracy
    ({"uniform 2": [measured_chain(0.9, [1.0, 0.9, 0.95, 0.5], accuracy=0.6)] * 2},
     ["FAILS", "FAILS", "FAILS", "NOT MEASURED"]),
    # Fig. B.7: the biased initialization shares more
    ({"uniform 2": [measured_chain(0.1, [1.0, 0.4, 0.5, 0.9])] * 2,
      "frozen 2, new -1": [measured_chain(0.6, [1.0, 0.3, 0.4, 0.9])] * 2},
     ["REPRODUCES", "REPRODUCES", "REPRODUCES", "REPRODUCES"]),
    ({"uniform 2": [measured_chain(0.1, [1.0, 0.4, 0.5, 0.9])] * 2,
      "frozen 2, new -1": [measured_chain(0.05, [1.0, 0.5, 0.6, 0.95])] * 2},
     ["REPRODUCES", "REPRODUCES", "REPRODUCES", "FAILS"]),
])
def test_transfer_claims_on_constructed_measures(chains, expected):
    exp = experiment("masks-transfer")
    params = {**exp.preset("quick"), "seeds": [0, 1], "variants": list(chains)}
    claims = judge_all(exp.spec.claims, exp.measured(params, chains, LAYERS))
    assert [c.id for c in claims] == CLAIMS
    assert [c.verdict for c in claims] == [Verdict(v) for v in expected]
    sharing = claims[0].values["sharing per (seed, task, hidden layer)"]
    assert len(sharing) == 2 * 2 * 2  # seeds x tasks after the first x hidden layers


def test_transfer_claims_wait_for_a_net_that_solves_the_task():
    exp = experiment("masks-transfer")
    params = {**exp.preset("quick"), "seeds": [0]}
    weak = {**measured_chain(0.1, [1.0, 0.4, 0.5, 0.9]), "reference": 0.5}
    claims = judge_all(exp.spec.claims, exp.measured(params, {"uniform 2": [weak]}, LAYERS))
    assert {c.verdict for c in claims} == {Verdict.NOT_MEASURED}
    assert "0.500 accuracy on iid_test" in claims[0].evidence

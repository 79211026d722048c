"""Differentiable weight masks (thesis Ch. 3): the masked model, mask analyses, the
modular tasks and the FNN."""

import shutil

import pytest
import torch
from torch.func import functional_call

from sglab.analysis import weight_masks as wm
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.models.masked import gumbel_sigmoid
from sglab.tasks import build_task
from sglab.train.ensemble import ensemble_key
from sglab.train.evaluate import evaluate
from sglab.train.loop import Trainer, train


def settings(steps, lr=1e-3, every=None, batch=32):
    every = every or steps
    return {"steps": steps, "batch_size": batch, "lr": lr, "lr_schedule": "constant",
            "warmup_steps": 0, "weight_decay": 0.0, "eval_interval": every,
            "log_interval": every, "checkpoint_interval": every}


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    config = build_run_config({"task": {"name": "add_mul", "valid_size": 200},
                               "model": {"name": "fnn", "hidden": [16, 16]},
                               "train": settings(30)})
    summary = train(config, runs, printer=None)
    return runs, summary["run_id"]


def masked_config(run_id, steps=4, every=None, **model):
    return build_run_config({"task": {"name": "add_mul", "subset": "add", "valid_size": 200},
                             "model": {"name": "masked", "base_run": run_id, **model},
                             "train": settings(steps, 1e-2, every, batch=32)})


def masked_model(base_run, **model):
    runs, run_id = base_run
    config = masked_config(run_id, **model)
    return build_model(config.model, 13, 5, runs_dir=runs)


@pytest.mark.parametrize("logit", [-2.0, 0.0, 2.0])
@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
def test_gumbel_sigmoid_is_bernoulli_of_sigmoid(logit, tau):
    torch.manual_seed(0)
    samples = gumbel_sigmoid(torch.full((1000,), logit), 20, tau)  # 20,000 draws
    assert set(samples.unique().tolist()) <= {0.0, 1.0}
    expected = torch.sigmoid(torch.tensor(logit))
    assert abs(samples.mean() - expected) < 4 * (expected * (1 - expected) / 20000) ** 0.5


def test_gumbel_sigmoid_soft_sample_follows_eq_3_1():
    """The straight-through gradient is ds/dl = s (1 - s) / tau of the soft sample s, whose
    distribution must be that of Eq. 3.1's two-uniform formula."""
    from scipy.stats import ks_2samp

    torch.manual_seed(1)
    logits = torch.full((20000,), 0.7, requires_grad=True)
    gumbel_sigmoid(logits, 1, 0.5).sum().backward()  # one sample: grad = s (1 - s) / tau
    u1, u2 = torch.rand(2, 20000)
    soft = torch.sigmoid((0.7 - torch.log(torch.log(u1) / torch.log(u2))) / 0.5)
    expected = (soft * (1 - soft) / 0.5).numpy()
    assert ks_2samp(logits.grad.numpy(), expected).pvalue > 0.01
    wrong = torch.sigmoid((0.7 - torch.log(torch.log(u1) / torch.log(u2))) / 1.0)  # tau 1
    assert ks_2samp(logits.grad.numpy(), (wrong * (1 - wrong) / 0.5).numpy()).pvalue < 1e-6


def test_straight_through_gradient_reaches_logits():
    logits = torch.zeros(5, requires_grad=True)
    gumbel_sigmoid(logits, 3).sum().backward()
    assert logits.grad is not None and bool((logits.grad > 0).all())


def test_all_ones_mask_is_the_frozen_net_and_masks_zero_weights(base_run):
    model = masked_model(base_run).eval()
    base = model.base
    ids = build_task(masked_config(base_run[1]).task).split("iid_test")["tokens"][:50]
    ones = {n: torch.ones_like(m) for n, m in model.final_masks().items()}
    with model.use_masks(ones):
        assert torch.equal(model(ids), base(ids))
    torch.manual_seed(1)
    random = {n: (torch.rand_like(m) < 0.5).float() for n, m in ones.items()}
    weights = dict(base.named_parameters())
    zeroed = {n: weights[n] * random[n] for n in random}
    with model.use_masks(random):
        assert torch.allclose(model(ids), functional_call(base, zeroed, (ids,)))
    inverted = wm.invert(random)
    kept_zeroed = {n: weights[n] * (1 - random[n]) for n in random}
    with model.use_masks(inverted):
        assert torch.allclose(model(ids), functional_call(base, kept_zeroed, (ids,)))
    assert all(torch.equal(inverted[n] + random[n], ones[n]) for n in ones)


def test_vmapped_samples_equal_a_loop_over_slices(base_run):
    model = masked_model(base_run)
    ids = torch.randint(1, 13, (8, 5))
    torch.manual_seed(2)
    masks = {n: (torch.rand(4, *m.shape) < 0.7).float() for n, m in model.final_masks().items()}
    together = model.forward_masked(ids, masks)
    for k in range(4):
        alone = model.forward_masked(ids[2 * k:2 * k + 2], {n: m[k] for n, m in masks.items()})
        assert torch.allclose(together[2 * k:2 * k + 2], alone, atol=1e-6)


class Crash(Exception):
    pass


def test_mask_training_moves_logits_only_and_resumes(base_run):
    runs, run_id = base_run
    before = {n: p.clone() for n, p in masked_model(base_run).base.named_parameters()}
    config = masked_config(run_id, steps=8, every=4, beta=1.0)
    assert ensemble_key(config) is None  # random masks: never trained as an ensemble

    def crash_at_step_8(line):
        if "eval @ 8" in line:
            raise Crash

    with pytest.raises(Crash):  # killed after its step-4 checkpoint
        Trainer(config, runs, printer=crash_at_step_8).run()
    run_dir = runs / config.run_id()
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["step"] == 4
    Trainer(config, runs, printer=None).run(resume=True)
    resumed = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    shutil.rmtree(run_dir)
    Trainer(config, runs, printer=None).run()
    clean = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert set(clean) == set(resumed) and all(k.startswith("logits.") for k in clean)
    assert all(torch.equal(clean[k], resumed[k]) for k in clean)
    assert any(not torch.equal(v, torch.full_like(v, 2.0)) for v in clean.values())
    after = dict(masked_model(base_run).base.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_bad_input_is_a_sglab_error(base_run, tmp_path):
    runs, run_id = base_run
    with pytest.raises(SglabError, match="no such run"):
        build_model(masked_config("nope").model, 13, 5, runs_dir=runs)
    with pytest.raises(SglabError, match="needs the run store"):
        build_model(masked_config(run_id).model, 13, 5)
    with pytest.raises(SglabError, match="exclude"):
        masked_model(base_run, exclude=["blocks.*"])
    with pytest.raises(SglabError, match="mask_samples=3 must divide"):
        masked_config(run_id, mask_samples=3)
    with pytest.raises(SglabError, match="beta"):
        masked_config(run_id, beta=-1.0)
    unfinished = tmp_path / "unfinished"
    (unfinished / "x").mkdir(parents=True)
    (unfinished / "x" / "summary.json").write_text('{"status": "running"}')
    with pytest.raises(SglabError, match="not finished"):
        build_model(masked_config("x").model, 13, 5, runs_dir=unfinished)


def test_recurrent_base_loops_over_mask_samples():
    from sglab.models.masked import MaskedConfig, MaskedModel

    base = build_model(build_run_config({"task": {"name": "add_mul"},
                                         "model": {"name": "lstm", "d_model": 8,
                                                   "dropout": 0.0}}).model, 13, 5)
    model = MaskedModel(MaskedConfig(base_run="unused"), base)
    assert model.loop and "embedding.weight" not in model.masked_names
    ids = torch.randint(1, 13, (4, 5))
    torch.manual_seed(3)
    masks = {n: (torch.rand(2, *m.shape) < 0.6).float() for n, m in model.final_masks().items()}
    together = model.forward_masked(ids, masks)
    for k in range(2):
        alone = model.forward_masked(ids[2 * k:2 * k + 2], {n: m[k] for n, m in masks.items()})
        assert torch.allclose(together[2 * k:2 * k + 2], alone, atol=1e-6)
    weights = dict(base.named_parameters())
    zeroed = {n: weights[n] * masks[n][0] for n in masks}
    assert torch.allclose(together[:2], functional_call(base, zeroed, (ids[:2],)), atol=1e-6)
    assert not torch.allclose(together[:2], base(ids[:2]), atol=1e-3)


@pytest.mark.parametrize("layers,dropout", [(1, 0.0), (2, 0.3)])
def test_recurrent_base_mode_for_cudnn(layers, dropout):
    """cuDNN's RNN backward needs training mode: a base RNN without dropout between its
    layers follows the mask's mode (same outputs as in eval mode); one with dropout stays
    in eval mode and trains outside cuDNN."""
    from sglab.models.masked import MaskedConfig, MaskedModel

    base = build_model(build_run_config({"task": {"name": "add_mul"},
                                         "model": {"name": "lstm", "d_model": 8,
                                                   "n_layers": layers,
                                                   "dropout": dropout}}).model, 13, 5)
    model = MaskedModel(MaskedConfig(base_run="unused"), base)
    rnn = next(m for m in base.modules() if isinstance(m, torch.nn.RNNBase))
    ids = torch.randint(1, 13, (4, 5))
    masks = {n: m[None] for n, m in model.final_masks().items()}
    evaluated = model.eval().forward_masked(ids, masks)
    assert not rnn.training
    model.train()
    assert rnn.training == (dropout == 0) and not base.drop.training
    assert torch.equal(model.forward_masked(ids, masks), evaluated)
    with model._rnn_backend():
        assert torch.backends.cudnn.enabled == (dropout == 0)
    assert torch.backends.cudnn.enabled


def test_lstm_repeat_schedules():
    config = build_run_config({"task": {"name": "double_add"},
                               "model": {"name": "lstm", "d_model": 8, "dropout": 0.0,
                                         "outputs": 4, "input_mode": "repeat",
                                         "repeat_steps": 6, "schedule": "forced"}})
    model = build_model(config.model, 11, 8)
    ids = torch.randint(1, 11, (5, 8))
    changed = ids.clone()
    changed[:, 4:] = torch.randint(1, 11, (5, 4))
    out, other = model(ids), model(changed)
    assert out.shape == (5, 4, 11)
    # forced: pair 1 is read at step 3, before pair 2 is seen; pair 2's answer reads it
    assert torch.equal(out[:, :2], other[:, :2]) and not torch.allclose(out[:, 2:], other[:, 2:])
    together = build_model(config.model.model_copy(update={"schedule": "together"}), 11, 8)
    assert not torch.allclose(together(ids)[:, :2], together(changed)[:, :2])
    assert ensemble_key(config) is None  # aten::lstm has no vmap rule
    with pytest.raises(SglabError, match="repeat_steps=4 has no effect without input_mode"):
        build_run_config({"task": {"name": "double_add"},
                          "model": {"name": "lstm", "repeat_steps": 4}})


def test_mask_comparisons_on_hand_built_masks():
    a = torch.tensor([1.0, 1, 0, 0])
    subset = torch.tensor([1.0, 0, 0, 0])
    disjoint = torch.tensor([0.0, 0, 1, 1])
    assert wm.iou(a, subset) == 0.5 and wm.iomin(a, subset) == 1.0
    assert wm.iou(a, disjoint) == 0.0 and wm.iomin(a, disjoint) == 0.0
    assert wm.shared_proportion([a, subset], 0) == 0.5
    assert wm.shared_proportion([a, subset], 1) == 1.0
    assert wm.shared_proportion([a, subset, disjoint], 2) == 0.0
    sharing = wm.sharing_per_layer({"x": {"l": a}, "y": {"l": subset}})
    assert sharing == {"x": {"l": 0.5}, "y": {"l": 1.0}}
    assert wm.count({"l": a, "m": subset}) == 3
    assert wm.final_mask({"l": torch.tensor([-1.0, 0.5])})["l"].tolist() == [0.0, 1.0]
    halves = wm.half_masks({"a": a, "b": a, "c": a}, first=True)
    assert halves["b"].tolist() == a.tolist() and halves["c"].tolist() == [1.0] * 4
    full = {"in": a, "hidden": a}
    hidden_only = wm.invert(full, only=["hidden"], keep=full)
    assert hidden_only["in"].tolist() == a.tolist() and hidden_only["hidden"].tolist() == [0, 0, 1, 1]


def test_op_confusion_counts_coincidences_for_both():
    a, b, op = torch.tensor([2, 3, 3]), torch.tensor([2, 4, 4]), torch.tensor([0, 1, 1])
    predicted = torch.tensor([4, 7, 99])  # 2+2 = 2*2; 3*4 done as 3+4; 99 is neither
    table = wm.op_confusion(a, b, op, predicted)
    assert table[0].tolist() == [1.0, 1.0, 0.0]
    assert table[1].tolist() == [0.5, 0.0, 0.5]


def test_modular_tasks_answers_and_all_digit_exact_match():
    task = build_task(build_run_config({"task": {"name": "add_mul", "valid_size": 300},
                                        "model": {"name": "fnn"}}).task)
    data = task.split("iid_test")
    digits = data["answers"] - task.digit_ids[0]
    value = digits[:, 0] * 10 + digits[:, 1]
    expected = torch.where(data["op"] == 0, (data["a"] + data["b"]) % 100,
                           (data["a"] * data["b"]) % 100)
    assert torch.equal(value, expected) and len(task.splits["train"]["tokens"]) == 20000

    class Oracle(torch.nn.Module):  # both digits right on add; the second wrong on mul
        def forward(self, ids, key_padding_mask=None):
            index = {tuple(t.tolist()): i for i, t in enumerate(data["tokens"])}
            rows = torch.tensor([index[tuple(t.tolist())] for t in ids])
            answers = data["answers"][rows].clone()
            answers[data["op"][rows] == 1, 1] = 0  # padding: a wrong digit
            return torch.nn.functional.one_hot(answers, 13).float()

    metrics = evaluate(Oracle(), task, "iid_test", 128)
    assert metrics["iid_test/exact_match/op=add"] == 1.0
    assert metrics["iid_test/exact_match/op=mul"] == 0.0
    mul_only = build_task(build_run_config({"task": {"name": "add_mul", "subset": "mul"},
                                            "model": {"name": "fnn"}}).task)
    assert bool((mul_only.splits["train"]["op"] == 1).all())


def test_double_add_pair_subset_zeroes_the_other_pair():
    config = build_run_config({"task": {"name": "double_add", "subset": "pair1",
                                        "train_size": 100, "valid_size": 50},
                               "model": {"name": "fnn", "outputs": 4, "passes": "per_pair"}})
    task = build_task(config.task)
    batch = task.train_batch(16, torch.Generator().manual_seed(0))
    assert bool((batch.input_ids[:, 4:] == 0).all()) and bool((batch.targets[:, 2:] == -100).all())
    model = build_model(config.model, len(task.vocab), task.max_length)
    ids = task.split("iid_test")["tokens"][:8]
    changed = ids.clone()
    changed[:, 4:] = torch.randint(1, 11, (8, 4))
    # per-pair passes: pair 1's answer does not depend on pair 2's input
    assert torch.equal(model(ids)[:, :2], model(changed)[:, :2])
    with pytest.raises(SglabError, match="outputs=4"):
        task.check_model(build_run_config({"task": {"name": "double_add"},
                                           "model": {"name": "fnn"}}).model)

"""Adaptive computation time over shared-layer steps (thesis appendix D.1)."""

import re

import pytest
import torch

from sglab.analysis.hooks import capture
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.models.act import halting_weights, mix_states
from sglab.tasks import build_task
from sglab.tasks.base import target_loss
from sglab.train import Trainer
from sglab.train.evaluate import model_batch
from tests.conftest import tiny_config, tiny_model
from tests.test_ensemble import assert_same_as_alone, member_configs

THRESHOLD = 0.99
ACT = ["model.shared_layers=true", "model.attention_mask=bidirectional", "model.norm=post",
       "model.pos_encoding=none"]


def direct_graves(p_hat: list[float], states: list[torch.Tensor]):
    """Eqs. D.2-D.5 for one column, step by step: (output, R, T)."""
    total = 0.0
    for t, p in enumerate(p_hat):
        if t == len(p_hat) - 1 or total + p >= THRESHOLD:
            remainder = 1.0 - total
            output = sum(p_hat[k] * states[k] for k in range(t)) + remainder * states[t]
            return output, remainder, t + 1
        total += p


def direct_ut(p_hat: torch.Tensor, states: torch.Tensor):
    """Listings 1-2 of Dehghani et al. (2019) over all columns: (output, R, T).

    The listing's ``still_running = halting_probability < 1`` is kept as an explicit
    flag (the halting probability reaches exactly 1 only up to rounding)."""
    halting, remainders = torch.zeros_like(p_hat[0]), torch.zeros_like(p_hat[0])
    n_updates, done = torch.zeros_like(p_hat[0]), torch.zeros_like(p_hat[0])
    previous = torch.zeros_like(states[0])
    for p, state in zip(p_hat, states):
        if not ((halting < THRESHOLD) & (n_updates < len(p_hat))).any():
            break
        running = 1 - done
        new_halted = (halting + p * running > THRESHOLD).double() * running
        running = (halting + p * running <= THRESHOLD).double() * running
        halting = halting + p * running
        remainders = remainders + new_halted * (1 - halting)
        halting = halting + new_halted * remainders
        done = done + new_halted
        n_updates = n_updates + running + new_halted
        weight = (p * running + new_halted * remainders)[..., None]
        previous = state * weight + previous * (1 - weight)
    return previous, remainders, n_updates


def act_model(variant: str, *overrides: str, seed: int = 0):
    task, model = tiny_model(*ACT, f"model.act={variant}", *overrides, seed=seed)
    return task, model


def inputs(vocab_size: int, lengths: list[int], width: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_size, (len(lengths), width), generator=generator)
    mask = torch.arange(width)[None] < torch.tensor(lengths)[:, None]
    return ids.masked_fill(~mask, 0), mask


def run_act(model, ids, mask):
    """Per-step states, halting unit outputs and the model's ACT output of one eval pass."""
    model.eval()
    names = [f"blocks.{t}.resid_post" for t in range(model.steps)]
    store = capture(model, [*names, "final", "halting.weights", "halting.steps"], ids, mask)
    states = torch.stack([store[n] for n in names])
    with torch.no_grad():
        p_hat = torch.sigmoid(model.halting.unit(states)).squeeze(-1)
    return states, p_hat, store


@pytest.mark.parametrize("variant", ["graves", "ut"])
def test_halting_weights_match_a_direct_loop_and_graves_weights_sum_to_one(variant):
    torch.manual_seed(0)
    p_hat = torch.sigmoid(torch.randn(6, 4, 9, dtype=torch.float64) * 2 - 1)
    states = torch.randn(6, 4, 9, 3, dtype=torch.float64)
    weights, remainder, steps = halting_weights(p_hat, THRESHOLD, variant)
    if variant == "graves":
        # p + R per column: the weights sum to one, nothing after T, R sits at T
        assert torch.allclose(weights.sum(0), torch.ones(4, 9, dtype=torch.float64))
        after = torch.arange(6)[:, None, None] >= steps
        assert torch.all(weights[after] == 0)
        at = weights.gather(0, (steps - 1)[None])[0]
        assert torch.allclose(at, remainder)
        for b in range(4):
            for i in range(9):
                out, r, t = direct_graves(p_hat[:, b, i].tolist(), list(states[:, b, i]))
                assert int(steps[b, i]) == t and float(remainder[b, i]) == pytest.approx(r)
                assert torch.allclose((weights[:, b, i, None] * states[:, b, i]).sum(0), out)
    else:
        out, r, t = direct_ut(p_hat, states)
        assert torch.allclose(mix_states(states, weights, "ut"), out)
        assert torch.allclose(remainder, r) and torch.equal(steps.double(), t)
        halted = (p_hat.cumsum(0) > THRESHOLD).any(0)
        assert torch.allclose(weights.sum(0)[halted], torch.ones(()).double())
        assert torch.all(remainder[~halted] == 0)  # T_max reached: no remainder
    assert 1 < len(steps.unique()) and (steps == 6).any()  # the draw exercises both cases


@pytest.mark.parametrize("variant", ["graves", "ut"])
def test_large_halting_bias_halts_every_column_at_step_one(variant):
    task, model = act_model(variant, "model.n_layers=4")
    with torch.no_grad():
        model.halting.unit.bias.fill_(50.0)
    ids, mask = inputs(len(task.vocab), [7, 4, 1], 7)
    states, _, store = run_act(model, ids, mask)
    assert torch.all(store["halting.steps"] == 1)
    assert torch.allclose(store["final"], states[0], atol=1e-6)
    assert not torch.allclose(states[0], states[-1], atol=1e-3)  # later steps do differ
    assert float(model.aux_loss) == pytest.approx(0.03)  # R = 1 everywhere


@pytest.mark.parametrize("variant", ["graves", "ut"])
def test_small_halting_bias_runs_every_column_to_t_max(variant):
    task, model = act_model(variant, "model.n_layers=3", "model.eval_steps=5")
    with torch.no_grad():
        model.halting.unit.bias.fill_(-50.0)
    ids, mask = inputs(len(task.vocab), [6, 3], 6)
    states, p_hat, store = run_act(model, ids, mask)  # eval: T_max = eval_steps
    assert len(states) == 5 and torch.all(store["halting.steps"] == 5)
    weights = store["halting.weights"]
    if variant == "graves":  # R is taken at T_max: the output is the last state
        remainder = 1 - p_hat[:4].sum(0)
        assert torch.allclose(weights[-1], remainder) and remainder.min() > 0.999
        assert torch.allclose(store["final"], states[-1], atol=1e-5)
        assert float(model.aux_loss) == pytest.approx(0.03, rel=1e-4)
    else:  # Dehghani et al.: no remainder at T_max, the running state stays near zero
        assert torch.equal(weights[-1], p_hat[-1])
        assert store["final"].abs().max() < 1e-6
        assert float(model.aux_loss) == 0.0


@pytest.mark.parametrize("variant", ["graves", "ut"])
def test_ponder_loss_and_output_match_a_direct_loop_with_padding(variant):
    task, model = act_model(variant, "model.n_layers=6", "model.act_loss_weight=0.5", seed=1)
    with torch.no_grad():  # a halting unit that halts different columns at different steps
        model.halting.unit.weight.normal_(0, 0.5)
        model.halting.unit.bias.fill_(-1.0)
    lengths = [9, 5, 2, 7]
    ids, mask = inputs(len(task.vocab), lengths, 9, seed=3)
    states, p_hat, store = run_act(model, ids, mask)
    states, p_hat = states.double(), p_hat.double()
    if variant == "graves":
        results = {(b, i): direct_graves(p_hat[:, b, i].tolist(), list(states[:, b, i]))
                   for b in range(4) for i in range(9)}
        remainder = torch.tensor([[results[b, i][1] for i in range(9)] for b in range(4)])
        steps = torch.tensor([[results[b, i][2] for i in range(9)] for b in range(4)])
        output = torch.stack([torch.stack([results[b, i][0] for i in range(9)])
                              for b in range(4)])
    else:
        output, remainder, steps = direct_ut(p_hat, states)
    real = [remainder[b, i] for b in range(4) for i in range(lengths[b])]
    expected = 0.5 * sum(real) / len(real)  # N = real columns only
    assert float(model.aux_loss) == pytest.approx(float(expected), rel=1e-5)
    assert torch.equal(store["halting.steps"].long(), steps.long())
    assert torch.allclose(store["final"].double(), output, atol=1e-5)
    real_steps = steps[mask]
    assert len(real_steps.unique()) > 2  # the check covers varied halting steps
    # padding columns do not count: other tokens under the mask leave the loss unchanged
    assert float(model.aux_loss) != pytest.approx(0.5 * float(remainder.mean()), rel=1e-3)
    loss = model.aux_loss
    other = torch.where(mask, ids, torch.randint_like(ids, 1, len(task.vocab)))
    capture(model, [], other, mask)
    assert float(model.aux_loss) == pytest.approx(float(loss), rel=1e-6)


def test_act_trains_through_the_trainer_with_the_ponder_term_in_its_loss(tmp_path):
    overrides = ["model.shared_layers=true", "model.n_layers=3", "model.act=graves",
                 "model.act_loss_weight=1.0", "train.steps=4", "train.log_interval=1",
                 "train.eval_interval=4", "train.checkpoint_interval=4", "train.warmup_steps=0"]
    config = tiny_config(*overrides)
    lines = []
    Trainer(config, tmp_path, printer=lines.append).run()
    logged = [float(m.group(1)) for line in lines if (m := re.search(r"step 1/4 loss (\S+)", line))]
    # the same first step by hand: the initial model on the first batch
    task = build_task(config.task)
    torch.manual_seed(config.seed)
    model = build_model(config.model, len(task.vocab), task.max_length).train()
    generator = torch.Generator().manual_seed(config.seed)
    batch = model_batch(model, task.train_batch(config.train.batch_size, generator))
    with torch.no_grad():
        task_loss = float(target_loss(model(batch.input_ids), batch.targets))
    ponder = float(model.aux_loss)
    assert ponder > 0.1
    assert logged == [pytest.approx(task_loss + ponder, abs=2e-4)]
    record = [line for line in lines if "eval @ 4" in line][0]
    steps = float(re.search(r"iid_test/act_steps (\S+)", record).group(1))
    assert 1 <= steps <= 3
    trained = torch.load(tmp_path / config.run_id() / "checkpoints" / "last.pt",
                         weights_only=True)["model"]["halting.unit.bias"]
    assert float(trained) != pytest.approx(1.0)  # the halting unit was trained


def test_act_ensemble_members_match_alone(tmp_path):
    # prefix rows of different counts: filler rows and padded columns stay out of L_ACT
    configs = member_configs("model.attention_mask=bidirectional", "model.pos_encoding=none",
                             "model.shared_layers=true", "model.act=graves",
                             "model.act_loss_weight=0.5", "train.steps=6")
    assert_same_as_alone(configs[:2], tmp_path)


def test_act_needs_shared_layers():
    with pytest.raises(SglabError, match="set block.shared=true"):
        build_run_config({}, ["model.act=graves"])
    with pytest.raises(SglabError, match="set block.shared=true"):
        build_run_config({}, ["model.halting.kind=graves"])
    with pytest.raises(SglabError, match="act_threshold"):
        build_run_config({}, ["model.shared_layers=true", "model.act=ut", "model.act_threshold=1.5"])

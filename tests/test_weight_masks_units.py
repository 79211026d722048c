"""Units of the differentiable weight masks (thesis Ch. 3, App. B.1) on tiny nets and run
stores written by hand: the Gumbel-sigmoid draw at the edges of its uniform noise, which
parameters get a mask and what trains, device and dtype moves, recurrent and decoding
bases, and the masks, weights and checkpoints read from the finished runs of a store."""

import json
import os

import pytest
import torch
from torch import nn
from torch.func import functional_call

from sglab.config import build_run_config, dump_yaml
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.models.masked import (
    MaskedConfig,
    MaskedModel,
    gumbel_sigmoid,
    load_base_run,
    stored_run,
)
from sglab.train.evaluate import model_is_causal
from sglab.train.loop import pop_aux_loss
from tests.test_weight_mask_penalty import TinyNet  # 3 -> 4 -> 2, biases, no is_causal

VOCAB, WIDTH = 13, 5  # add_mul: padding, 10 digits, + and *; a1 a0 op b1 b0


class DecodingNet(TinyNet):
    """A TinyNet with a ``generate`` that takes a positional and a keyword argument."""

    def generate(self, x, scale=1.0):
        return self(x) * scale


class RecurrentNet(nn.Module):
    """An RNN over [batch, time, 3] whose readout also adds an extra keyword input."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(3, 4, batch_first=True)
        self.out = nn.Linear(4, 2)

    def forward(self, x, shift=None):
        states, _ = self.rnn(x)
        y = self.out(states[:, -1])
        return y if shift is None else y + shift


def masked(base: nn.Module, **fields) -> MaskedModel:
    return MaskedModel(MaskedConfig(base_run="unused", **fields), base)


def random_masks(model: MaskedModel, *lead: int, keep: float = 0.6) -> dict[str, torch.Tensor]:
    return {n: (torch.rand(*lead, *m.shape) < keep).float()
            for n, m in model.final_masks().items()}


# run stores written by hand: what a finished run leaves for the runs built on it


def store_run(runs, run_id: str, config, state: dict, **summary) -> None:
    """A finished run ``run_id``: config.yaml, summary.json and the model state of
    checkpoints/last.pt."""
    directory = runs / run_id
    (directory / "checkpoints").mkdir(parents=True)
    (directory / "config.yaml").write_text(dump_yaml(config))
    (directory / "summary.json").write_text(json.dumps({"status": "finished", **summary}))
    torch.save({"model": state}, directory / "checkpoints" / "last.pt")


def fnn_config():
    return build_run_config({"task": {"name": "add_mul"},
                             "model": {"name": "fnn", "hidden": [6]}})


def mask_config(base_run: str, **model):
    return build_run_config({"task": {"name": "add_mul"},
                             "model": {"name": "masked", "base_run": base_run, **model}})


def store_fnn(runs, run_id: str = "net", seed: int = 0) -> dict[str, torch.Tensor]:
    """An FNN run on add_mul (layers.0: 6 x 60, layers.1: 26 x 6, with biases); its weights."""
    config = fnn_config()
    torch.manual_seed(seed)
    state = build_model(config.model, VOCAB, WIDTH).state_dict()
    store_run(runs, run_id, config, state, vocab_size=VOCAB, max_length=WIDTH)
    return state


def spread_logits(shape, seed: int) -> torch.Tensor:
    """Logits that include the edge cases of the final mask: exactly 0, and values in (0, 1]."""
    values = torch.tensor([-1.5, -0.25, 0.0, 0.25, 0.5, 1.0, 3.0])
    index = torch.randint(len(values), shape, generator=torch.Generator().manual_seed(seed))
    return values[index]


def thesis_final_mask(logits: torch.Tensor) -> torch.Tensor:
    """Thesis B.1: the final mask is 1[sigmoid(l) > 0.5]."""
    return (torch.sigmoid(logits) > 0.5).float()


# the Gumbel-sigmoid sample (thesis Eq. 3.1, 3.2)


def test_gumbel_sigmoid_at_the_edges_of_the_uniform_draw(monkeypatch):
    """Eq. 3.1 turns a uniform draw U into logistic noise log U - log(1 - U). The lowest
    draw torch.rand can give, U = 0, must still give finite noise: a logit of 20 (keep
    probability 1 - 2e-9) is kept, with a finite straight-through gradient. U = 1/2 gives
    noise 0, so the sample is Eq. 3.2's 1[sigmoid(l) > 0.5] of the logit itself: strict,
    a logit of 0 (s = 0.5 exactly) is dropped, as in the final mask."""
    uniform = torch.rand
    for draw in (0.0, 0.5):
        monkeypatch.setattr(torch, "rand", lambda *a, d=draw, **k: uniform(*a, **k) * 0 + d)
        logits = torch.tensor([-20.0, -1.0, 0.0, 1.0, 20.0], requires_grad=True)
        sample = gumbel_sigmoid(logits, 3)
        sample.sum().backward()
        assert sample.shape == (3, 5) and bool(torch.isfinite(logits.grad).all())
        if draw == 0.0:
            assert bool((sample[:, -1] == 1).all()) and bool((sample[:, 0] == 0).all())
        else:
            expected = thesis_final_mask(logits.detach())
            assert torch.equal(sample, expected.expand(3, 5))
            assert expected.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]


def test_gumbel_sigmoid_draws_its_noise_on_the_logits_device():
    """The noise is drawn where the logits live (no copy between devices); the meta device
    shows it without data."""
    logits = torch.zeros(2, 3, device="meta", requires_grad=True)
    sample = gumbel_sigmoid(logits, 4)
    assert sample.device == logits.device and sample.shape == (4, 2, 3)


# which parameters are masked, and what trains


def test_a_training_step_reaches_only_the_logits_of_the_masked_weights():
    """``exclude`` leaves parameters unmasked (they compute at full value); the base is
    frozen: a training step gives gradients to the logits and to no base parameter; the
    penalty beta / batch * sum(l) covers the masked weights only and is left for the
    Trainer by a training forward pass alone."""
    torch.manual_seed(0)
    base = TinyNet()
    model = masked(base, mask_biases=True, exclude=["second.*"], beta=0.5, mask_samples=2)
    assert model.masked_names == ["first.weight", "first.bias"]
    assert sorted(model.final_masks()) == ["first.bias", "first.weight"]
    x = torch.randn(4, 3)
    assert pop_aux_loss(model) is None  # built: no penalty yet
    model.eval()
    zero = {n: torch.zeros_like(m) for n, m in model.final_masks().items()}
    with model.use_masks(zero):  # the first layer off, the second at full value
        expected = functional_call(base, {"first.weight": base.first.weight * 0,
                                          "first.bias": base.first.bias * 0}, (x,))
        assert torch.allclose(model(x), expected)
    assert pop_aux_loss(model) is None  # evaluation leaves no penalty
    model.train()
    out = model(x)
    penalty = pop_aux_loss(model)
    logit_sum = sum(float(lg.detach().sum()) for lg in model.logits.values())
    assert penalty.item() == pytest.approx(0.5 / 4 * logit_sum, rel=1e-6)
    (out.sum() + penalty).backward()
    for name, parameter in base.named_parameters():
        assert not parameter.requires_grad and parameter.grad is None, name
    assert all(lg.grad is not None and bool(lg.grad.abs().sum() > 0)
               for lg in model.logits.values())


def test_embedding_tables_and_norms_are_recognized_at_any_depth_of_the_base():
    """Embedding tables are never masked and ``mask_norms`` masks LayerNorm gains and
    biases, also where the base net is itself the table or the norm."""
    with pytest.raises(SglabError, match="no weight to mask"):
        masked(nn.Embedding(5, 3))  # a lookup table alone: nothing to mask
    assert masked(nn.LayerNorm(4), mask_norms=True).masked_names == ["weight", "bias"]
    with pytest.raises(SglabError, match="no weight to mask"):
        masked(nn.LayerNorm(4))  # 1-D parameters are masked only with mask_norms
    nested = nn.Sequential(nn.Embedding(5, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    assert masked(nested, mask_norms=True).masked_names == ["1.weight", "1.bias", "2.weight"]
    assert masked(nested).masked_names == ["2.weight"]


def test_the_mask_model_keeps_the_causality_of_its_base():
    """The Trainer reads ``is_causal`` to decide how to score next-token batches: the
    masked model says what its base says, and a base that says nothing counts as causal
    (as :func:`model_is_causal` reads any model)."""
    fnn = build_model(fnn_config().model, VOCAB, WIDTH)
    transformer = build_model(build_run_config({"task": {"name": "add_mul"}, "model": {
        "name": "transformer", "d_model": 8, "n_layers": 1, "n_heads": 2}}).model, VOCAB, WIDTH)
    for base in (fnn, transformer, TinyNet()):
        model = masked(base)
        assert model_is_causal(model) is model_is_causal(base), type(base).__name__
    assert model_is_causal(masked(fnn)) is False and model_is_causal(masked(TinyNet())) is True


def test_moving_to_another_dtype_moves_logits_base_and_fixed_masks_together():
    torch.manual_seed(0)
    base = TinyNet()
    fixed = (torch.rand(2, 4) < 0.5).float()
    model = MaskedModel(MaskedConfig(base_run="unused", fixed=["second.weight"], fixed_from="m"),
                        base, fixed_masks={"second__weight": fixed})
    model.to(torch.float64)
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert {p.dtype for p in base.parameters()} == {torch.float64}
    assert model.fixed_masks["second.weight"].dtype == torch.float64
    x = torch.randn(5, 3, dtype=torch.float64)
    expected = functional_call(base, {"second.weight": base.second.weight * fixed.double()},
                               (x,))
    assert torch.allclose(model.eval()(x), expected)  # first.weight: all kept (logits 2)


def test_train_base_without_frozen_masks_freezes_nothing():
    """With ``train_base``, a missing ``frozen_masks`` means that no weight is frozen: the
    trained weights start as the base's (reset_free off) and take gradients."""
    torch.manual_seed(0)
    base = TinyNet()
    model = masked(base, train_base=True, reset_free=False, mask_samples=2).train()
    assert model.masked_names == ["first.weight", "second.weight"]
    for name in model.masked_names:
        frozen = model.frozen_masks[name]
        assert frozen.dtype == torch.bool and not bool(frozen.any())
        assert torch.equal(model.base_weights()[name], dict(base.named_parameters())[name])
    with torch.no_grad():  # all masks kept: every weight takes part in the output
        for logits in model.logits.values():
            logits.fill_(50.0)
    (model(torch.randn(8, 3)) ** 2).sum().backward()
    for name in model.masked_names:
        grad = model.weights[model.key(name)].grad
        assert grad is not None and bool(grad.abs().sum() > 0), name


def test_a_recurrent_base_gets_each_slices_extra_inputs():
    """Recurrent bases run their mask samples in a loop; slice k of every extra input
    (as a decoder's input ids) goes with slice k of the batch and mask k."""
    torch.manual_seed(0)
    base = RecurrentNet()
    model = masked(base)
    assert model.loop
    x, shift = torch.randn(4, 5, 3), torch.randn(4, 2) * 10
    masks = random_masks(model, 2)
    together = model.forward_masked(x, masks, shift=shift)
    weights = dict(base.named_parameters())
    for k in range(2):
        rows = slice(2 * k, 2 * k + 2)
        alone = functional_call(base, {n: weights[n] * m[k] for n, m in masks.items()},
                                (x[rows],), {"shift": shift[rows]})
        assert torch.allclose(together[rows], alone, atol=1e-6)


def test_generate_decodes_with_the_bases_generate_under_the_masks():
    """``generate`` passes its positional and keyword arguments to the base's ``generate``,
    run with weights w * mask (the final masks, or those of :meth:`use_masks`)."""
    torch.manual_seed(0)
    base = DecodingNet()
    model = masked(base).eval()
    x = torch.randn(6, 3)
    assert torch.allclose(model.generate(x, scale=3.0), base.generate(x, scale=3.0))  # all kept
    masks = random_masks(model)
    weights = dict(base.named_parameters())
    expected = functional_call(base, {n: weights[n] * m for n, m in masks.items()}, (x,)) * 3.0
    with model.use_masks(masks):
        assert torch.allclose(model.generate(x, scale=3.0), expected)
    assert not torch.allclose(expected, base.generate(x, scale=3.0))


# masks, weights and checkpoints of the runs in a store


def test_fixed_masks_are_the_final_masks_of_a_mask_run_on_the_same_base(tmp_path):
    """``fixed`` weights take run ``fixed_from``'s final mask 1[sigmoid(l) > 0.5] (a logit
    of exactly 0 drops its weight), and that run must mask the same base run."""
    store_fnn(tmp_path)
    logits = {"layers__0__weight": spread_logits((6, 60), 0),
              "layers__1__weight": spread_logits((26, 6), 1)}
    store_run(tmp_path, "mask", mask_config("net"), {f"logits.{k}": v for k, v in logits.items()})
    store_run(tmp_path, "other-mask", mask_config("other-net"),
              {f"logits.{k}": v for k, v in logits.items()})
    config = mask_config("net", fixed=["layers.1.*"], fixed_from="mask").model
    model = build_model(config, VOCAB, WIDTH, runs_dir=tmp_path)
    assert model.masked_names == ["layers.0.weight"]
    expected = thesis_final_mask(logits["layers__1__weight"])
    assert 0 < expected.sum() < expected.numel()
    assert torch.equal(model.fixed_masks["layers.1.weight"], expected)
    assert torch.equal(model.final_masks()["layers.1.weight"], expected)
    other = mask_config("net", fixed=["layers.1.*"], fixed_from="other-mask").model
    with pytest.raises(SglabError, match="is not a mask run on base run net"):
        build_model(other, VOCAB, WIDTH, runs_dir=tmp_path)


def test_frozen_weights_are_those_an_earlier_tasks_final_mask_used(tmp_path):
    """train_base (thesis Sec. 3.2.3): the frozen set is the final mask 1[sigmoid(l) > 0.5]
    of each run in ``frozen_from``, and a parameter that run left unmasked was wholly used
    (here the biases); frozen entries keep that run's trained values. Only ``base_run``
    and the runs it froze may be frozen: a plain net froze none."""
    net = store_fnn(tmp_path)
    logits = {"layers__0__weight": spread_logits((6, 60), 2),
              "layers__1__weight": spread_logits((26, 6), 3)}
    trained = {k: net[k.replace("__", ".")] + 1.0 for k in logits}
    store_run(tmp_path, "task1", mask_config("net", train_base=True),
              {**{f"logits.{k}": v for k, v in logits.items()},
               **{f"weights.{k}": v for k, v in trained.items()}})
    config = mask_config("task1", train_base=True, frozen_from=["task1"], mask_biases=True,
                         reset_free=False).model
    model = build_model(config, VOCAB, WIDTH, runs_dir=tmp_path)
    assert sorted(model.frozen_masks) == ["layers.0.bias", "layers.0.weight", "layers.1.bias",
                                          "layers.1.weight"]
    for key, lg in logits.items():
        name = key.replace("__", ".")
        expected = thesis_final_mask(lg).bool()
        assert 0 < expected.sum() < expected.numel()
        assert torch.equal(model.frozen_masks[name], expected)
        assert torch.equal(model.base_weights()[name][expected], trained[key][expected])
    for name in ("layers.0.bias", "layers.1.bias"):
        assert bool(model.frozen_masks[name].all())
    plain = mask_config("net", train_base=True, frozen_from=["task1"]).model
    with pytest.raises(SglabError, match="frozen_from=task1 is neither model.base_run"):
        build_model(plain, VOCAB, WIDTH, runs_dir=tmp_path)


def test_the_base_net_is_rebuilt_with_what_its_task_added(tmp_path):
    """A base run's summary records what its task added to the model (``model_kwargs``,
    here a classifier that scores only the task's labels); the masked net computes with
    exactly that net."""
    config = build_run_config({"task": {"name": "ctl", "scored_classes": "labels"},
                               "model": {"name": "transformer", "readout": "first",
                                         "d_model": 8, "n_layers": 1, "n_heads": 2}})
    labels = [3, 4, 5, 6, 7, 8, 9, 10]
    torch.manual_seed(0)
    net = build_model(config.model, 20, 13, output_classes=labels).eval()
    store_run(tmp_path, "classifier", config, net.state_dict(), vocab_size=20, max_length=13,
              model_kwargs={"output_classes": labels})
    ids = torch.randint(1, 20, (6, 13))
    with torch.no_grad():
        expected = net(ids)
        assert torch.allclose(load_base_run(tmp_path, "classifier")(ids), expected)
        model = build_model(MaskedConfig(base_run="classifier"), 20, 13, runs_dir=tmp_path)
        out = model.eval()(ids)
    assert torch.allclose(out, expected)  # all masks kept (logits 2)
    others = [c for c in range(20) if c not in labels]
    assert bool((out[..., others].max(-1).values < out[..., labels].min(-1).values).all())


def test_checkpoints_load_onto_the_cpu_and_as_data_only(tmp_path, monkeypatch):
    """A base run trained on a GPU can be masked on a machine without one (its tensors are
    read onto the CPU), and a checkpoint is read as data: one that would run code when
    unpickled is refused."""
    state = store_fnn(tmp_path, "gpu-net")
    with monkeypatch.context() as patch:  # tensors recorded as on the GPU, as a GPU run writes
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save({"model": state}, tmp_path / "gpu-net" / "checkpoints" / "last.pt")
    loaded = stored_run(tmp_path, "gpu-net", "model.base_run").model_state()
    assert {t.device.type for t in loaded.values()} == {"cpu"}
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    assert torch.equal(load_base_run(tmp_path, "gpu-net").layers[0].weight,
                       state["layers.0.weight"])

    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return os.mkdir, (str(marker),)

    store_fnn(tmp_path, "planted")
    torch.save({"model": {"layers.0.weight": Payload()}},
               tmp_path / "planted" / "checkpoints" / "last.pt")
    with pytest.raises(SglabError, match="cannot load the weights of run planted"):
        stored_run(tmp_path, "planted", "model.base_run").model_state()
    assert not marker.exists()

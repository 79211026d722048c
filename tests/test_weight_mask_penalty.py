"""The weight-mask regulariser against the thesis's formula, by hand.

Thesis Sec. 3.2 (seed 001): the mask logits l_i are regularised by r = alpha * sum_i l_i,
and App. B.3.2 sets alpha through beta = b * alpha, b the batch size of the mask training.
So the penalty a training forward pass leaves in ``aux_loss`` is beta / b * sum_i l_i,
whatever the number of mask samples, the sequence length or the number of outputs, and
its gradient is beta / b on every logit.
"""

import pytest
import torch
from torch import nn

from sglab.models.masked import MaskedConfig, MaskedModel


class TinyNet(nn.Module):
    """3 -> 4 -> 2, biases on (unmasked unless ``mask_biases``)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 4)
        self.second = nn.Linear(4, 2)

    def forward(self, x, **_):
        return self.second(torch.relu(self.first(x)))


def _masked(**fields) -> MaskedModel:
    torch.manual_seed(0)
    config = MaskedConfig(base_run="tiny", **fields)
    model = MaskedModel(config, TinyNet())
    with torch.no_grad():  # known logits: 12 of 2.0 on first.weight, 8 of -1.0 on second.weight
        model.logits[MaskedModel.key("first.weight")].fill_(2.0)
        model.logits[MaskedModel.key("second.weight")].fill_(-1.0)
    return model.train()


@pytest.mark.parametrize("batch, samples", [(8, 4), (8, 1), (32, 4), (6, 2)])
def test_the_penalty_is_beta_over_the_batch_times_the_sum_of_the_logits(batch, samples):
    model = _masked(beta=0.5, mask_samples=samples)
    assert sorted(model.masked_names) == ["first.weight", "second.weight"]
    model(torch.randn(batch, 3))
    logit_sum = 12 * 2.0 + 8 * -1.0  # 16
    alpha = 0.5 / batch  # beta = b * alpha
    assert model.aux_loss.item() == pytest.approx(alpha * logit_sum, rel=1e-6)
    # by hand for b = 8: 0.5 / 8 * 16 = 1.0
    if batch == 8:
        assert model.aux_loss.item() == pytest.approx(1.0, rel=1e-6)
    # d r / d l_i = alpha for every logit
    model.aux_loss.backward()
    for name in model.masked_names:
        grad = model.logits[MaskedModel.key(name)].grad
        torch.testing.assert_close(grad, torch.full_like(grad, alpha))


def test_masked_biases_add_their_logits_and_evaluation_leaves_no_penalty():
    model = _masked(beta=2.0, mask_samples=2, mask_biases=True)
    with torch.no_grad():
        model.logits[MaskedModel.key("first.bias")].fill_(0.5)   # 4 x 0.5
        model.logits[MaskedModel.key("second.bias")].fill_(-3.0)  # 2 x -3
    model(torch.randn(4, 3))
    assert model.aux_loss.item() == pytest.approx(2.0 / 4 * (24 - 8 + 2 - 6), rel=1e-6)
    model.aux_loss = None
    model.eval()
    model(torch.randn(4, 3))
    assert model.aux_loss is None


class KeywordNet(TinyNet):
    """TinyNet whose output also depends on an extra input (as a seq2seq's decoder ids)."""

    def forward(self, x, shift=None, **_):
        return super().forward(x) + (0 if shift is None else shift)


def test_final_masks_keep_exactly_the_weights_with_a_positive_logit():
    """Thesis B.1: the final mask is 1[sigmoid(l) > 0.5], i.e. l > 0 (0.5 kept, 0 and -0.5 not)."""
    model = _masked()
    with torch.no_grad():
        logits = model.logits[MaskedModel.key("first.weight")]
        logits.copy_(torch.tensor([0.5, 0.0, -0.5, 1.5]).repeat(3, 1).T)
    mask = model.final_masks()["first.weight"]
    assert mask.T.tolist() == [[1.0, 0.0, 0.0, 1.0]] * 3


def test_a_lower_temperature_sharpens_the_soft_masks_under_the_same_noise():
    """Eq. 3.1: s = sigmoid((l + noise) / tau): the straight-through gradient shrinks as
    |l + noise| / tau grows, so at tau 0.1 most logits get almost none."""
    grads = {}
    for tau in (1.0, 0.1):
        model = _masked(temperature=tau, mask_samples=2)
        torch.manual_seed(3)
        out = model(torch.randn(8, 3))
        out.sum().backward()
        grads[tau] = model.logits[MaskedModel.key("first.weight")].grad.abs().mean().item()
    assert grads[0.1] < 0.5 * grads[1.0]


def test_extra_inputs_reach_the_base_in_training_and_in_evaluation():
    torch.manual_seed(0)
    model = MaskedModel(MaskedConfig(base_run="tiny", mask_samples=2), KeywordNet()).train()
    x = torch.randn(4, 3)
    shift = torch.full((4, 2), 100.0)
    assert (model(x, shift=shift) > 50).all() and (model(x) < 50).all()
    model.eval()
    assert torch.allclose(model(x, shift=shift) - model(x), shift)

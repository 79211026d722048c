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

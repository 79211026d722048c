"""train.weight_decay_on: which parameters AdamW decays (matrices only, or every one as in
the thesis's code, torch.optim.AdamW(model.parameters(), weight_decay=...))."""

import pytest
import torch

from sglab.config import TrainConfig
from sglab.train.loop import make_optimizer


@pytest.mark.parametrize("on, bias_decays", [("matrices", False), ("all", True)])
def test_a_step_without_gradient_only_decays_the_named_parameters(on, bias_decays):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = TrainConfig(lr=0.1, weight_decay=0.5, weight_decay_on=on)
    optimizer = make_optimizer(model, cfg, torch.device("cpu"))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # AdamW with a zero gradient: only the decay p <- p (1 - lr wd) moves p
    shrink = 1 - 0.1 * 0.5
    for name, p in model.named_parameters():
        decayed = p.dim() >= 2 or bias_decays
        expected = before[name] * shrink if decayed else before[name]
        torch.testing.assert_close(p.detach(), expected, msg=name)

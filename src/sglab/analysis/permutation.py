"""The symmetry check of Zuo & Guerzhoy, Sec. 4.

Without causal masking and without positional encoding, attention is permutation
equivariant, so the prediction for token n+1 cannot change when tokens 1..n-1 are
permuted. This measures how much it does change for a given model and input.
"""

from __future__ import annotations

import torch

from sglab.tasks.addition import order_blind_ceiling  # moved to the task it probes


@torch.no_grad()
def permutation_sensitivity(model, input_ids: torch.Tensor, permutations: int = 8,
                            seed: int = 0) -> float:
    """Max |p(next | permuted) - p(next | original)| over random permutations.

    ``input_ids``: (B, n) complete sequences without padding. Tokens at positions
    0..n-2 are shuffled (the same permutation for the whole batch); the last token
    stays in place. Returns the largest change of any next-token probability.
    """
    was_training = model.training
    model.eval()
    try:
        n = input_ids.shape[1]
        generator = torch.Generator().manual_seed(seed)
        reference = model(input_ids)[:, -1].float().softmax(-1)
        worst = 0.0
        for _ in range(permutations):
            order = torch.randperm(n - 1, generator=generator)
            while n > 2 and torch.equal(order, torch.arange(n - 1)):
                order = torch.randperm(n - 1, generator=generator)
            shuffled = torch.cat([input_ids[:, :-1][:, order], input_ids[:, -1:]], dim=1)
            probs = model(shuffled)[:, -1].float().softmax(-1)
            worst = max(worst, float((probs - reference).abs().max()))
        return worst
    finally:
        model.train(was_training)


__all__ = ["order_blind_ceiling", "permutation_sensitivity"]

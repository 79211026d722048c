"""The symmetry check of Zuo & Guerzhoy, Sec. 4.

Without causal masking and without positional encoding, attention is permutation
equivariant, so the prediction for token n+1 cannot change when tokens 1..n-1 are
permuted. This measures how much it does change for a given model and input.
"""

from __future__ import annotations

import torch


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


def order_blind_ceiling(prompts: list[list[int]], answers: list[list[int]]) -> float:
    """Best exact-match accuracy of any model whose prediction ignores token order.

    Such a model's prediction at each step depends only on the multiset of the
    earlier tokens and on the last token. By induction its whole greedy answer is
    a function of (multiset(prompt[:-1]), prompt[-1]), so the best it can do is
    answer each group of prompts with that key by the group's most common answer.
    """
    groups: dict[tuple, dict[tuple, int]] = {}
    for prompt, answer in zip(prompts, answers):
        key = (tuple(sorted(prompt[:-1])), prompt[-1])
        counts = groups.setdefault(key, {})
        counts[tuple(answer)] = counts.get(tuple(answer), 0) + 1
    best = sum(max(counts.values()) for counts in groups.values())
    return best / max(len(prompts), 1)

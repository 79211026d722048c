"""Expert selection of the MoE layers and of Top-K against a brute-force reference.

The reference walks the tokens one at a time with plain Python: it scores every expert
with a dot product, sorts the experts by score, keeps the K best and sums their outputs
weighted as thesis Ch. 7 writes them (seed 001, Sec. 7.4, Eq. 7.12 with Eqs. 7.19-7.21):

    y = sum_{e in E_x} s[e] W2^e ReLU(W1^e x),   E_x = arg topk(s, K)

with s = sigmoid(W3 x) for sigma-MoE (no renormalisation), s = softmax(W3 x) for Switch
and the ``softmax_before`` ablation, softmax over the K selected logits for
``softmax_after``, and for S-BASE the sigmoid weight with (in training) the experts chosen
on the Sinkhorn-balanced logits. Each case runs with ``impl`` masked and sorted. A layer
that routes a token to its lowest-scoring experts, or weighs them wrongly, fails here.
"""

import math

import pytest
import torch

from sglab.models.ffn import MLP
from sglab.models.moe import MoE

D, N_EXPERTS, EXPERT_SIZE, TOKENS = 6, 5, 3, 9


def _layer(kind="sigma_moe", selection="sigmoid", impl="masked", top_k=2, **kw) -> MoE:
    torch.manual_seed(11)
    moe = MoE(D, N_EXPERTS, EXPERT_SIZE, top_k, n_layers=2, kind=kind, selection=selection,
              impl=impl, **kw)
    with torch.no_grad():  # scores spread well apart: no near-ties anywhere
        moe.selector.copy_(torch.randn(N_EXPERTS, D))
    return moe.eval()


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def _expert_output(moe: MoE, e: int, x: list[float]) -> list[float]:
    """W2^e ReLU(W1^e x) with loops (keys [d, G], values [G, d])."""
    keys, values = moe.keys[e].tolist(), moe.values[e].tolist()
    hidden = [max(0.0, sum(x[i] * keys[i][g] for i in range(D))) for g in range(EXPERT_SIZE)]
    return [sum(hidden[g] * values[g][j] for g in range(EXPERT_SIZE)) for j in range(D)]


def _softmax(values: list[float]) -> list[float]:
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    return [v / sum(exps) for v in exps]


def _sinkhorn(logits: list[list[float]], steps: int = 3) -> list[list[float]]:
    """Log-space Sinkhorn by hand: normalise over experts, then over tokens, 3 times."""
    z = [row[:] for row in logits]
    for _ in range(steps):
        z = [[v - math.log(sum(math.exp(u) for u in row)) for v in row] for row in z]
        columns = [math.log(sum(math.exp(z[n][e]) for n in range(len(z))))
                   for e in range(len(z[0]))]
        z = [[v - columns[e] for e, v in enumerate(row)] for row in z]
    return z


def reference(moe: MoE, x: torch.Tensor, training: bool = False):
    """(outputs [N, d], chosen experts per token as sets, weight per chosen expert)."""
    rows = x.tolist()
    selector = moe.selector.tolist()
    logits = [[_dot(row, selector[e]) for e in range(N_EXPERTS)] for row in rows]
    balanced = _sinkhorn(logits) if moe.kind == "s_base" and training else None
    outputs, chosen, weights = [], [], []
    for n, row in enumerate(rows):
        if moe.kind == "switch" or moe.selection == "softmax_before":
            scores = _softmax(logits[n])
        elif moe.selection == "softmax_after":
            scores = logits[n]
        else:
            scores = [1 / (1 + math.exp(-v)) for v in logits[n]]
        rank = balanced[n] if balanced is not None else scores
        best = sorted(range(N_EXPERTS), key=lambda e: rank[e], reverse=True)[:moe.top_k]
        if moe.selection == "softmax_after":
            gate = dict(zip(best, _softmax([scores[e] for e in best])))
        else:
            gate = {e: scores[e] for e in best}
        y = [0.0] * D
        for e in best:
            out = _expert_output(moe, e, row)
            y = [a + gate[e] * b for a, b in zip(y, out)]
        outputs.append(y)
        chosen.append(set(best))
        weights.append(gate)
    return torch.tensor(outputs), chosen, weights


CASES = [  # (kind, selection, top_k)
    ("sigma_moe", "sigmoid", 1), ("sigma_moe", "sigmoid", 2), ("sigma_moe", "sigmoid", 4),
    ("sigma_moe", "softmax_before", 2), ("sigma_moe", "softmax_after", 2),
    ("switch", "sigmoid", 1), ("switch", "sigmoid", 2), ("s_base", "sigmoid", 1),
    ("s_base", "sigmoid", 2),
]


@pytest.mark.parametrize("impl", ["masked", "sorted"])
@pytest.mark.parametrize("kind, selection, top_k", CASES)
def test_each_token_goes_to_its_top_k_experts_weighted_as_the_thesis(kind, selection, top_k,
                                                                     impl):
    moe = _layer(kind, selection, impl, top_k)
    torch.manual_seed(12)
    x = torch.randn(TOKENS, D)
    expected, chosen, weights = reference(moe, x)
    _, gates, experts = moe.route(x)
    assert [set(row) for row in experts.tolist()] == chosen
    for n in range(TOKENS):
        got = dict(zip(experts[n].tolist(), gates[n].tolist()))
        assert got == pytest.approx(weights[n], abs=1e-6)
    with torch.no_grad():
        y = moe(x)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["masked", "sorted"])
def test_s_base_training_routes_on_the_sinkhorn_balance_and_weighs_by_the_sigmoid(impl):
    moe = _layer("s_base", "sigmoid", impl, top_k=2).train()
    torch.manual_seed(13)
    x = torch.randn(TOKENS, D)
    expected, chosen, weights = reference(moe, x, training=True)
    _, gates, experts = moe.route(x)
    assert [set(row) for row in experts.tolist()] == chosen
    for n in range(TOKENS):
        assert dict(zip(experts[n].tolist(), gates[n].tolist())) == pytest.approx(weights[n],
                                                                                abs=1e-6)
    torch.testing.assert_close(moe(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["masked", "sorted"])
def test_expert_dropout_picks_the_top_k_of_the_kept_experts(impl):
    """Eq. 7.21: a dropped (token, expert) score is 0 and cannot be chosen while K kept
    experts remain; the K best kept ones are chosen, weighted by their sigmoid."""
    moe = _layer(impl=impl, top_k=2, expert_dropout=0.4).train()
    torch.manual_seed(14)
    x = torch.randn(40, D)
    torch.manual_seed(15)
    _, gates, experts = moe.route(x)
    torch.manual_seed(15)
    keep = (torch.rand(40, N_EXPERTS) >= 0.4).tolist()  # the layer's draw, replayed
    scores = torch.sigmoid(x @ moe.selector.T).tolist()
    checked = 0
    for n in range(40):
        kept = [e for e in range(N_EXPERTS) if keep[n][e]]
        if len(kept) < 2:
            continue
        best = sorted(kept, key=lambda e: scores[n][e], reverse=True)[:2]
        assert set(experts[n].tolist()) == set(best)
        got = dict(zip(experts[n].tolist(), gates[n].tolist()))
        assert got == pytest.approx({e: scores[n][e] for e in best}, abs=1e-6)
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("top_k", [1, 3, 7])
def test_top_k_mlp_keeps_the_k_largest_units_of_each_token(top_k, bias):
    """Eqs. 7.6-7.7: u = ReLU(W1 x + b1); only the K largest units reach W2."""
    torch.manual_seed(16)
    mlp = MLP(D, 10, bias, "relu", 0.0, top_k=top_k).eval()
    x = torch.randn(TOKENS, D)
    w1, w2 = mlp.up.weight.tolist(), mlp.out.weight.tolist()
    b1 = mlp.up.bias.tolist() if bias else [0.0] * 10
    b2 = mlp.out.bias.tolist() if bias else [0.0] * D
    expected = []
    for row in x.tolist():
        u = [max(0.0, _dot(w1[i], row) + b1[i]) for i in range(10)]
        best = sorted(range(10), key=lambda i: u[i], reverse=True)[:top_k]
        kept = [u[i] if i in best else 0.0 for i in range(10)]
        expected.append([_dot(w2[j], kept) + b2[j] for j in range(D)])
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), torch.tensor(expected), rtol=1e-5, atol=1e-5)

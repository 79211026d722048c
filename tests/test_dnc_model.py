"""The DNC model (thesis Ch. 2, App. A.1): vectorised steps against per-cell loops, Graves et
al.'s equations with every switch off, the interface layout and the D, M, S changes."""

import math

import pytest
import torch
from torch.func import functional_call, vmap

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models.dnc import (
    DNC,
    EPSILON,
    VARIANTS,
    DNCConfig,
    MemoryState,
    allocation_weights,
    content_weights,
    interface_layout,
    interface_size,
    memory_step,
    pack_bits,
    sharpen,
    split_interface,
    unpack_bits,
    updated_links,
    updated_precedence,
)


@pytest.fixture(autouse=True)
def float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def naive_allocation(usage):
    out = torch.zeros_like(usage)
    for b in range(usage.shape[0]):
        u = [float(x) * (1 - EPSILON) + EPSILON for x in usage[b]]
        order = sorted(range(len(u)), key=lambda i: (u[i], i))  # ascending, ties by index
        product = 1.0
        for j in order:
            out[b, j] = (1 - u[j]) * product
            product *= u[j]
    return out


def naive_cosine(u, v):
    return float(u @ v) / (float(u.norm()) * float(v.norm()) + EPSILON)


def naive_lookup(memory, key, strength):
    scores = torch.tensor([strength * naive_cosine(key, row) for row in memory])
    return torch.softmax(scores, 0)


def naive_graves_step(state, parts):
    """Graves et al. (2016) for batch row 0, one cell at a time."""
    n, heads = state.memory.shape[1], state.read_weights.shape[1]
    m0, u0, p0, l0 = state.memory[0], state.usage[0], state.precedence[0], state.links[0]
    ww0, wr0 = state.write_weights[0], state.read_weights[0]
    psi = torch.ones(n)
    for i in range(n):
        for h in range(heads):
            psi[i] *= 1 - parts["free_gates"][0, h] * wr0[h, i]
    usage = torch.stack([(u0[i] + ww0[i] - u0[i] * ww0[i]) * psi[i] for i in range(n)])
    allocation = naive_allocation(usage[None])[0]
    cw = naive_lookup(m0, parts["write_key"][0, 0], parts["write_strength"][0, 0])
    ga, gw = parts["allocation_gate"][0, 0], parts["write_gate"][0, 0]
    ww = gw * (ga * allocation + (1 - ga) * cw)
    memory = torch.zeros_like(m0)
    for i in range(n):
        for w in range(m0.shape[1]):
            memory[i, w] = (m0[i, w] * (1 - ww[i] * parts["erase"][0, w])
                            + ww[i] * parts["write_vector"][0, w])
    links = torch.zeros(n, n)
    for i in range(n):
        for j in range(n):
            if i != j:
                links[i, j] = (1 - ww[i] - ww[j]) * l0[i, j] + ww[i] * p0[j]
    precedence = (1 - ww.sum()) * p0 + ww
    reads, weights = [], []
    for h in range(heads):
        forward = torch.stack([sum(links[i, j] * wr0[h, j] for j in range(n)) for i in range(n)])
        backward = torch.stack([sum(links[j, i] * wr0[h, j] for j in range(n)) for i in range(n)])
        content = naive_lookup(memory, parts["read_keys"][0, h], parts["read_strengths"][0, h])
        pi = parts["read_modes"][0, h]
        weight = pi[0] * backward + pi[1] * content + pi[2] * forward
        weights.append(weight)
        reads.append(memory.T @ weight)
    return dict(memory=memory, usage=usage, precedence=precedence, links=links,
                write_weights=ww, read_weights=torch.stack(weights), read_vectors=torch.stack(reads))


def random_state(batch=2, cells=6, width=5, heads=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.rand(*s, generator=g)
    ww = torch.softmax(3 * torch.randn(batch, cells, generator=g), -1) * 0.9
    wr = torch.softmax(3 * torch.randn(batch, heads, cells, generator=g), -1)
    links = r(batch, cells, cells) / cells * (1 - torch.eye(cells))
    return MemoryState(torch.randn(batch, cells, width, generator=g), r(batch, cells),
                       r(batch, cells) / cells, links, ww, wr, torch.randn(batch, heads, width, generator=g))


def random_parts(batch=2, width=5, heads=2, masked=False, sharp=False, seed=1):
    g = torch.Generator().manual_seed(seed)
    xi = 3 * torch.randn(batch, interface_size(width, heads, masked, sharp), generator=g)
    return split_interface(xi, width, heads, masked, sharp, mask_min=0.1)


def test_allocation_equals_per_cell_loop_with_usage_ties():
    usage = torch.tensor([[0.5, 0.2, 0.5, 0.2, 0.9, 0.0], [0.3, 0.3, 0.3, 0.3, 0.3, 0.3]])
    random = torch.rand(3, 6)
    for u in (usage, random, torch.zeros(1, 6), torch.ones(1, 6)):
        torch.testing.assert_close(allocation_weights(u), naive_allocation(u))
    assert allocation_weights(usage)[1].argmax() == 0  # tie: the lowest index is allocated


def test_links_and_precedence_equal_per_cell_loops():
    state = random_state(batch=1)
    ww = state.write_weights
    links = updated_links(state.links, ww, state.precedence)[0]
    for i in range(6):
        for j in range(6):
            expected = 0.0 if i == j else ((1 - ww[0, i] - ww[0, j]) * state.links[0, i, j]
                                           + ww[0, i] * state.precedence[0, j])
            assert math.isclose(float(links[i, j]), float(expected), abs_tol=1e-12)
    precedence = updated_precedence(state.precedence, ww)[0]
    for i in range(6):
        expected = (1 - float(ww[0].sum())) * state.precedence[0, i] + ww[0, i]
        assert math.isclose(float(precedence[i]), float(expected), abs_tol=1e-12)


def test_sharpening_equals_per_cell_loop_and_never_flattens():
    d = torch.rand(4, 3, 7) ** 3
    s = 1 + 3 * torch.rand(4, 3)
    out = sharpen(d, s)
    for b in range(4):
        for h in range(3):
            top = max(float(x) + EPSILON for x in d[b, h])
            powered = [((float(x) + EPSILON) / top) ** float(s[b, h]) for x in d[b, h]]
            for i in range(7):  # Eq. A.10
                assert math.isclose(float(out[b, h, i]), powered[i] / sum(powered), rel_tol=1e-9)
    # S never flattens a link distribution: s >= 1 (oneplus) keeps or raises the peak
    normalised = (d + EPSILON) / (d + EPSILON).sum(-1, keepdim=True)
    assert (out.amax(-1) >= normalised.amax(-1) - 1e-12).all()
    entropy = lambda p: -(p * p.clamp_min(1e-300).log()).sum(-1)
    assert (entropy(out) <= entropy(normalised) + 1e-12).all()
    torch.testing.assert_close(sharpen(d, torch.ones(4, 3)), normalised)


def test_all_switches_off_is_graves_et_al():
    state = random_state()
    parts = random_parts()
    new, _ = memory_step(state, parts, dealloc_content=False)
    expected = naive_graves_step(state, parts)
    for name, value in expected.items():
        torch.testing.assert_close(getattr(new, name)[0], value, msg=name)


@pytest.mark.parametrize("heads", [1, 4])
def test_interface_size_and_order(heads):
    width = 6
    assert interface_size(width, heads) == 2 * width * heads + 4 * width + 7 * heads + 3
    assert interface_size(width, heads, masked=False) == interface_size(width, heads) - width * (heads + 1)
    assert interface_size(width, heads, sharp=False) == interface_size(width, heads) - 2 * heads
    names = [n for n, _ in interface_layout(width, heads, True, True)]
    assert names == ["read_keys", "read_strengths", "write_key", "write_strength", "erase",
                     "write_vector", "free_gates", "allocation_gate", "write_gate", "read_modes",
                     "write_mask", "read_masks", "forward_sharpness", "backward_sharpness"]
    # the entry at each offset of Eq. A.1 lands in the named part
    xi = torch.zeros(1, interface_size(width, heads))
    offset = 2 * width * heads // 2 + heads + width + 1 + width  # start of the write vector
    xi[0, offset: offset + width] = torch.arange(1.0, width + 1)
    free = offset + width
    xi[0, free: free + heads] = 30.0  # clipped to 20
    parts = split_interface(xi, width, heads, True, True)
    torch.testing.assert_close(parts["write_vector"][0], torch.arange(1.0, width + 1))
    torch.testing.assert_close(parts["free_gates"][0], torch.sigmoid(torch.full((heads,), 20.0)))
    model = DNC(DNCConfig(cell_width=width, read_heads=heads), 2, input_bits=3, output_bits=2)
    assert model.interface.out_features == interface_size(width, heads)


def test_dealloc_content_makes_a_freed_cell_stop_matching():
    cells, width = 4, 3
    old = torch.tensor([1.0, -2.0, 0.5])
    state = MemoryState.zeros(1, cells, width, 1, torch.zeros(1))
    state.memory[0, 0] = old
    # the other cells hold weak, noisy copies: positive similarity to the old content
    noise = torch.randn(cells - 1, width, generator=torch.Generator().manual_seed(4))
    state.memory[0, 1:] = 0.01 * (old + 0.5 * noise)
    state.read_weights[0, 0, 0] = 1.0  # cell 0 was read at t-1 ...
    parts = random_parts(batch=1, width=width, heads=1)
    parts["free_gates"] = torch.ones(1, 1)  # ... and freed: psi[0] = 0 exactly
    parts["write_gate"] = torch.zeros(1, 1)
    for dealloc, matches in ((True, False), (False, True)):
        new, extra = memory_step(state, parts, dealloc_content=dealloc)
        assert float(extra["retention"][0, 0]) == 0.0
        lookup = content_weights(new.memory, old[None, None], torch.tensor([[50.0]]))[0, 0]
        assert bool(lookup.argmax() == 0) is matches
        if dealloc:
            assert float(new.memory[0, 0].abs().max()) == 0.0
            assert float(lookup[0]) < 1 / cells + 1e-6


def test_masked_lookup_zero_mask_ignores_value_half_and_ones_mask_is_plain():
    g = torch.Generator().manual_seed(3)
    memory = torch.randn(2, 5, 8, generator=g)
    keys, strengths = torch.randn(2, 3, 8, generator=g), 1 + torch.rand(2, 3, generator=g)
    ones = torch.ones(2, 3, 8)
    torch.testing.assert_close(content_weights(memory, keys, strengths, ones),
                               content_weights(memory, keys, strengths))
    half = torch.cat([torch.ones(2, 3, 4), torch.zeros(2, 3, 4)], -1)
    masked = content_weights(memory, keys, strengths, half)
    other_values = torch.cat([memory[..., :4], torch.randn(2, 5, 4, generator=g)], -1)
    other_keys = torch.cat([keys[..., :4], torch.randn(2, 3, 4, generator=g)], -1)
    torch.testing.assert_close(content_weights(other_values, other_keys, strengths, half), masked)
    torch.testing.assert_close(masked, content_weights(memory[..., :4], keys[..., :4], strengths))


@pytest.mark.parametrize("mask_min", [0.0, 0.1])
def test_mask_logits_get_gradient_through_key_and_memory(mask_min):
    # the mask (Eq. A.2) is neither detached nor clamped inside |logit| < 20: its logits get a
    # gradient, and so do the masked-out channels of key and memory when delta > 0
    cfg = DNCConfig(variant="DNC-M", memory_cells=4, cell_width=6, controller_size=8,
                    mask_min=mask_min, mask_bias_init=1.0)
    torch.manual_seed(0)
    model = DNC(cfg, 2, input_bits=5, output_bits=3)
    model(torch.randint(0, 32, (2, 7))).square().sum().backward()
    rows, start = {}, 0
    for name, size in model.layout:
        rows[name] = slice(start, start + size)
        start += size
    for name in ("write_mask", "read_masks"):
        assert float(model.interface.weight.grad[rows[name]].abs().sum()) > 0
        assert float(model.interface.bias.grad[rows[name]].abs().sum()) > 0
    memory = torch.randn(1, 4, 6, requires_grad=True)
    keys = torch.randn(1, 1, 6, requires_grad=True)
    mask = torch.tensor([[[1.0, 1, 1, mask_min, mask_min, mask_min]]], requires_grad=True)
    content_weights(memory, keys, torch.tensor([[3.0]]), mask)[0, 0, 1].backward()
    assert float(mask.grad.abs().sum()) > 0
    hidden_key = float(keys.grad[0, 0, 3:].abs().sum())
    assert hidden_key > 0 if mask_min > 0 else hidden_key == 0


def test_bit_packing_round_trips():
    bits = torch.randint(0, 2, (3, 7, 18))
    assert torch.equal(unpack_bits(pack_bits(bits), 18), bits.double())


@pytest.mark.parametrize("variant", VARIANTS)
def test_variants_set_switches_and_vmap_equals_alone(variant):
    cfg = DNCConfig(variant=variant, memory_cells=5, cell_width=4, controller_size=8,
                    read_heads=2)
    letters = variant.removeprefix("DNC")
    assert (cfg.dealloc_content, cfg.masked_lookup, cfg.link_sharpness) == \
        ("D" in letters, "M" in letters, "S" in letters)
    torch.manual_seed(0)
    model = DNC(cfg, 2, input_bits=5, output_bits=3)
    x = torch.randint(0, 32, (2, 6))
    params = {k: torch.stack([p.detach(), p.detach() + 0.01]) for k, p in model.named_parameters()}
    stacked = vmap(lambda p, ids: functional_call(model, p, (ids,)))(params, torch.stack([x, x]))
    torch.testing.assert_close(stacked[0], model(x))
    assert stacked.shape == (2, 2, 6, 3)


def test_hooks_give_time_stacked_states():
    from sglab.analysis.hooks import capture

    model = DNC(DNCConfig(memory_cells=5, cell_width=4, controller_size=8), 2, input_bits=5,
                output_bits=3)
    x = torch.randint(0, 32, (2, 6))
    found = capture(model, ["dnc.memory", "dnc.read_modes", "dnc.forward_links"], x)
    assert found["dnc.memory"].shape == (2, 6, 5, 4)
    assert found["dnc.read_modes"].shape == (2, 6, 1, 3)
    assert found["dnc.forward_links"].shape == (2, 6, 1, 5)


@pytest.mark.parametrize("change, needle", [
    ({"model.variant": "DNC-X"}, "variant"),
    ({"model.memory_cells": 0}, "memory_cells"),
    ({"model.cell_width": 0}, "cell_width"),
    ({"model.read_heads": 0}, "read_heads"),
    ({"model.variant": "DNC-M", "model.mask_min": 1.0}, "mask_min"),
    ({"model.variant": "DNC-M", "model.mask_min": -0.1}, "mask_min"),
    ({"model.variant": "DNC-D", "model.mask_min": 0.1}, "masked_lookup"),
    ({"model.io": "tokens", "model.bit_inputs": "signed"}, "bit_inputs"),
    ({"model.init": "kaiming"}, "init"),
])
def test_bad_model_config_is_a_clear_error(change, needle):
    with pytest.raises(SglabError, match=needle):
        build_run_config({"model": {"name": "dnc"}, "task": {"name": "addition"}}, change)


@pytest.fixture
def compiled_graphs(monkeypatch):
    """The graphs ``torch.compile`` captures, in order. A counting backend stands in for
    inductor (it runs dynamo's captured graph eagerly, so no C++ is compiled in the tests);
    dynamo's caches are cleared afterwards."""
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real_compile(fn, backend=counting_backend))
    yield graphs
    torch._dynamo.reset()


def test_compiled_step_equals_eager_and_compiles_once_for_every_length(compiled_graphs):
    """``train.compile`` compiles the DNC's one-step function, not the forward: sequences of
    any length reuse the same graphs (with gradients one for the first step, whose zero state
    needs none, and one for the rest; without gradients one for every step), and outputs
    and gradients equal the eager model's."""
    graphs = compiled_graphs
    cfg = DNCConfig(variant="DNC-MDS", memory_cells=5, cell_width=4, controller_size=8,
                    read_heads=2, mask_min=0.1)
    torch.manual_seed(0)
    eager = DNC(cfg, 2, input_bits=5, output_bits=3)
    compiled = DNC(cfg, 2, input_bits=5, output_bits=3)
    compiled.load_state_dict(eager.state_dict())
    assert compiled.compile_step() is compiled
    for length in (3, 7, 11):
        x = torch.randint(0, 32, (4, length))
        out_eager, out_compiled = eager(x), compiled(x)
        torch.testing.assert_close(out_compiled, out_eager)
        out_eager.square().sum().backward()
        out_compiled.square().sum().backward()
        for (name, p), q in zip(eager.named_parameters(), compiled.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert len(graphs) == 2
    with torch.no_grad():
        for length in (4, 9):
            x = torch.randint(0, 32, (4, length))
            torch.testing.assert_close(compiled(x), eager(x))
    assert len(graphs) == 3  # without gradients the first step is no different


def test_compiled_dnc_runs_train_alone_not_stacked():
    from sglab.sweep.jobs import executions

    def config(seed, compile):
        return build_run_config({"model": {"name": "dnc", "memory_cells": 4, "cell_width": 4,
                                           "controller_size": 8},
                                 "task": {"name": "dnc_key_value", "words": [2, 3]},
                                 "train": {"batch_size": 4, "loss": "bits", "compile": compile}},
                                {"seed": seed})

    assert executions([config(0, False), config(1, False)], True) == ["ensemble"] * 2
    assert executions([config(0, True), config(1, True)], True) == ["alone"] * 2


def test_every_model_a_worker_trains_gets_its_step_compiled(compiled_graphs):
    """A sweep worker trains runs one after another: each model compiles its step afresh,
    so a worker that trains many variants never reaches dynamo's recompile limit (8), past
    which later runs would step eagerly."""
    graphs = compiled_graphs
    cfg = DNCConfig(memory_cells=5, cell_width=4, controller_size=8)
    for run in range(6):
        model = DNC(cfg, 2, input_bits=5, output_bits=3).compile_step()
        before = len(graphs)
        model(torch.randint(0, 32, (4, 5))).sum().backward()
        with torch.no_grad():
            model(torch.randint(0, 32, (4, 5)))
        assert len(graphs) - before == 3, run


def test_read_shares_split_the_read_weighting_and_empty_links_read_nothing():
    """Eq. A.12: the read weights are pi[1] b + pi[2] c + pi[3] f, so the three shares add up
    to their mass; with no links written (a fresh memory) a forward mode weight reads nothing."""
    from sglab.analysis.dnc_memory import read_shares

    fresh = MemoryState.zeros(2, 6, 5, 2, torch.zeros(1))
    for state, linked in ((random_state(batch=2), True), (fresh, False)):
        parts = random_parts(batch=2, width=5, heads=2)
        parts["read_modes"] = torch.tensor([0.1, 0.2, 0.7]).expand(2, 2, 3)
        new, extra = memory_step(state, parts, dealloc_content=True)
        shares = read_shares(parts["read_modes"], extra["backward_links"], extra["forward_links"])
        torch.testing.assert_close(shares.sum(-1), new.read_weights.sum(-1))
        assert torch.allclose(shares[..., 1], torch.tensor(0.2))  # content weights sum to 1
        if linked:
            assert float(shares[..., 2].min()) > 0
        else:
            assert float(shares[..., 0].abs().max()) == float(shares[..., 2].abs().max()) == 0.0


def test_signed_bit_inputs_feed_minus_one_for_a_zero_bit():
    """``bit_inputs: signed`` is the authors' 2x - 1: the controller sees -1 where a bit is 0."""
    torch.manual_seed(0)
    binary = DNC(DNCConfig(memory_cells=5, cell_width=4, controller_size=8), 2, input_bits=5,
                 output_bits=3)
    signed = DNC(DNCConfig(memory_cells=5, cell_width=4, controller_size=8, bit_inputs="signed"),
                 2, input_bits=5, output_bits=3)
    signed.load_state_dict(binary.state_dict())
    seen = {}
    for name, model in (("binary", binary), ("signed", signed)):
        step = model.step
        model.step = lambda x, *rest, step=step, name=name: (
            seen.setdefault(name, []).append(x.clone()) or step(x, *rest))
    ids = torch.tensor([[0b10110, 0, 0b11111]])
    binary(ids), signed(ids)
    first = torch.stack(seen["binary"]), torch.stack(seen["signed"])
    assert torch.equal(first[0][0, 0], torch.tensor([0.0, 1, 1, 0, 1]))
    assert torch.equal(first[1], first[0] * 2 - 1)
    assert torch.equal(first[1][1, 0], -torch.ones(5))


def test_code_init_draws_the_authors_lstm_and_output_ranges():
    torch.manual_seed(0)
    size, in_bits, width = 64, 10, 16
    model = DNC(DNCConfig(controller_size=size, cell_width=width, init="code"), 2,
                input_bits=in_bits, output_bits=8)
    gates = model.controller.gates.weight
    fan_in = in_bits + width + size  # [x_t; r_{t-1}; h_{t-1}]
    bound = math.sqrt(6 / (fan_in + size))  # sqrt(3) * sqrt(2 / (in + 2 S)), in excluding h
    gain = 5 / 3
    candidate = gates[2 * size: 3 * size]
    others = torch.cat([gates[: 2 * size], gates[3 * size:]])
    assert others.abs().max() <= bound and others.abs().max() > 0.97 * bound
    assert candidate.abs().max() <= bound * gain and candidate.abs().max() > 0.97 * bound * gain
    # uniform: variance bound^2 / 3
    assert others.var().item() == pytest.approx(bound ** 2 / 3, rel=0.1)
    assert model.controller.gates.bias[size: 2 * size].eq(1).all()
    out = model.output.weight
    for block, fan in ((out[:, :size], size), (out[:, size:], width)):
        limit = math.sqrt(6 / (fan + 8))
        assert block.abs().max() <= limit and block.abs().max() > 0.8 * limit
    xavier = DNC(DNCConfig(controller_size=size, cell_width=width), 2, input_bits=in_bits,
                 output_bits=8)
    assert xavier.controller.gates.weight.abs().max() <= math.sqrt(6 / (fan_in + 4 * size))

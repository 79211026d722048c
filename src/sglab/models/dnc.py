"""The Differentiable Neural Computer and its improved variants (thesis Ch. 2, App. A.1).

Three switches change Graves et al.'s DNC:

- D ``dealloc_content``: deallocation also erases memory, M_t = M_{t-1} * psi_t 1^T * ...
  (Eq. A.8), so that a freed cell stops matching content lookups;
- M ``masked_lookup``: content lookup compares key and memory through a mask produced by
  the controller (Eqs. A.2, A.3);
- S ``link_sharpness``: the forward / backward link distributions are exponentiated and
  renormalised (Eq. A.10).

``variant`` names the combination (DNC, DNC-D, DNC-M, DNC-MD, DNC-DS, DNC-MS, DNC-MDS).
One time step runs in the order of Eqs. A.5-A.12: retention, usage (with the previous write
weights detached), allocation, write content weights on M_{t-1}, write weights, memory
update, links and precedence, temporal reads on L_t, read content weights on the memory
*after* the write, read weights, read vectors. The controller is a hand-written LSTM cell
(``torch.func.vmap`` has no batching rule for ``aten::lstm_cell``), so ensembles of DNCs
train vmapped like every other model. With ``train.compile`` a lone run compiles the time
step (:meth:`DNC.compile_step`) rather than the forward, which loops over time.

I/O: ``io: bits`` reads packed bit rows (bit i of ``input_ids[b, t]`` is input channel i)
and returns one logit per output bit, [batch, time, output_bits]; ``io: tokens`` embeds
token ids and returns vocabulary logits. Time-stacked states are exposed through hook points
``dnc.memory``, ``dnc.usage``, ``dnc.write_weights``, ``dnc.read_weights``,
``dnc.read_modes``, ``dnc.forward_links``, ``dnc.backward_links``, ``dnc.write_masks``,
``dnc.read_masks`` (stacked only while watched).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from sglab import registry
from sglab.config import ModelConfig, check_switches
from sglab.errors import SglabError
from sglab.models.hookpoint import HookPoint

EPSILON = 1e-6  # of the cosine (Eq. A.4), of sharpening (Eq. A.10) and of the usage floor
INTERFACE_CLIP = 20.0
VARIANTS = ("DNC", "DNC-D", "DNC-M", "DNC-MD", "DNC-DS", "DNC-MS", "DNC-MDS")


class DNCConfig(ModelConfig):
    name: Literal["dnc"] = "dnc"
    variant: Literal["DNC", "DNC-D", "DNC-M", "DNC-MD", "DNC-DS", "DNC-MS", "DNC-MDS"] = Field(
        "DNC-MDS", description="Which of the D (dealloc_content), M (masked_lookup) and S "
                               "(link_sharpness) changes are on.")
    memory_cells: int = Field(16, ge=1, description="N, cells of the memory.")
    cell_width: int = Field(16, ge=1, description="W, width of a memory cell.")
    read_heads: int = Field(1, ge=1, description="R, read heads.")
    controller_size: int = Field(32, ge=1, description="S, hidden units of the LSTM controller.")
    mask_min: float = Field(0.0, ge=0, lt=1, description="delta of Eq. A.2: masks lie in "
                            "[delta, 1]; needs masked_lookup (variant with M).")
    mask_bias_init: float = Field(0.0, description="Initial bias of the mask logits (the thesis "
                                  "suggests 1; the authors' code leaves 0); needs masked_lookup.")
    io: Literal["bits", "tokens"] = Field("bits", description="bits: packed bit rows in, one "
                                          "logit per bit out; tokens: embedding in, softmax out.")
    embedding_size: int = Field(256, ge=1, description="E, token embedding width (io=tokens).")
    bit_inputs: Literal["binary", "signed"] = Field(
        "binary", description="io=bits: feed each input bit as 0/1 (binary) or as -1/+1 "
                              "(signed, the authors' code: 2x - 1, so a 0 bit also drives the "
                              "controller).")
    init: Literal["xavier", "code"] = Field(
        "xavier", description="xavier: Xavier-uniform LSTM gates and output layer; code: the "
                              "authors' code: LSTM gate weights U(+-sqrt(6 / (in + 2 S))), the "
                              "cell candidate's times tanh's gain 5/3, and the output layer "
                              "as two Xavier blocks, one on h_t and one on r_t.")

    @property
    def dealloc_content(self) -> bool:
        return "D" in self.variant.removeprefix("DNC")

    @property
    def masked_lookup(self) -> bool:
        return "M" in self.variant.removeprefix("DNC")

    @property
    def link_sharpness(self) -> bool:
        return "S" in self.variant.removeprefix("DNC")

    @model_validator(mode="after")
    def _check_switches(self):
        masked = (self.masked_lookup, "a variant with M (masked_lookup), e.g. variant=DNC-M")
        check_switches(self, {"mask_min": masked, "mask_bias_init": masked,
                              "embedding_size": (self.io == "tokens", "io=tokens"),
                              "bit_inputs": (self.io == "bits", "io=bits")})
        return self


def interface_layout(width: int, heads: int, masked: bool, sharp: bool) -> list[tuple[str, int]]:
    """(name, size) of the interface entries in the order of Eq. A.1; the masks are left out
    without M, the sharpness entries without S (2WR + 4W + 7R + 3 with both)."""
    layout = [("read_keys", width * heads), ("read_strengths", heads), ("write_key", width),
              ("write_strength", 1), ("erase", width), ("write_vector", width),
              ("free_gates", heads), ("allocation_gate", 1), ("write_gate", 1),
              ("read_modes", 3 * heads)]
    if masked:
        layout += [("write_mask", width), ("read_masks", width * heads)]
    if sharp:
        layout += [("forward_sharpness", heads), ("backward_sharpness", heads)]
    return layout


def oneplus(x: torch.Tensor) -> torch.Tensor:
    return 1 + F.softplus(x)


def split_interface(xi: torch.Tensor, width: int, heads: int, masked: bool, sharp: bool,
                    mask_min: float = 0.0) -> dict[str, torch.Tensor]:
    """The clipped interface vector [batch, size] -> named, activated entries (Eq. A.1 and
    the nonlinearities listed after it; masks by Eq. A.2)."""
    xi = xi.clamp(-INTERFACE_CLIP, INTERFACE_CLIP)
    layout = interface_layout(width, heads, masked, sharp)
    raw = dict(zip([n for n, _ in layout], xi.split([s for _, s in layout], dim=-1), strict=True))
    batch = xi.shape[:-1]
    parts = {
        "read_keys": raw["read_keys"].reshape(*batch, heads, width),
        "read_strengths": oneplus(raw["read_strengths"]),
        "write_key": raw["write_key"].unsqueeze(-2),
        "write_strength": oneplus(raw["write_strength"]),
        "erase": torch.sigmoid(raw["erase"]),
        "write_vector": raw["write_vector"],
        "free_gates": torch.sigmoid(raw["free_gates"]),
        "allocation_gate": torch.sigmoid(raw["allocation_gate"]),
        "write_gate": torch.sigmoid(raw["write_gate"]),
        "read_modes": torch.softmax(raw["read_modes"].reshape(*batch, heads, 3), dim=-1),
    }
    if masked:  # Eq. A.2
        parts["write_mask"] = (torch.sigmoid(raw["write_mask"]) * (1 - mask_min) + mask_min).unsqueeze(-2)
        parts["read_masks"] = (torch.sigmoid(raw["read_masks"].reshape(*batch, heads, width))
                               * (1 - mask_min) + mask_min)
    if sharp:
        parts["forward_sharpness"] = oneplus(raw["forward_sharpness"])
        parts["backward_sharpness"] = oneplus(raw["backward_sharpness"])
    return parts


def content_weights(memory: torch.Tensor, keys: torch.Tensor, strengths: torch.Tensor,
                    masks: torch.Tensor | None = None) -> torch.Tensor:
    """C(M, k, beta, m) of Eq. A.3 for H heads: memory [B, N, W], keys and masks [B, H, W],
    strengths [B, H] -> [B, H, N]. The mask multiplies the key and every memory row; the
    cosine has epsilon outside the product of norms (Eq. A.4), which is what lets an erased
    cell score ~0."""
    if masks is None:
        rows = memory.unsqueeze(1)  # [B, 1, N, W]
    else:
        keys = keys * masks
        rows = memory.unsqueeze(1) * masks.unsqueeze(2)  # [B, H, N, W]
    dot = (rows * keys.unsqueeze(2)).sum(-1)
    norms = rows.norm(dim=-1) * keys.norm(dim=-1, keepdim=True)
    return torch.softmax(strengths.unsqueeze(-1) * dot / (norms + EPSILON), dim=-1)  # Eq. A.4


def allocation_weights(usage: torch.Tensor) -> torch.Tensor:
    """a_t of Eq. A.7's preamble: cells in ascending order of usage (ties in index order),
    a[phi[j]] = (1 - u[phi[j]]) prod_{i<j} u[phi[i]]; usage is floored as u(1-eps)+eps."""
    usage = usage * (1 - EPSILON) + EPSILON
    sorted_usage, order = torch.sort(usage, dim=-1, stable=True)
    exclusive = torch.cumprod(torch.cat([torch.ones_like(sorted_usage[..., :1]),
                                         sorted_usage[..., :-1]], dim=-1), dim=-1)
    sorted_allocation = (1 - sorted_usage) * exclusive
    return sorted_allocation.gather(-1, torch.argsort(order, dim=-1))


def updated_links(links: torch.Tensor, write_weights: torch.Tensor,
                  precedence: torch.Tensor) -> torch.Tensor:
    """L_t of Eq. A.9: links [B, N, N], write weights w_t^w and precedence p_{t-1} [B, N]."""
    w_i, w_j = write_weights.unsqueeze(-1), write_weights.unsqueeze(-2)
    links = (1 - w_i - w_j) * links + w_i * precedence.unsqueeze(-2)
    return links * (1 - torch.eye(links.shape[-1], dtype=links.dtype, device=links.device))


def updated_precedence(precedence: torch.Tensor, write_weights: torch.Tensor) -> torch.Tensor:
    """p_t = (1 - sum_i w_t^w[i]) p_{t-1} + w_t^w (Eq. A.9)."""
    return (1 - write_weights.sum(-1, keepdim=True)) * precedence + write_weights


def sharpen(distribution: torch.Tensor, sharpness: torch.Tensor) -> torch.Tensor:
    """S(d, s) of Eq. A.10: d [..., N], s [...]; divided by the max first for safety."""
    scaled = (distribution + EPSILON) / (distribution + EPSILON).amax(-1, keepdim=True)
    powered = scaled ** sharpness.unsqueeze(-1)
    return powered / powered.sum(-1, keepdim=True)


@dataclass
class MemoryState:
    memory: torch.Tensor  # [B, N, W]
    usage: torch.Tensor  # [B, N]
    precedence: torch.Tensor  # [B, N]
    links: torch.Tensor  # [B, N, N]
    write_weights: torch.Tensor  # [B, N]
    read_weights: torch.Tensor  # [B, R, N]
    read_vectors: torch.Tensor  # [B, R, W]

    @staticmethod
    def zeros(batch: int, cells: int, width: int, heads: int, like: torch.Tensor) -> MemoryState:
        zeros = lambda *shape: like.new_zeros(shape)
        return MemoryState(zeros(batch, cells, width), zeros(batch, cells), zeros(batch, cells),
                           zeros(batch, cells, cells), zeros(batch, cells),
                           zeros(batch, heads, cells), zeros(batch, heads, width))


def memory_step(state: MemoryState, parts: dict[str, torch.Tensor], dealloc_content: bool,
                ) -> tuple[MemoryState, dict[str, torch.Tensor]]:
    """One step of the memory, Eqs. A.5-A.12, from the activated interface ``parts`` (masks
    and sharpness entries present iff M / S is on). Returns the new state and the
    intermediate distributions (for hooks and tests)."""
    read_prev = state.read_weights
    # A.5 retention and A.6 usage (previous write weights detached, as the authors' code)
    retention = torch.prod(1 - parts["free_gates"].unsqueeze(-1) * read_prev, dim=1)
    write_prev = state.write_weights.detach()
    usage = (state.usage + write_prev - state.usage * write_prev) * retention
    allocation = allocation_weights(usage)
    # A.7 write weights from allocation and a content lookup in M_{t-1}
    write_content = content_weights(state.memory, parts["write_key"], parts["write_strength"],
                                    parts.get("write_mask"))[:, 0]
    gate_a, gate_w = parts["allocation_gate"], parts["write_gate"]
    write_weights = gate_w * (gate_a * allocation + (1 - gate_a) * write_content)
    # A.8 memory update; D multiplies every cell by its retention
    kept = state.memory * retention.unsqueeze(-1) if dealloc_content else state.memory
    memory = (kept * (1 - write_weights.unsqueeze(-1) * parts["erase"].unsqueeze(-2))
              + write_weights.unsqueeze(-1) * parts["write_vector"].unsqueeze(-2))
    # A.9 links use the current write weights and p_{t-1}
    links = updated_links(state.links, write_weights, state.precedence)
    precedence = updated_precedence(state.precedence, write_weights)
    # A.10 temporal reads from L_t and the previous read weights
    forward = torch.einsum("bij,brj->bri", links, read_prev)
    backward = torch.einsum("bji,brj->bri", links, read_prev)
    if "forward_sharpness" in parts:
        forward = sharpen(forward, parts["forward_sharpness"])
        backward = sharpen(backward, parts["backward_sharpness"])
    # A.11 content reads use the memory after the write; A.12 read weights
    read_content = content_weights(memory, parts["read_keys"], parts["read_strengths"],
                                   parts.get("read_masks"))
    modes = parts["read_modes"]
    read_weights = (modes[..., 0:1] * backward + modes[..., 1:2] * read_content
                    + modes[..., 2:3] * forward)
    read_vectors = torch.einsum("brn,bnw->brw", read_weights, memory)
    new = MemoryState(memory, usage, precedence, links, write_weights, read_weights, read_vectors)
    return new, {"allocation": allocation, "write_content": write_content,
                 "forward_links": forward, "backward_links": backward,
                 "read_content": read_content, "retention": retention}


class LSTMController(nn.Module):
    """One LSTM cell written out (gates i, f, g, o), forget bias 1. ``init``: ``xavier``
    (Xavier-uniform over all four gates) or ``code`` (the authors' code: each gate
    U(+-sqrt(3) sigma), sigma = sqrt(2 / (in + 2 S)), the candidate g times tanh's gain)."""

    def __init__(self, input_size: int, hidden_size: int, init: str = "xavier"):
        super().__init__()
        self.hidden_size = hidden_size
        self.gates = nn.Linear(input_size + hidden_size, 4 * hidden_size)
        with torch.no_grad():
            if init == "code":
                bound = math.sqrt(3.0 * 2.0 / (input_size + 2 * hidden_size))
                self.gates.weight.uniform_(-bound, bound)
                gain = nn.init.calculate_gain("tanh")
                self.gates.weight[2 * hidden_size: 3 * hidden_size].uniform_(-bound * gain,
                                                                             bound * gain)
            else:
                nn.init.xavier_uniform_(self.gates.weight)
            self.gates.bias.zero_()
            self.gates.bias[hidden_size: 2 * hidden_size] = 1.0

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        hidden, cell = state
        i, f, g, o = self.gates(torch.cat([x, hidden], dim=-1)).chunk(4, dim=-1)
        cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
        hidden = torch.sigmoid(o) * torch.tanh(cell)
        return hidden, cell


class MemoryHooks(nn.Module):
    """Hook points of the time-stacked memory states (``dnc.<name>``)."""

    NAMES = ("memory", "usage", "write_weights", "read_weights", "read_modes", "forward_links",
             "backward_links", "write_masks", "read_masks")

    def __init__(self):
        super().__init__()
        for name in self.NAMES:
            setattr(self, name, HookPoint())

    def watched(self) -> list[str]:
        return [name for name in self.NAMES if getattr(self, name).is_watched]


def unpack_bits(ids: torch.Tensor, bits: int) -> torch.Tensor:
    """Packed ids [...] -> float bits [..., bits], bit i = channel i."""
    shifts = torch.arange(bits, device=ids.device)
    return ((ids.unsqueeze(-1) >> shifts) & 1).float()


def pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """Bits [..., n] (0/1) -> packed int64 ids [...]."""
    weights = 2 ** torch.arange(bits.shape[-1], device=bits.device)
    return (bits.long() * weights).sum(-1)


class DNC(nn.Module):
    is_causal = True

    def __init__(self, config: DNCConfig, vocab_size: int, input_bits: int | None = None,
                 output_bits: int | None = None):
        super().__init__()
        self.config = config
        width, heads = config.cell_width, config.read_heads
        if config.io == "bits":
            if not input_bits or not output_bits:
                raise SglabError("model dnc with io=bits needs a bit task (input_bits and "
                                 "output_bits from Task.model_kwargs); for token tasks set "
                                 "model.io=tokens")
            self.input_bits, self.output_bits = input_bits, output_bits
            self.embedding = None
            in_size, out_size = input_bits, output_bits
        else:
            self.embedding = nn.Embedding(vocab_size, config.embedding_size)
            in_size, out_size = config.embedding_size, vocab_size
        self.controller = LSTMController(in_size + heads * width, config.controller_size,
                                         config.init)
        self.layout = interface_layout(width, heads, config.masked_lookup, config.link_sharpness)
        self.interface = nn.Linear(config.controller_size, sum(s for _, s in self.layout))
        self.output = nn.Linear(config.controller_size + heads * width, out_size)
        nn.init.xavier_uniform_(self.interface.weight)
        nn.init.zeros_(self.interface.bias)
        if config.init == "code":  # two layers in the code: controller_to_out, read_to_out
            size = config.controller_size
            with torch.no_grad():
                nn.init.xavier_uniform_(self.output.weight[:, :size])
                nn.init.xavier_uniform_(self.output.weight[:, size:])
        else:
            nn.init.xavier_uniform_(self.output.weight)
        nn.init.zeros_(self.output.bias)
        if config.masked_lookup:
            start = 0
            with torch.no_grad():
                for name, size in self.layout:
                    if name in ("write_mask", "read_masks"):
                        self.interface.bias[start: start + size] = config.mask_bias_init
                    start += size
        self.dnc = MemoryHooks()

    def step(self, inputs: torch.Tensor, controller: tuple[torch.Tensor, torch.Tensor],
             state: MemoryState):
        """One time step: the controller reads [x_t; r_{t-1}], the interface drives the
        memory (Eqs. A.5-A.12), the output reads [h_t; r_t]. Returns the output, the new
        controller and memory states, and the distributions the hook points show."""
        cfg = self.config
        controller = self.controller(torch.cat([inputs, state.read_vectors.flatten(1)], dim=-1),
                                     controller)
        parts = split_interface(self.interface(controller[0]), cfg.cell_width, cfg.read_heads,
                                cfg.masked_lookup, cfg.link_sharpness, cfg.mask_min)
        state, extra = memory_step(state, parts, cfg.dealloc_content)
        output = self.output(torch.cat([controller[0], state.read_vectors.flatten(1)], -1))
        shown = {"read_modes": parts["read_modes"], "forward_links": extra["forward_links"],
                 "backward_links": extra["backward_links"],
                 "write_masks": parts.get("write_mask"), "read_masks": parts.get("read_masks")}
        return output, controller, state, shown

    def compile_step(self) -> DNC:
        """``train.compile``: compile :meth:`step`, not the whole forward. The forward loops
        over time, so a compiled forward would unroll it and recompile for every sequence
        length; the step has the same shapes at every time step and every length, so it
        compiles once per batch size (and once more for evaluation without gradients)."""
        # a sweep worker trains runs one after another: each variant or size adds its
        # graphs to the one code object, and past dynamo's recompile limit (8) later runs
        # would silently step eagerly; start each model afresh (this clears every compiled
        # function in the process: a worker trains one run at a time)
        torch._dynamo.reset()
        self._step = torch.compile(self.step)
        return self

    def forward(self, input_ids: torch.Tensor, key_padding_mask: torch.Tensor | None = None):
        cfg = self.config
        if self.embedding is None:
            inputs = unpack_bits(input_ids, self.input_bits).to(self.output.weight.dtype)
            if cfg.bit_inputs == "signed":
                inputs = inputs * 2 - 1
        else:
            inputs = self.embedding(input_ids)
        batch, steps = input_ids.shape
        state = MemoryState.zeros(batch, cfg.memory_cells, cfg.cell_width, cfg.read_heads, inputs)
        # separate tensors, and inputs one contiguous [batch, bits] slab a step: a compiled
        # step then sees the same strides and no aliasing at every length
        controller = (inputs.new_zeros(batch, cfg.controller_size),
                      inputs.new_zeros(batch, cfg.controller_size))
        inputs = inputs.transpose(0, 1).contiguous()  # [T, B, in]
        watched = self.dnc.watched()
        trace: dict[str, list[torch.Tensor]] = {name: [] for name in watched}
        outputs = []
        step = getattr(self, "_step", self.step)
        for t in range(steps):
            output, controller, state, shown = step(inputs[t], controller, state)
            outputs.append(output)
            if watched:
                found = {"memory": state.memory, "usage": state.usage,
                         "write_weights": state.write_weights,
                         "read_weights": state.read_weights, **shown}
                for name in watched:
                    if found[name] is not None:
                        trace[name].append(found[name])
        for name in watched:
            if trace[name]:
                getattr(self.dnc, name)(torch.stack(trace[name], dim=1))  # [B, T, ...]
        return torch.stack(outputs, dim=1)


def interface_size(width: int, heads: int, masked: bool = True, sharp: bool = True) -> int:
    return sum(size for _, size in interface_layout(width, heads, masked, sharp))


@registry.register("model", "dnc", DNCConfig,
                   "Differentiable Neural Computer with masked lookup / deallocation / sharpness")
def make_dnc(config: DNCConfig, vocab_size: int, max_len: int, input_bits: int | None = None,
             output_bits: int | None = None) -> DNC:
    return DNC(config, vocab_size, input_bits, output_bits)


__all__ = ["DNC", "DNCConfig", "VARIANTS", "allocation_weights", "content_weights",
           "interface_layout", "interface_size", "memory_step", "pack_bits", "sharpen",
           "split_interface", "unpack_bits", "updated_links", "updated_precedence",
           "MemoryState"]

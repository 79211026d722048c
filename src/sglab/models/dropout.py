"""Dropout whose masks an ensemble member draws from its own seed.

A lone run uses ``torch.nn.functional.dropout`` (the global generator, seeded by the
Trainer). Inside :func:`member_masks` -- the ensemble's vmapped forward -- every dropout
site instead draws its mask from a counter-based generator keyed by (the member's seed,
the training step, the call's number within the forward pass, the element's index):
a pure function of tensors, so it runs under ``torch.func.vmap`` with a different key
per member. Two members with equal seeds get equal masks, members with different seeds
independent ones. The masks differ from the lone run's (another generator), so an
ensemble member with dropout equals its lone run statistically, not bitwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from pydantic import BaseModel
from torch import nn

_MASK32 = 0xFFFFFFFF


@dataclass
class _MaskKey:
    seed: torch.Tensor  # int64 scalar (a member's slice inside vmap)
    step: torch.Tensor  # int64 scalar
    calls: list[int] = field(default_factory=lambda: [0])


# The keys of the enclosing member_masks blocks, innermost last. A plain module-level list
# rather than a ContextVar: torch.compile traces list pushes and pops inside the vmapped
# forward, and cannot trace ContextVar.set (a training process runs one step at a time).
_KEYS: list[_MaskKey] = []


def _current_key() -> _MaskKey | None:
    return _KEYS[-1] if _KEYS else None


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mix (int64 tensors holding values below 2**32)."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    return (x >> 16) ^ x


def keyed_uniform(seed: torch.Tensor, step: torch.Tensor, call: int, shape: torch.Size,
                  device) -> torch.Tensor:
    """Uniform floats in [0, 1) of ``shape``, a pure function of (seed, step, call, index)."""
    index = torch.arange(int(torch.Size(shape).numel()), device=device, dtype=torch.int64)
    key = _hash32((seed.to(device) & _MASK32) ^ 0x9E3779B9)
    key = _hash32(key ^ (step.to(device) & _MASK32))
    key = _hash32(key ^ call)
    bits = _hash32(_hash32(index ^ key) + key & _MASK32)
    return ((bits >> 8).to(torch.float32) / float(1 << 24)).view(shape)


@contextlib.contextmanager
def member_masks(seed: torch.Tensor, step: torch.Tensor) -> Iterator[None]:
    """Within the block, dropout draws its masks from (``seed``, ``step``)."""
    _KEYS.append(_MaskKey(seed.long(), step.long()))
    try:
        yield
    finally:
        _KEYS.pop()


def dropout_fields_on(model_config, prefix: str = "") -> list[str]:
    """The model's dropout fields (dropout, attention.dropout, block.gate_dropout, ...) that
    are on, sub-configs (a transformer's families) included."""
    on = []
    for name, value in model_config:
        if isinstance(value, BaseModel):
            on += dropout_fields_on(value, f"{prefix}{name}.")
        elif name.endswith("dropout") and value:
            on.append(prefix + name)
    return on


def drawing_member_masks() -> bool:
    return _current_key() is not None


def keep_mask(like: torch.Tensor, p: float) -> torch.Tensor:
    """A boolean mask shaped like ``like``, each entry kept with probability 1 - p: from the
    global generator, or inside :func:`member_masks` from the member's key."""
    key = _current_key()
    if key is None:
        return torch.rand_like(like) >= p
    call = key.calls[0]
    key.calls[0] += 1
    return keyed_uniform(key.seed, key.step, call, like.shape, like.device) >= p


def apply_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout``, or inside :func:`member_masks` the same with a keyed mask."""
    key = _current_key()
    if key is None or not training or p == 0:
        return F.dropout(x, p, training)
    return x * keep_mask(x, p).to(x.dtype) / (1 - p)


class Dropout(nn.Dropout):
    """``nn.Dropout`` that follows :func:`apply_dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_dropout(x, self.p, self.training)


__all__ = ["Dropout", "apply_dropout", "drawing_member_masks", "dropout_fields_on", "keep_mask",
           "keyed_uniform", "member_masks"]

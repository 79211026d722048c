"""Named identity modules where analysis code can read activations.

Every activation of interest passes through a :class:`HookPoint`; its dotted name
(``blocks.3.attn.pattern``) is the module path, so it is stable and needs no
bookkeeping. ``sglab.analysis.hooks.capture`` attaches forward hooks to them.
"""

from torch import nn


class HookPoint(nn.Module):
    def forward(self, x):
        return x

    @property
    def is_watched(self) -> bool:
        """True while someone captures this point (used to compute optional activations)."""
        return bool(self._forward_hooks)

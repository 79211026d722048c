"""Differentiable weight masks on a frozen, finished run (thesis Ch. 3, App. B.1).

``masked`` wraps the model of a finished run (``base_run``, read from the run store the
model is built in). Each masked weight w_i gets a logit l_i; only the logits train, the
base network is frozen and always in eval mode (no dropout). A training forward pass
splits the batch into ``mask_samples`` (K) slices and draws one binary mask per slice
with the straight-through Gumbel-sigmoid; the K masked weight sets are stacked and the
base network runs once per slice under ``torch.func.vmap`` over ``functional_call``.
The penalty ``beta / batch * sum(l)`` is left in ``model.aux_loss`` for the Trainer.
Evaluation uses the final mask 1[sigmoid(l) > 0.5] (or masks set with :meth:`use_masks`).

``fixed`` (name patterns) with ``fixed_from`` (a finished mask run on the same base run)
keeps those weights under that run's final mask instead of training logits for them: the
class-removal masks fix the output layer to the full-task (control) mask (thesis Sec. 3.4).

Checkpoints hold only the logits: the base weights live outside the module tree.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn
from torch.func import functional_call, vmap

from sglab import registry
from sglab.config import ModelConfig, RunConfig, load_yaml, validate
from sglab.errors import SglabError


class MaskedConfig(ModelConfig):
    name: Literal["masked"] = "masked"
    base_run: str = Field(..., description="Run id of the finished run whose weights are masked.")
    logit_init: float = Field(2.0, description="Initial mask logit (2: keep probability 0.88).")
    mask_samples: int = Field(4, ge=1, description="K: batch slices, one mask sample each; "
                                                   "must divide train.batch_size.")
    beta: float = Field(1e-4, ge=0, description="Penalty strength: beta/batch * sum of logits.")
    temperature: float = Field(1.0, gt=0, description="Gumbel-sigmoid tau (scales gradients only).")
    mask_biases: bool = Field(False, description="Mask 1-D parameters (biases) too.")
    exclude: list[str] = Field(default_factory=list,
                               description="Shell patterns of parameter names left unmasked "
                                           "(embedding tables never are masked).")
    fixed: list[str] = Field(default_factory=list,
                             description="Shell patterns of masked parameters whose mask is "
                                         "taken from run fixed_from, not trained.")
    fixed_from: str | None = Field(None, description="Run id of a finished mask run on the "
                                                     "same base_run (the masks of `fixed`).")

    @model_validator(mode="after")
    def _check_fixed(self):
        if bool(self.fixed) != (self.fixed_from is not None):
            raise ValueError("model.fixed and model.fixed_from go together: name the "
                             "parameters to fix and the mask run whose masks they take")
        return self

    def check_train(self, train) -> None:
        if train.batch_size % self.mask_samples:
            raise ValueError(f"model.mask_samples={self.mask_samples} must divide "
                             f"train.batch_size={train.batch_size} (one mask sample per slice)")


def gumbel_sigmoid(logits: torch.Tensor, samples: int, temperature: float = 1.0,
                   eps: float = 1e-10) -> torch.Tensor:
    """``samples`` binary masks [samples, *logits.shape], each entry exactly 0 or 1 and
    Bernoulli(sigmoid(l)); gradients flow as through the soft sample (straight-through)."""
    shape = (samples, *logits.shape)
    u1 = torch.rand(shape, device=logits.device).clamp_min(eps)
    u2 = torch.rand(shape, device=logits.device).clamp_min(eps)
    # thesis Eq. 3.1 / B.6: s = sigmoid((l - log(log U1 / log U2)) / tau)
    noise = torch.log(torch.log(u1 + eps) / torch.log(u2 + eps) + eps)
    soft = torch.sigmoid((logits - noise) / temperature)
    # thesis Eq. 3.2 / B.10: b = stopgrad(1[s > 0.5] - s) + s
    return ((soft > 0.5).to(soft.dtype) - soft).detach() + soft


def load_base_run(runs_dir: str | Path | None, base_run: str) -> nn.Module:
    """The model of finished run ``base_run`` in ``runs_dir`` (weights of its last
    checkpoint), in eval mode; SglabError when it is missing or unfinished."""
    if runs_dir is None:
        raise SglabError("model masked needs the run store its base run lives in; build it "
                         "with build_model(..., runs_dir=...)")
    run_dir = Path(runs_dir) / base_run
    if not (run_dir / "summary.json").is_file():
        raise SglabError(f"model.base_run={base_run}: no such run in {str(runs_dir)!r}; train "
                         "the base run first (an experiment's earlier stage does)")
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("status") != "finished":
        raise SglabError(f"model.base_run={base_run} is {summary.get('status')!r}, not "
                         f"finished; finish it first (sglab train --resume {base_run})")
    config = validate(RunConfig, load_yaml(run_dir / "config.yaml"))
    if config.model.name == "masked":
        raise SglabError(f"model.base_run={base_run} is itself a mask run; mask a trained net")
    from sglab.models.transformer import build_model

    base = build_model(config.model, summary["vocab_size"], summary["max_length"],
                       **summary.get("model_kwargs", {}))
    path = run_dir / "checkpoints" / "last.pt"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        base.load_state_dict(state["model"])
    except Exception as exc:
        raise SglabError(f"cannot load the weights of base run {base_run} from {str(path)!r} "
                         f"({type(exc).__name__}); retrain the base run") from None
    base.summary = summary
    return base.eval()


class MaskedModel(nn.Module):
    """Mask logits over a frozen base model (the base is not a submodule)."""

    def __init__(self, config: MaskedConfig, base: nn.Module,
                 fixed_masks: dict[str, torch.Tensor] | None = None):
        """``fixed_masks``: masks by :meth:`key` of the parameter, for those in ``fixed``."""
        super().__init__()
        self.config = config
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        base.eval()
        self.__dict__["base"] = base  # outside the module tree: not trained, not saved
        embeddings = {f"{m}.{n}" if m else n for m, module in base.named_modules()
                      if isinstance(module, nn.Embedding) for n, _ in module.named_parameters()}
        names = [n for n, p in base.named_parameters()
                 if (config.mask_biases or p.dim() >= 2) and n not in embeddings]
        for pattern in config.exclude:
            if not any(fnmatch.fnmatchcase(n, pattern) for n, _ in base.named_parameters()):
                raise SglabError(f"model.exclude: no parameter of the base run matches "
                                 f"{pattern!r}; names look like: "
                                 f"{', '.join(n for n, _ in list(base.named_parameters())[:8])}")
        names = [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in config.exclude)]
        for pattern in config.fixed:
            if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
                raise SglabError(f"model.fixed: no masked parameter matches {pattern!r}; "
                                 f"masked names: {', '.join(names[:8])}")
        fixed_names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in config.fixed)]
        self.masked_names = [n for n in names if n not in fixed_names]  # trained logits
        if not self.masked_names:
            raise SglabError("model.exclude and model.fixed leave no weight to mask")
        weights = dict(base.named_parameters())
        given = fixed_masks or {}
        for name in fixed_names:
            mask = given.get(self.key(name))
            if mask is None or mask.shape != weights[name].shape:
                raise SglabError(f"model.fixed_from={config.fixed_from} has no mask of the "
                                 f"shape of {name}; fix masks from a mask run on the same base")
        self.fixed_masks = {n: given[self.key(n)].float() for n in fixed_names}
        self.logits = nn.ParameterDict({
            self.key(n): nn.Parameter(torch.full_like(weights[n], config.logit_init))
            for n in self.masked_names})
        self.is_causal = getattr(base, "is_causal", True)
        # aten::lstm has no vmap rule: recurrent bases run their mask samples in a loop
        self.loop = any(isinstance(m, nn.RNNBase) for m in base.modules())
        self.fixed: dict[str, torch.Tensor] | None = None
        self.aux_loss: torch.Tensor | None = None

    @staticmethod
    def key(name: str) -> str:
        return name.replace(".", "__")

    def _apply(self, fn, recurse=True):
        self.base._apply(fn)
        self.fixed_masks = {n: fn(m) for n, m in self.fixed_masks.items()}
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True):
        super().train(mode)
        self.base.eval()  # the frozen net stays in eval mode (dropout off)
        return self

    def mask_logits(self) -> dict[str, torch.Tensor]:
        """Logits by base parameter name."""
        return {n: self.logits[self.key(n)] for n in self.masked_names}

    def base_weights(self) -> dict[str, torch.Tensor]:
        weights = dict(self.base.named_parameters())
        return {n: weights[n] for n in [*self.masked_names, *self.fixed_masks]}

    def final_masks(self) -> dict[str, torch.Tensor]:
        """1[sigmoid(l) > 0.5] per masked weight (thesis B.1), and the fixed masks."""
        trained = {n: (lg.detach() > 0).float() for n, lg in self.mask_logits().items()}
        return trained | self.fixed_masks

    @contextmanager
    def use_masks(self, masks: dict[str, torch.Tensor]) -> Iterator[None]:
        """Evaluate with these binary masks instead of the final ones inside the block."""
        self.fixed = masks
        try:
            yield
        finally:
            self.fixed = None

    def forward_masked(self, input_ids: torch.Tensor, masks: dict[str, torch.Tensor],
                       **inputs) -> torch.Tensor:
        """The base model with weights w * mask; a mask [K, *shape] runs slice k of the batch
        under mask k (one vmapped pass); a mask of the weight's own shape runs all rows."""
        weights = self.base_weights()
        first = next(iter(masks.values()))
        if first.dim() == weights[next(iter(masks))].dim():
            masked = {n: weights[n] * masks[n] for n in masks}
            return functional_call(self.base, masked, (input_ids,), inputs)
        samples, batch = first.shape[0], input_ids.shape[0]
        if batch % samples:
            raise SglabError(f"model.mask_samples={samples} does not divide the batch of "
                             f"{batch}; choose a batch size that it divides")
        stacked = {n: weights[n].unsqueeze(0) * masks[n] for n in masks}
        given = {k: v for k, v in inputs.items() if v is not None}
        slices = {k: v.reshape(samples, batch // samples, *v.shape[1:]) for k, v in given.items()}

        def one(weights_k, ids_k, inputs_k):
            return functional_call(self.base, weights_k, (ids_k,), inputs_k)

        if self.loop:
            rows = batch // samples
            return torch.cat([one({n: w[k] for n, w in stacked.items()},
                                  input_ids[k * rows:(k + 1) * rows],
                                  {n: v[k] for n, v in slices.items()})
                              for k in range(samples)])

        out = vmap(one)(stacked, input_ids.reshape(samples, batch // samples,
                                                   *input_ids.shape[1:]), slices)
        return out.reshape(batch, *out.shape[2:])

    def forward(self, input_ids: torch.Tensor, **inputs) -> torch.Tensor:
        if not self.training:
            return self.forward_masked(input_ids, self.fixed or self.final_masks(), **inputs)
        cfg = self.config
        logits = self.mask_logits()
        masks = {n: gumbel_sigmoid(lg, cfg.mask_samples, cfg.temperature)
                 for n, lg in logits.items()}
        masks.update({n: m.expand(cfg.mask_samples, *m.shape)
                      for n, m in self.fixed_masks.items()})
        out = self.forward_masked(input_ids, masks, **inputs)
        # thesis B.1: loss + alpha * sum(l), beta = batch * alpha
        penalty = sum(lg.sum() for lg in logits.values())
        self.aux_loss = cfg.beta / input_ids.shape[0] * penalty
        return out


@registry.register("model", "masked", MaskedConfig,
                   "differentiable weight masks on a frozen finished run (thesis Ch. 3)")
def make_masked(config: MaskedConfig, vocab_size: int, max_len: int,
                runs_dir: str | Path | None = None) -> MaskedModel:
    base = load_base_run(runs_dir, config.base_run)
    if base.summary["vocab_size"] != vocab_size:
        raise SglabError(f"model.base_run={config.base_run} was trained with a vocabulary of "
                         f"{base.summary['vocab_size']} tokens, this task has {vocab_size}; "
                         "mask it on a task of the same family")
    return MaskedModel(config, base, load_fixed_masks(runs_dir, config))


def load_fixed_masks(runs_dir: str | Path | None, config: MaskedConfig) -> dict[str, torch.Tensor]:
    """The final masks of run ``config.fixed_from`` (a finished mask run on the same base
    run) by parameter name; {} without ``fixed_from``."""
    if config.fixed_from is None:
        return {}
    run_dir = Path(runs_dir) / config.fixed_from
    summary = json.loads((run_dir / "summary.json").read_text()) \
        if (run_dir / "summary.json").is_file() else {}
    if summary.get("status") != "finished":
        raise SglabError(f"model.fixed_from={config.fixed_from}: no finished run of that id in "
                         f"{str(runs_dir)!r}; train the mask it names first")
    other = validate(RunConfig, load_yaml(run_dir / "config.yaml")).model
    if other.name != "masked" or other.base_run != config.base_run:
        raise SglabError(f"model.fixed_from={config.fixed_from} is not a mask run on base run "
                         f"{config.base_run}; name a mask of the same net")
    state = torch.load(run_dir / "checkpoints" / "last.pt", map_location="cpu",
                       weights_only=True)["model"]
    prefix = "logits."
    return {key[len(prefix):]: (value > 0).float()  # keyed like MaskedModel.key(name)
            for key, value in state.items() if key.startswith(prefix)}

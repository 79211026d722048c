"""Differentiable weight masks on a frozen, finished run (thesis Ch. 3, App. B.1).

``masked`` wraps the model of a finished run (``base_run``, read from the run store the
model is built in). Each masked weight w_i gets a logit l_i; only the logits train, the
base network is frozen and always in eval mode (no dropout; an RNN without dropout between
its layers follows the mask's mode, as cuDNN's RNN backward needs). A training forward pass
splits the batch into ``mask_samples`` (K) slices and draws one binary mask per slice
with the straight-through Gumbel-sigmoid; the K masked weight sets are stacked and the
base network runs once per slice under ``torch.func.vmap`` over ``functional_call``.
The penalty ``beta / batch * sum(l)`` is left in ``model.aux_loss`` for the Trainer.
Evaluation uses the final mask 1[sigmoid(l) > 0.5] (or masks set with :meth:`use_masks`);
:meth:`MaskedModel.generate` runs an encoder-decoder base's greedy decoding under the same
masks. A task checks a mask run against its base run's model config (``network_config``).

``fixed`` (name patterns) with ``fixed_from`` (a finished mask run on the same base run)
keeps those weights under that run's final mask instead of training logits for them: the
class-removal masks fix the output layer to the full-task (control) mask (thesis Sec. 3.4).

Checkpoints hold only the logits: the base weights live outside the module tree.

``base_edit: copy_pair_io`` edits the loaded copy of the base (an ``fnn`` with ``passes:
per_pair`` trained on ``double_add``) before any mask sees it: pair 1's input and output
weights are copied onto pair 2's, the sanity check of thesis App. B.3.1 (Fig. B.2). The
base run's files are never written.

``train_base`` trains the masked weights together with their logits (transfer learning,
thesis Sec. 3.2.3 / B.3.6, the authors' partly frozen layers): the weights that the final
masks of the runs in ``frozen_from`` keep are frozen, the others train. A trained weight is
``where(frozen, frozen value, parameter)``, so the frozen entries are bit-identical however
the optimizer moves the parameter, and their gradient is zero. Such a run is itself a base
run: ``base_run`` = the previous task's run carries its weights on, and ``frozen_from`` may
name only that run and the runs it froze (so every frozen weight has stayed as the run that
used it left it). ``reset_free`` starts the free weights from a fresh initialization, as
the thesis does; ``unfrozen`` (name patterns) are never frozen (the thesis resets the first
layer for every task: an upper bound on transfer); ``frozen_logit_init`` biases new masks
towards the frozen weights (Fig. B.7). Unmasked parameters stay frozen. Checkpoints then
also hold the trained weights (``weights.*``, the frozen entries written in).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import nn
from torch.func import functional_call, vmap

from sglab import registry
from sglab.config import ModelConfig, RunConfig, check_switches, load_yaml, validate
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
    mask_norms: bool = Field(False, description="Mask LayerNorm gains and biases too (the "
                                                "authors' code masks them: its LayerNorm "
                                                "parameters are not named bias).")
    exclude: list[str] = Field(default_factory=list,
                               description="Shell patterns of parameter names left unmasked "
                                           "(embedding tables never are masked).")
    fixed: list[str] = Field(default_factory=list,
                             description="Shell patterns of masked parameters whose mask is "
                                         "taken from run fixed_from, not trained.")
    fixed_from: str | None = Field(None, description="Run id of a finished mask run on the "
                                                     "same base_run (the masks of `fixed`).")
    train_base: bool = Field(False, description="Train the masked weights with the logits, "
                                                "except those frozen by frozen_from "
                                                "(transfer learning, thesis Sec. 3.2.3).")
    frozen_from: list[str] = Field(default_factory=list,
                                   description="train_base: run ids of finished train_base "
                                               "mask runs (base_run and the runs it froze) "
                                               "whose final masks' weights stay frozen.")
    reset_free: bool = Field(True, description="train_base: free weights start from a fresh "
                                               "initialization, not base_run's values.")
    unfrozen: list[str] = Field(default_factory=list,
                                description="train_base: shell patterns of masked parameters "
                                            "never frozen (thesis: the first layer).")
    frozen_logit_init: float | None = Field(None, description="train_base: initial logit of "
                                                              "the frozen weights (null: "
                                                              "logit_init; Fig. B.7: 2).")
    base_edit: Literal["none", "copy_pair_io"] = Field(
        "none", description="copy_pair_io: copy pair 1's input and output weights onto pair "
                            "2's in the loaded base (an fnn with passes=per_pair trained on "
                            "double_add; thesis App. B.3.1). The base run stays as it is.")

    @model_validator(mode="after")
    def _check_fixed(self):
        if bool(self.fixed) != (self.fixed_from is not None):
            raise ValueError("model.fixed and model.fixed_from go together: name the "
                             "parameters to fix and the mask run whose masks they take")
        check_switches(self, {name: (self.train_base, "train_base=true") for name in
                              ("frozen_from", "reset_free", "unfrozen", "frozen_logit_init")})
        if self.train_base and self.fixed:
            raise ValueError("model.fixed does not combine with model.train_base: fixed masks "
                             "belong to a frozen net")
        if self.train_base and self.base_edit != "none":
            raise ValueError(f"model.base_edit={self.base_edit} edits a frozen net; it does not "
                             "combine with model.train_base")
        return self

    def network_config(self, runs_dir: str | Path | None) -> ModelConfig:
        """The model config of the ordinary run at the start of ``base_run``'s chain: the
        net the masks compute with (a task checks that it fits, e.g. an encoder-decoder)."""
        return root_run(runs_dir, self.base_run).config.model

    def check_train(self, train) -> None:
        if train.batch_size % self.mask_samples:
            raise ValueError(f"model.mask_samples={self.mask_samples} must divide "
                             f"train.batch_size={train.batch_size} (one mask sample per slice)")


def gumbel_sigmoid(logits: torch.Tensor, samples: int, temperature: float = 1.0,
                   eps: float = 1e-7) -> torch.Tensor:
    """``samples`` binary masks [samples, *logits.shape], each entry exactly 0 or 1 and
    Bernoulli(sigmoid(l)); gradients flow as through the soft sample (straight-through)."""
    # thesis Eq. 3.1 / B.6: s = sigmoid((l - log(log U1 / log U2)) / tau). The noise
    # log(-log U1) - log(-log U2) is a difference of two Gumbel variables: standard
    # logistic, symmetric, and so distributed as logit(U) = log U - log(1 - U) for one
    # uniform U. Drawn that way it costs one random number and one logarithm per entry
    # instead of two and three (the mask step's largest cost on a CPU)
    noise = torch.logit(torch.rand((samples, *logits.shape), device=logits.device), eps=eps)
    soft = torch.sigmoid((logits + noise) / temperature)
    # thesis Eq. 3.2 / B.10: b = stopgrad(1[s > 0.5] - s) + s
    return ((soft > 0.5).to(soft.dtype) - soft).detach() + soft


@dataclass
class StoredRun:
    """A finished run of the store: its id, directory, summary and config."""

    run_id: str
    directory: Path
    summary: dict
    config: RunConfig

    def model_state(self) -> dict[str, torch.Tensor]:
        """The ``model`` state of its last checkpoint."""
        path = self.directory / "checkpoints" / "last.pt"
        try:
            return torch.load(path, map_location="cpu", weights_only=True)["model"]
        except Exception as exc:
            raise SglabError(f"cannot load the weights of run {self.run_id} from {str(path)!r} "
                             f"({type(exc).__name__}); retrain that run") from None


def stored_run(runs_dir: str | Path | None, run_id: str, field: str) -> StoredRun:
    """Finished run ``run_id`` of ``runs_dir``; SglabError naming the config ``field`` that
    points at it when it is missing or unfinished."""
    if runs_dir is None:
        raise SglabError("model masked needs the run store its base run lives in; build it "
                         "with build_model(..., runs_dir=...)")
    run_dir = Path(runs_dir) / run_id
    if not (run_dir / "summary.json").is_file():
        raise SglabError(f"{field}={run_id}: no such run in {str(runs_dir)!r}; train that run "
                         "first (an experiment's earlier stage does)")
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("status") != "finished":
        raise SglabError(f"{field}={run_id} is {summary.get('status')!r}, not finished; finish "
                         f"it first (sglab train --resume {run_id})")
    return StoredRun(run_id, run_dir, summary,
                     validate(RunConfig, load_yaml(run_dir / "config.yaml")))


def is_trained_base(config: ModelConfig) -> bool:
    """Whether a run's model is a mask run that trained its base weights (a net itself)."""
    return config.name == "masked" and config.train_base


def root_run(runs_dir: str | Path | None, base_run: str) -> StoredRun:
    """The ordinary (unmasked) run at the start of ``base_run``'s chain of train_base runs."""
    run = stored_run(runs_dir, base_run, "model.base_run")
    while run.config.model.name == "masked":
        if not run.config.model.train_base:
            raise SglabError(f"model.base_run={run.run_id} is a mask on a frozen net; mask a "
                             "trained net (or a run with model.train_base)")
        run = stored_run(runs_dir, run.config.model.base_run, "model.base_run")
    return run


def build_architecture(root: StoredRun) -> nn.Module:
    """A freshly initialized net of the architecture of ordinary run ``root``."""
    from sglab.models.transformer import build_model

    summary = root.summary
    return build_model(root.config.model, summary["vocab_size"], summary["max_length"],
                       **summary.get("model_kwargs", {}))


def load_base_run(runs_dir: str | Path | None, base_run: str) -> nn.Module:
    """The net of finished run ``base_run`` in ``runs_dir`` (weights of its last
    checkpoint), in eval mode; SglabError when it is missing or unfinished. A train_base
    mask run gives its chain's architecture with the weights it trained."""
    root = root_run(runs_dir, base_run)
    base = build_architecture(root)
    try:
        base.load_state_dict(root.model_state())
    except SglabError:
        raise
    except Exception as exc:
        raise SglabError(f"cannot load the weights of base run {root.run_id} "
                         f"({type(exc).__name__}); retrain the base run") from None
    if base_run != root.run_id:  # the weights the last run of the chain trained
        state = stored_run(runs_dir, base_run, "model.base_run").model_state()
        with torch.no_grad():
            for name, parameter in base.named_parameters():
                trained = state.get(f"weights.{MaskedModel.key(name)}")
                if trained is not None:
                    parameter.copy_(trained)
    base.summary = root.summary
    return base.eval()


class MaskedModel(nn.Module):
    """Mask logits over a frozen base model (the base is not a submodule)."""

    def __init__(self, config: MaskedConfig, base: nn.Module,
                 fixed_masks: dict[str, torch.Tensor] | None = None,
                 frozen_masks: dict[str, torch.Tensor] | None = None,
                 fresh: nn.Module | None = None):
        """``fixed_masks``: masks by :meth:`key` of the parameter, for those in ``fixed``.
        With ``train_base``: ``frozen_masks`` (bool, by parameter name; missing = nothing
        frozen) marks the frozen weights, ``fresh`` (a newly initialized net of the base's
        architecture) gives the free weights' start when ``reset_free``."""
        super().__init__()
        self.config = config
        for parameter in base.parameters():
            parameter.requires_grad_(False)
        base.eval()
        self.__dict__["base"] = base  # outside the module tree: not trained, not saved
        embeddings = {f"{m}.{n}" if m else n for m, module in base.named_modules()
                      if isinstance(module, nn.Embedding) for n, _ in module.named_parameters()}
        norms = {f"{m}.{n}" if m else n for m, module in base.named_modules()
                 if isinstance(module, nn.LayerNorm) for n, _ in module.named_parameters()}
        names = [n for n, p in base.named_parameters()
                 if (config.mask_biases or p.dim() >= 2 or (config.mask_norms and n in norms))
                 and n not in embeddings]
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
        self.frozen_masks: dict[str, torch.Tensor] = {}
        if config.train_base:
            self._init_trained_weights(weights, frozen_masks or {}, fresh)
        self.logits = nn.ParameterDict({
            self.key(n): nn.Parameter(self._initial_logits(weights[n], n))
            for n in self.masked_names})
        self.is_causal = getattr(base, "is_causal", True)
        # aten::lstm has no vmap rule: recurrent bases run their mask samples in a loop
        self.loop = any(isinstance(m, nn.RNNBase) for m in base.modules())
        self.fixed: dict[str, torch.Tensor] | None = None
        self.aux_loss: torch.Tensor | None = None

    @staticmethod
    def key(name: str) -> str:
        return name.replace(".", "__")

    def _init_trained_weights(self, weights: dict[str, torch.Tensor],
                              frozen_masks: dict[str, torch.Tensor],
                              fresh: nn.Module | None) -> None:
        """The trained copies of the masked weights (train_base): frozen entries keep the
        base's values, free ones start fresh (``reset_free``) or from the base."""
        config = self.config
        for pattern in config.unfrozen:
            if not any(fnmatch.fnmatchcase(n, pattern) for n in self.masked_names):
                raise SglabError(f"model.unfrozen: no masked parameter matches {pattern!r}; "
                                 f"masked names: {', '.join(self.masked_names[:8])}")
        if config.reset_free and fresh is None:
            raise SglabError("model.reset_free needs a freshly initialized net of the base's "
                             "architecture (make_masked builds one)")
        start = dict(fresh.named_parameters()) if config.reset_free else weights
        for name in self.masked_names:
            frozen = frozen_masks.get(name, torch.zeros_like(weights[name], dtype=torch.bool))
            if any(fnmatch.fnmatchcase(name, p) for p in config.unfrozen):
                frozen = torch.zeros_like(frozen)
            self.frozen_masks[name] = frozen.bool()
        self.weights = nn.ParameterDict({
            self.key(n): nn.Parameter(torch.where(self.frozen_masks[n], weights[n],
                                                  start[n].detach()).clone())
            for n in self.masked_names})
        self.register_state_dict_post_hook(_write_effective_weights)

    def _initial_logits(self, weight: torch.Tensor, name: str) -> torch.Tensor:
        """``logit_init``; with ``frozen_logit_init``, that value on the frozen weights
        (thesis Fig. B.7: frozen 2, new 0 or -1)."""
        logits = torch.full_like(weight, self.config.logit_init)
        if self.config.frozen_logit_init is not None and name in self.frozen_masks:
            logits[self.frozen_masks[name]] = self.config.frozen_logit_init
        return logits

    def _apply(self, fn, recurse=True):
        self.base._apply(fn)
        self.fixed_masks = {n: fn(m) for n, m in self.fixed_masks.items()}
        self.frozen_masks = {n: fn(m) for n, m in self.frozen_masks.items()}
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True):
        super().train(mode)
        self.base.eval()  # the frozen net stays in eval mode (dropout off)
        for module in self.base.modules():
            # cuDNN has no RNN backward in eval mode; an RNN without dropout between its
            # layers computes the same in both modes, so it follows ``mode``
            if isinstance(module, nn.RNNBase) and module.dropout == 0:
                module.train(mode)
        return self

    def _rnn_backend(self):
        """Outside cuDNN while training through an RNN that must stay in eval mode (one
        with dropout between its layers): cuDNN's RNN backward needs training mode."""
        fixed = self.training and any(isinstance(m, nn.RNNBase) and not m.training
                                      for m in self.base.modules())
        return torch.backends.cudnn.flags(enabled=False) if fixed else nullcontext()

    def mask_logits(self) -> dict[str, torch.Tensor]:
        """Logits by base parameter name."""
        return {n: self.logits[self.key(n)] for n in self.masked_names}

    def base_weights(self) -> dict[str, torch.Tensor]:
        """The weights under the masks: the frozen base's, or with ``train_base`` the
        trained ones with the frozen entries taken from the base (the authors' partly
        frozen layers: no gradient reaches a frozen entry, no optimizer can move it)."""
        weights = dict(self.base.named_parameters())
        out = {n: weights[n] for n in [*self.masked_names, *self.fixed_masks]}
        if self.config.train_base:
            out.update({n: torch.where(self.frozen_masks[n], weights[n],
                                       self.weights[self.key(n)]) for n in self.masked_names})
        return out

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
            with self._rnn_backend():
                return torch.cat([one({n: w[k] for n, w in stacked.items()},
                                      input_ids[k * rows:(k + 1) * rows],
                                      {n: v[k] for n, v in slices.items()})
                                  for k in range(samples)])

        out = vmap(one)(stacked, input_ids.reshape(samples, batch // samples,
                                                   *input_ids.shape[1:]), slices)
        return out.reshape(batch, *out.shape[2:])

    @torch.no_grad()
    def generate(self, *args, **kwargs):
        """The base model's ``generate`` (e.g. greedy decoding of an encoder-decoder) with
        weights w * mask under the final masks, or those set with :meth:`use_masks`."""
        if not callable(getattr(self.base, "generate", None)):
            raise SglabError(f"the base run's model ({type(self.base).__name__}) has no "
                             "generate; decode only masks on an encoder-decoder (seq2seq)")
        masks = self.fixed or self.final_masks()
        weights = self.base_weights()
        masked = {f"net.{n}": weights[n] * masks[n] for n in masks}
        return functional_call(_Generating(self.base), masked, args, kwargs)

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


class _Generating(nn.Module):
    """``net.generate`` as a forward pass, so that ``functional_call`` can run it with
    other weights (``net.<parameter name>``)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, *args, **kwargs):
        return self.net.generate(*args, **kwargs)


def _write_effective_weights(module: MaskedModel, state: dict, prefix: str, metadata) -> None:
    """Checkpoints hold the weights the net computes with (frozen entries written in), so
    a later run reads its starting weights from ``weights.*`` alone."""
    for name, weight in module.base_weights().items():
        if name in module.frozen_masks:
            state[f"{prefix}weights.{module.key(name)}"] = weight.detach()


@registry.register("model", "masked", MaskedConfig,
                   "differentiable weight masks on a frozen finished run (thesis Ch. 3)")
def make_masked(config: MaskedConfig, vocab_size: int, max_len: int,
                runs_dir: str | Path | None = None) -> MaskedModel:
    base = load_base_run(runs_dir, config.base_run)
    if config.base_edit == "copy_pair_io":
        check_pair_io_base(stored_run(runs_dir, config.base_run, "model.base_run"))
        copy_pair_io(base)
    if base.summary["vocab_size"] != vocab_size:
        raise SglabError(f"model.base_run={config.base_run} was trained with a vocabulary of "
                         f"{base.summary['vocab_size']} tokens, this task has {vocab_size}; "
                         "mask it on a task of the same family")
    if not config.train_base:
        return MaskedModel(config, base, load_fixed_masks(runs_dir, config))
    frozen = load_frozen_masks(runs_dir, config, dict(base.named_parameters()))
    fresh = build_architecture(root_run(runs_dir, config.base_run)) if config.reset_free \
        else None
    return MaskedModel(config, base, frozen_masks=frozen, fresh=fresh)


def check_pair_io_base(run: StoredRun) -> None:
    """SglabError unless ``run`` is an ``fnn`` with ``passes: per_pair`` trained on
    ``double_add``: the only net whose pairs have their own input and output weights."""
    model, task = run.config.model, run.config.task
    if model.name != "fnn" or model.passes != "per_pair" or task.name != "double_add":
        shown = f"{model.name}" + (f" (passes={model.passes})" if model.name == "fnn" else "")
        raise SglabError(f"model.base_edit=copy_pair_io needs an fnn base run with "
                         f"passes=per_pair trained on double_add, but model.base_run="
                         f"{run.run_id} is a {shown} trained on {task.name}; mask such a run "
                         "or set model.base_edit=none")


def copy_pair_io(net: nn.Module) -> None:
    """Copy pair 1's input and output weights onto pair 2's, in place (thesis App. B.3.1,
    Fig. B.2: "we copy the input and output weights of one pair to the part of the weight
    matrix corresponding to the other", so that the hidden layers cannot see any difference
    between the two pairs).

    ``net`` is an ``fnn`` with ``passes: per_pair`` on ``double_add``: pair 1 is the first
    half of the input positions, whose blocks (``in_features / width`` columns each: one per
    token but padding, or one with ``input_encoding: value``) are the first columns of the
    first layer, and it answers in the first half of the slots, whose ``classes`` logits each
    are the first rows (and biases) of the last layer. Pair 2 owns the next as many columns
    and rows. The first layer's bias and the hidden layers are shared already.
    """
    first, last = net.layers[0], net.layers[-1]
    columns = net.width // 2 * (first.in_features // net.width)
    rows = net.config.outputs // 2 * net.classes
    with torch.no_grad():
        first.weight[:, columns:2 * columns] = first.weight[:, :columns].clone()
        last.weight[rows:2 * rows] = last.weight[:rows].clone()
        last.bias[rows:2 * rows] = last.bias[:rows].clone()


def load_frozen_masks(runs_dir: str | Path | None, config: MaskedConfig,
                      weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The union of the final masks of the runs in ``config.frozen_from`` (bool, by base
    parameter name, for every parameter of ``weights``; a parameter a run left unmasked
    was frozen and wholly used there).

    A run may be frozen only if it is ``base_run`` or a run that ``base_run`` froze, and
    the parameters ``base_run`` left unfrozen must stay unfrozen: then every frozen weight
    still has the value the run that used it trained (by induction along the chain)."""
    base = stored_run(runs_dir, config.base_run, "model.base_run")
    allowed = set()
    if is_trained_base(base.config.model):
        allowed = {base.run_id, *base.config.model.frozen_from}
        dropped = sorted(set(base.config.model.unfrozen) - set(config.unfrozen))
        if dropped:
            raise SglabError(f"model.unfrozen must keep base_run {base.run_id}'s pattern "
                             f"{dropped[0]!r}: those weights were reset after earlier masks "
                             "used them, so their masks cannot be frozen again")
    frozen = {n: torch.zeros_like(w, dtype=torch.bool) for n, w in weights.items()}
    for run_id in config.frozen_from:
        run = stored_run(runs_dir, run_id, "model.frozen_from")
        if not is_trained_base(run.config.model):
            raise SglabError(f"model.frozen_from={run_id} is not a mask run with "
                             "model.train_base; freeze the runs of earlier tasks")
        if run_id not in allowed:
            raise SglabError(f"model.frozen_from={run_id} is neither model.base_run "
                             f"({config.base_run}) nor a run it froze; name the runs of "
                             "base_run's chain (a frozen weight must have stayed frozen "
                             "since the run that used it)")
        state = run.model_state()
        for name, mask in frozen.items():
            logits = state.get(f"logits.{MaskedModel.key(name)}")
            # thesis B.1: the final mask 1[sigmoid(l) > 0.5]; unmasked there = all used
            mask |= logits > 0 if logits is not None else torch.ones_like(mask)
    return frozen


def load_fixed_masks(runs_dir: str | Path | None, config: MaskedConfig) -> dict[str, torch.Tensor]:
    """The final masks of run ``config.fixed_from`` (a finished mask run on the same base
    run) by parameter name; {} without ``fixed_from``."""
    if config.fixed_from is None:
        return {}
    run = stored_run(runs_dir, config.fixed_from, "model.fixed_from")
    other = run.config.model
    if other.name != "masked" or other.base_run != config.base_run:
        raise SglabError(f"model.fixed_from={config.fixed_from} is not a mask run on base run "
                         f"{config.base_run}; name a mask of the same net")
    prefix = "logits."
    return {key[len(prefix):]: (value > 0).float()  # keyed like MaskedModel.key(name)
            for key, value in run.model_state().items() if key.startswith(prefix)}

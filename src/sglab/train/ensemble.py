"""Train several runs as one batched computation (an ensemble).

Runs that differ only in seed and a few scalar hyperparameters (learning rate,
weight decay, init gamma, data seed, number of steps) have parameters of the same
shapes. Their parameters are stacked along a leading member dimension and one
forward/backward pass over all members is made with ``torch.func.vmap`` over the
unchanged model code (``functional_call``). Each member still gets exactly the
updates it would get alone:

- its own data order (one data generator per member, seeded as in :class:`Trainer`);
- its own loss (the members' mean losses, each with the auxiliary loss its model
  reports such as the ACT ponder loss, are summed, so the gradient of member k's
  parameters is the gradient of member k's loss);
- its own gradient clipping (the global norm is taken per member);
- its own optimizer step: AdamW / SGD written out elementwise with per-member
  learning rate and weight decay (the same arithmetic as ``torch.optim``);
- its own evaluation, model selection, early stop, checkpoints and run directory,
  through the same :class:`Trainer` bookkeeping. A member's checkpoint is an ordinary
  single-run checkpoint, so any member can later be resumed on its own.

A member that finishes (its last step, or early stop) leaves the ensemble and the
others go on. Dropout (attention, residual, gate, ...) draws each member's masks from
that member's own seed (:mod:`sglab.models.dropout`): equal seeds give equal masks, and
a member with dropout equals its lone run statistically, not bitwise (its summary says
so). Encoder-decoder models stack the source and its mask per member as well. Without
dropout a member equals its lone run to float rounding.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from pathlib import Path

import torch
from torch.func import functional_call, vmap

from sglab.config import RunConfig
from sglab.models.dropout import member_masks
from sglab.tasks.base import IGNORE, Batch, training_loss
from sglab.train.evaluate import forward_batch, model_batch
from sglab.train.lock import RunLock
from sglab.train.loop import (
    RMSPROP_ALPHA,
    RMSPROP_EPS,
    Trainer,
    cpu_settings,
    decays,
    pop_aux_loss,
    resolve_device,
)
from sglab.train.schedule import RunProgress, run_schedule

# Config fields that may differ between the members of one ensemble.
MEMBER_FIELDS = (
    ("seed",), ("task", "data_seed"), ("train", "lr"), ("train", "min_lr"),
    ("train", "weight_decay"), ("train", "steps"), ("train", "warmup_steps"),
    ("model", "init", "gamma"),
    ("train", "early_stop_threshold"), ("train", "target_threshold"),
)


def ensemble_key(config: RunConfig) -> str | None:
    """Runs with equal keys can train together; None = this run cannot join an ensemble."""
    if config.model.name == "masked":  # mask samples draw from the global RNG per run
        return None
    if getattr(getattr(config.model, "ffn", None), "impl", None) == "sorted":
        return None  # a sorted MoE has data-dependent shapes: no vmap
    if config.model.name in ("lstm", "lstm_seq2seq"):  # nn.LSTM draws its own dropout
        return None  # masks, and aten::lstm has no vmap batching rule (torch 2.13)
    data = config.to_dict()
    for path in MEMBER_FIELDS:
        section = data
        for key in path[:-1]:
            section = section.get(key, {}) if isinstance(section, dict) else {}
        if isinstance(section, dict):  # another model's field of that name is no section
            section.pop(path[-1], None)
    return json.dumps(data, sort_keys=True)


def _pad_and_stack(batches: list[Batch]) -> Batch:
    """Stack member batches [K, rows, width]; shorter ones are padded with pad tokens,
    IGNORE targets and (for bidirectional models) masked keys, which changes no loss."""
    rows = max(b.input_ids.shape[0] for b in batches)
    width = max(b.input_ids.shape[1] for b in batches)
    # next-token targets are as wide as the inputs; a classifier's one readout slot is not
    target_width = max(b.targets.shape[1] for b in batches)
    has_mask = any(b.key_padding_mask is not None for b in batches)
    sources = None
    if batches[0].source_ids is not None:  # encoder-decoder: stack the encoder inputs too
        sources = _pad_and_stack([Batch(b.source_ids, torch.full_like(b.source_ids, IGNORE),
                                        b.source_mask) for b in batches])
    ids, targets, masks = [], [], []
    for b in batches:
        r, w = b.input_ids.shape
        ids.append(torch.nn.functional.pad(b.input_ids, (0, width - w, 0, rows - r)))
        targets.append(torch.nn.functional.pad(b.targets, (0, target_width - b.targets.shape[1],
                                                           0, rows - r), value=IGNORE))
        if has_mask:
            mask = (b.key_padding_mask if b.key_padding_mask is not None
                    else torch.ones(r, w, dtype=torch.bool))
            mask = torch.nn.functional.pad(mask, (0, width - w, 0, rows - r), value=False)
            mask[r:, 0] = True  # filler rows see one key, so their (ignored) outputs stay finite
            masks.append(mask)
    return Batch(torch.stack(ids), torch.stack(targets), torch.stack(masks) if has_mask else None,
                 source_ids=None if sources is None else sources.input_ids,
                 source_mask=None if sources is None else sources.key_padding_mask)


class EnsembleTrainer:
    """Trains compatible RunConfigs (same :func:`ensemble_key`) together."""

    def __init__(self, configs: list[RunConfig], runs_dir: str | Path, store=None,
                 printer: Callable[[str], None] | None = print, tag: str | None = None):
        keys = {ensemble_key(c) for c in configs}
        if None in keys or len(keys) != 1:
            raise ValueError("ensemble members must share everything but the member fields "
                             f"{['.'.join(p) for p in MEMBER_FIELDS]}")
        self.configs = configs
        self.runs_dir = Path(runs_dir)
        self.store = store
        self.print = printer or (lambda line: None)
        self.tag = tag

    def run(self) -> list[dict]:
        """Train every member to its end; returns the summaries in input order."""
        trainers = [Trainer(c, self.runs_dir, store=self.store, printer=self.print, tag=self.tag,
                            execution="ensemble") for c in self.configs]
        summaries: dict[int, dict] = {}
        pending = []
        for i, trainer in enumerate(trainers):
            summary = trainer.read_summary()
            if summary and summary.get("status") == "finished":
                summaries[i] = trainer._already_finished(summary)  # re-recorded in the store
            else:
                pending.append(i)
        # members resumed from different checkpoints train as separate ensembles (of one
        # member, possibly: still the ensemble arithmetic, as their run ids say)
        by_step: dict[int, list[int]] = {}
        for i in pending:
            by_step.setdefault(trainers[i].checkpoint_step(), []).append(i)
        for indices in by_step.values():
            for i, summary in zip(indices, self._train([trainers[i] for i in indices])):
                summaries[i] = summary
        return [summaries[i] for i in range(len(trainers))]

    # ------------------------------------------------------------------ training
    def _train(self, trainers: list[Trainer]) -> list[dict]:
        device = resolve_device(trainers[0].config.train.device)
        summaries: dict[str, dict] = {}
        with ExitStack() as locks, cpu_settings(trainers[0].config.train, device):
            for trainer in trainers:
                locks.enter_context(RunLock(trainer.run_dir))
            to_train = []
            for trainer in trainers:
                summary = trainer.read_summary()  # a process before us may have finished it
                if summary and summary.get("status") == "finished":
                    summaries[trainer.run_id] = summary
                else:
                    to_train.append(trainer)
            if to_train:
                tasks: dict = {}
                runs = [t.prepare(device, tasks) for t in to_train]
                self.print(f"[ensemble] {len(runs)} run(s) trained together "
                           f"({', '.join(run.run_id for run in runs)})")
                summaries.update(run_schedule(runs, StackedStep(runs), self.print,
                                              ensemble_size=len(runs)))
        return [summaries[t.run_id] for t in trainers]


class StackedStep:
    """One optimizer step of every member at once: a vmapped forward/backward over the
    members' stacked parameters, then per-member clipping and AdamW/SGD arithmetic."""

    def __init__(self, runs: list[RunProgress]):
        self.runs = list(runs)
        template = runs[0].model
        self.template = template
        self.device = runs[0].device
        cfg = runs[0].cfg
        trainable = [n for n, p in template.named_parameters() if p.requires_grad]
        frozen = [n for n, p in template.named_parameters() if not p.requires_grad]
        buffer_names = [n for n, _ in template.named_buffers()]
        self.stack = _Stack(runs, trainable, frozen, buffer_names, cfg)
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16)
                         if cfg.precision == "bf16" and self.device.type == "cuda" else nullcontext())
        self.compile = cfg.compile
        self._forwards: dict[tuple, Callable] = {}  # vmapped (and compiled) forward per in_dims

    def _forward(self, in_dims: tuple) -> Callable:
        """The members' vmapped forward; with ``train.compile`` one ``torch.compile``d graph
        (dropout's keyed masks fuse into it), recompiled when the member count changes."""
        if in_dims not in self._forwards:
            forward = vmap(self._member_forward, in_dims=in_dims)
            self._forwards[in_dims] = torch.compile(forward) if self.compile else forward
        return self._forwards[in_dims]

    def _member_forward(self, params, constants, input_ids, key_padding_mask, source_ids,
                        source_mask, seed, step):
        batch = Batch(input_ids, None, key_padding_mask, source_ids=source_ids,
                      source_mask=source_mask)
        member = lambda *args, **inputs: functional_call(self.template, (params, constants),
                                                         args, inputs)
        with member_masks(seed, step):  # dropout masks from this member's own seed
            logits = forward_batch(member, batch)
        aux_loss = pop_aux_loss(self.template)  # read inside vmap: one value per member
        return logits, (torch.zeros((), device=logits.device) if aux_loss is None else aux_loss)

    def step(self, runs: list[RunProgress], lrs: list[float]) -> tuple[list[torch.Tensor], list[int]]:
        self.template.train()
        batches = [model_batch(self.template, run.task.train_batch(run.cfg.batch_size,
                                                                  run.generator))
                   for run in runs]
        batch = _pad_and_stack(batches).to(self.device)
        optional = lambda t: None if t is None else 0
        in_dims = (0, 0, 0, optional(batch.key_padding_mask), optional(batch.source_ids),
                   optional(batch.source_mask), 0, 0)
        seeds = torch.tensor([run.trainer.config.seed for run in runs], device=self.device)
        steps = torch.tensor([run.step for run in runs], device=self.device)
        stack = self.stack
        with self.autocast:
            logits, aux_losses = self._forward(in_dims)(
                stack.params, stack.constants, batch.input_ids, batch.key_padding_mask,
                batch.source_ids, batch.source_mask, seeds, steps)
        losses = torch.stack([training_loss(logits[k], batch.targets[k], run.cfg)
                              for k, run in enumerate(runs)]) + aux_losses
        stack.zero_grad()
        losses.sum().backward()
        stack.clip_gradients([run.cfg.grad_clip for run in runs])
        stack.optimizer_step(lrs, [run.cfg.weight_decay for run in runs])
        detached = losses.detach()
        return [detached[k] for k in range(len(runs))], [b.input_ids.numel() for b in batches]

    def sync(self, index: int) -> None:
        self.stack.write_member(index, self.runs[index])

    def remove(self, indices: list[int]) -> None:
        self.runs = [run for k, run in enumerate(self.runs) if k not in indices]
        self.stack.remove(indices)


class _Stack:
    """Stacked parameters and optimizer state of the active members."""

    def __init__(self, members: list[RunProgress], trainable, frozen, buffer_names, cfg):
        self.trainable, self.frozen, self.buffer_names = trainable, frozen, buffer_names
        self.optimizer_kind, self.betas, self.momentum = cfg.optimizer, cfg.betas, cfg.momentum
        self.cfg = cfg
        self.eps = 1e-8
        per_member = [dict(m.model.named_parameters()) for m in members]
        per_member_buffers = [dict(m.model.named_buffers()) for m in members]
        self.params = {n: torch.stack([p[n].detach() for p in per_member]).requires_grad_()
                       for n in trainable}
        self.constants = {n: torch.stack([p[n].detach() for p in per_member]) for n in frozen}
        self.constants.update({n: torch.stack([b[n] for b in per_member_buffers])
                               for n in buffer_names})
        # optimizer state, taken from each member's torch optimizer (empty on a fresh start)
        device = members[0].device
        self.step_count = torch.tensor([_state_step(m, per_member[k], trainable)
                                        for k, m in enumerate(members)], dtype=torch.float32,
                                       device=device)
        self.state: dict[str, dict[str, torch.Tensor]] = {}
        for n in trainable:
            entries = [m.optimizer.state.get(per_member[k][n], {}) for k, m in enumerate(members)]
            if self.optimizer_kind == "adamw":
                self.state[n] = {
                    key: torch.stack([e[key] if key in e else torch.zeros_like(self.params[n][0])
                                      for e in entries])
                    for key in ("exp_avg", "exp_avg_sq")
                }
            elif self.optimizer_kind == "rmsprop":
                keys = ("square_avg", "momentum_buffer") if self.momentum else ("square_avg",)
                self.state[n] = {
                    key: torch.stack([e[key] if key in e else torch.zeros_like(self.params[n][0])
                                      for e in entries])
                    for key in keys
                }
            elif self.momentum:
                buffers = [e.get("momentum_buffer") for e in entries]
                self.state[n] = {"momentum_buffer": torch.stack(
                    [b if b is not None else torch.zeros_like(self.params[n][0]) for b in buffers])}
            else:
                self.state[n] = {}

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    @torch.no_grad()
    def clip_gradients(self, max_norms: list[float | None]) -> None:
        """Per-member global-norm clipping, as ``torch.nn.utils.clip_grad_norm_``."""
        if all(c is None for c in max_norms):
            return
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        norms = torch.stack([g.reshape(len(g), -1).norm(dim=1) for g in grads], dim=1).norm(dim=1)  # [K]
        limits = torch.tensor([math.inf if c is None else c for c in max_norms], dtype=norms.dtype,
                              device=norms.device)
        coefficient = (limits / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coefficient.view(-1, *[1] * (g.dim() - 1)))

    @torch.no_grad()
    def optimizer_step(self, lrs: list[float], weight_decays: list[float]) -> None:
        """torch.optim.AdamW / SGD / RMSprop arithmetic with a learning rate and decay per member;
        weight decay applies to the tensors :func:`decays` names, as in :func:`make_optimizer`."""
        self.step_count += 1
        lr_per_member = torch.tensor(lrs, dtype=torch.float32, device=self.step_count.device)
        wd_per_member = torch.tensor(weight_decays, dtype=torch.float32, device=self.step_count.device)
        for name, p in self.params.items():
            g = p.grad
            if g is None:
                continue
            shape = (-1, *[1] * (p.dim() - 1))
            lr = lr_per_member.view(shape).to(p.dtype)
            # a member's tensor has one dimension less than its stack
            wd = wd_per_member.view(shape).to(p.dtype) if decays(p.dim() - 1, self.cfg) else None
            if self.optimizer_kind == "adamw":
                beta1, beta2 = self.betas
                state = self.state[name]
                if wd is not None:
                    p.mul_(1 - lr * wd)
                state["exp_avg"].lerp_(g, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
                steps = self.step_count.view(-1, *[1] * (p.dim() - 1)).to(p.dtype)
                bias_correction1 = 1 - beta1 ** steps
                bias_correction2 = 1 - beta2 ** steps
                denominator = (state["exp_avg_sq"].sqrt() / bias_correction2.sqrt()).add_(self.eps)
                p.sub_(lr / bias_correction1 * state["exp_avg"] / denominator)
            elif self.optimizer_kind == "rmsprop":  # torch.optim.RMSprop, L2 decay
                state = self.state[name]
                if wd is not None:
                    g = g.add(p * wd)
                state["square_avg"].mul_(RMSPROP_ALPHA).addcmul_(g, g, value=1 - RMSPROP_ALPHA)
                scaled = g / state["square_avg"].sqrt().add(RMSPROP_EPS)
                if self.momentum:
                    state["momentum_buffer"].mul_(self.momentum).add_(scaled)
                    scaled = state["momentum_buffer"]
                p.sub_(lr * scaled)
            else:
                if wd is not None:
                    g = g.add(p * wd)
                if self.momentum:
                    buffer = self.state[name]["momentum_buffer"]
                    first = (self.step_count == 1).view(-1, *[1] * (p.dim() - 1))
                    buffer.copy_(torch.where(first, g, buffer * self.momentum + g))
                    g = buffer
                p.sub_(lr * g)

    @torch.no_grad()
    def write_member(self, k: int, member: RunProgress) -> None:
        """Copy member k's weights and optimizer state into its own model / optimizer."""
        params = dict(member.model.named_parameters())
        buffers = dict(member.model.named_buffers())
        for n in self.trainable:
            params[n].copy_(self.params[n][k])
        for n in self.buffer_names:
            buffers[n].copy_(self.constants[n][k])
        step = float(self.step_count[k])
        for n in self.trainable:
            if self.optimizer_kind == "adamw":
                member.optimizer.state[params[n]] = {
                    "step": torch.tensor(step),
                    "exp_avg": self.state[n]["exp_avg"][k].clone(),
                    "exp_avg_sq": self.state[n]["exp_avg_sq"][k].clone(),
                }
            elif self.optimizer_kind == "rmsprop":
                member.optimizer.state[params[n]] = {
                    "step": torch.tensor(step),
                    **{key: value[k].clone() for key, value in self.state[n].items()}}
            else:
                buffer = self.state[n].get("momentum_buffer")
                member.optimizer.state[params[n]] = {
                    "momentum_buffer": None if buffer is None else buffer[k].clone()}

    def remove(self, indices: list[int]) -> None:
        keep = torch.tensor([k for k in range(len(self.step_count)) if k not in indices],
                            dtype=torch.long, device=self.step_count.device)
        for name in list(self.params):
            self.params[name] = self.params[name].detach()[keep].requires_grad_()
        for name in list(self.constants):
            self.constants[name] = self.constants[name][keep]
        for entry in self.state.values():
            for key in list(entry):
                entry[key] = entry[key][keep]
        self.step_count = self.step_count[keep]


def _state_step(member: RunProgress, params: dict, trainable: list[str]) -> float:
    state = member.optimizer.state.get(params[trainable[0]], {}) if trainable else {}
    step = state.get("step")
    return float(step) if step is not None else float(member.step)


__all__ = ["EnsembleTrainer", "MEMBER_FIELDS", "ensemble_key"]

"""The Trainer: one loop for every task and model.

Resumability: every ``checkpoint_interval`` steps the model, optimizer, RNG states
(torch's global one, used by dropout, and the data generator) and the metrics
line count are saved atomically. A killed run resumed from its last checkpoint
replays exactly the same batches and ends bit-identical on CPU.
"""

from __future__ import annotations

import datetime
import json
import math
import platform
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from sglab.config import RunConfig, TrainConfig, dump_yaml, load_yaml, validate
from sglab.errors import SglabError
from sglab.io import atomic_write_json, atomic_write_text, print_line
from sglab.models import build_model
from sglab.models.dropout import dropout_fields_on
from sglab.names import match_names
from sglab.provenance import describe, provenance, source_hash
from sglab.store import RunStore, read_metrics
from sglab.tasks import build_task
from sglab.tasks.base import training_loss
from sglab.train.checkpoints import load_checkpoint, load_state, save_checkpoint
from sglab.train.evaluate import evaluate, forward_batch, model_batch
from sglab.train.lock import RunLock
from sglab.train.schedule import (
    Printer,
    RunProgress,
    learning_rate,
    run_schedule,
)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SglabError("train.device=cuda but no CUDA device is available; use train.device=cpu")
    return torch.device(name)


RMSPROP_ALPHA, RMSPROP_EPS = 0.99, 1e-10


def processor(device: torch.device) -> dict[str, str]:
    """What the run computes on, for its summary: the GPU's name, or the CPU's model and the
    instruction set torch's CPU kernels use (``AVX512``, ``AVX2``, ...). Float rounding, and
    so a run's trajectory, can differ between two of them; on one machine a run repeats
    itself bit for bit."""
    if device.type == "cuda":
        return {"processor": torch.cuda.get_device_name(device)}
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"processor": name, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def decays(dim: int, cfg) -> bool:
    """Whether weight decay applies to a parameter of ``dim`` dimensions (train.weight_decay_on)."""
    return cfg.weight_decay_on == "all" or dim >= 2


def make_optimizer(model: torch.nn.Module, cfg, device: torch.device) -> torch.optim.Optimizer:
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if decays(p.dim(), cfg)]
    no_decay = [p for p in trainable if not decays(p.dim(), cfg)]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if device.type == "cuda" else {}
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, **extra)
    if cfg.optimizer == "rmsprop":  # the DNC authors' settings; decay hits every matrix
        return torch.optim.RMSprop(groups, lr=cfg.lr, alpha=RMSPROP_ALPHA, eps=RMSPROP_EPS,
                                   momentum=cfg.momentum)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, **extra)


def named_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters by name plus the weight views that modules expose (``weight_views()``),
    e.g. ``blocks.0.attn.W_Q``: the query rows of the fused qkv projection."""
    weights = dict(model.named_parameters())
    for name, module in model.named_modules():
        views = getattr(module, "weight_views", None)
        if callable(views):
            for key, tensor in views().items():
                weights[f"{name}.{key}" if name else key] = tensor
    return weights


def select_weights(model: torch.nn.Module, patterns: list[str]) -> list[str]:
    """Names of the weights matched by ``patterns`` (shell wildcards); unknown -> SglabError."""
    try:
        return match_names(list(named_weights(model)), patterns, "weight")
    except SglabError as exc:
        raise SglabError(f"train.weight_norms: {exc}") from None


@torch.no_grad()
def weight_norms(model: torch.nn.Module, names: list[str]) -> dict[str, float]:
    """Frobenius norms, keyed ``weight_norm/<name>``."""
    weights = named_weights(model)
    return {f"weight_norm/{n}": float(weights[n].detach().float().norm()) for n in names}


def pop_aux_loss(model: torch.nn.Module) -> torch.Tensor | None:
    """The auxiliary training loss a model left in ``model.aux_loss`` during its last forward
    pass (e.g. the ACT ponder loss), or None; the attribute is cleared so that the graph
    it holds is not kept alive."""
    loss = getattr(model, "aux_loss", None)
    if loss is not None:
        model.aux_loss = None
    return loss


@contextmanager
def forward_statistics(model: torch.nn.Module) -> Iterator[dict[str, float]]:
    """Averages of the statistics a model reports after each forward pass.

    A model may set ``model.statistics = {name: (sum, count)}`` in its forward; the dict
    yielded here is filled on exit with ``name: total sum / total count`` over every
    forward pass made inside the block (e.g. ``act_steps``, the mean ACT halting step).
    """
    totals: dict[str, list] = {}

    def collect(module, args, output):
        for name, (value, count) in getattr(module, "statistics", {}).items():
            total = totals.setdefault(name, [0, 0])
            total[0], total[1] = total[0] + value.detach(), total[1] + count.detach()

    means: dict[str, float] = {}
    handle = model.register_forward_hook(collect)
    try:
        yield means
    finally:
        handle.remove()
    means.update({name: float(value) / max(float(count), 1.0)
                  for name, (value, count) in totals.items()})


def compiled_for_training(model: torch.nn.Module) -> torch.nn.Module:
    """``train.compile`` for one run: ``torch.compile`` of the whole model, except for a
    model that steps through time (it has ``compile_step``, e.g. the DNC), which compiles
    its one-step function in place and is returned itself."""
    compile_step = getattr(model, "compile_step", None)
    return compile_step() if compile_step is not None else torch.compile(model)


class LoneStep:
    """The optimizer step of a single run: forward, loss, backward, clipping, step."""

    def __init__(self, run: RunProgress):
        cfg, device = run.cfg, run.device
        self.compiled = compiled_for_training(run.model) if cfg.compile else run.model
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16)
                         if cfg.precision == "bf16" and device.type == "cuda" else nullcontext())

    def step(self, runs: list[RunProgress], lrs: list[float]) -> tuple[list[torch.Tensor], list[int]]:
        (run,), (lr,) = runs, lrs
        cfg = run.cfg
        for group in run.optimizer.param_groups:
            group["lr"] = lr
        run.model.train()
        batch = model_batch(run.model, run.task.train_batch(cfg.batch_size, run.generator))
        batch = batch.to(run.device)
        with self.autocast:
            logits = forward_batch(self.compiled, batch)
        loss = training_loss(logits, batch.targets, cfg)
        aux_loss = pop_aux_loss(run.model)
        if aux_loss is not None:
            loss = loss + aux_loss
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
        run.optimizer.step()
        return [loss.detach()], [batch.input_ids.numel()]

    def sync(self, index: int) -> None:
        pass  # the model and optimizer are the run's own

    def remove(self, indices: list[int]) -> None:
        pass


@contextmanager
def cpu_settings(train: TrainConfig, device: torch.device) -> Iterator[None]:
    """On a CPU, torch's intra-op thread count set to ``train.threads`` and subnormal floats
    flushed to zero when ``train.flush_denormal``, inside the block; both restored after it."""
    before = torch.get_num_threads()
    on_cpu = device.type == "cpu"
    if train.threads and on_cpu:
        torch.set_num_threads(train.threads)
    flushing = on_cpu and train.flush_denormal and torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if flushing:
            torch.set_flush_denormal(False)
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


SELECTION_METRICS = ("exact_match", "accuracy")


def selection_split(config, task) -> str | None:
    """The split that picks the best checkpoint (see ``train.select_on``); None: no split
    fits (no checkpoint is selected)."""
    cfg = config.train
    splits = list(task.eval_splits)
    if cfg.select_on is not None:
        if cfg.select_on not in splits:
            raise SglabError(f"train.select_on={cfg.select_on!r} is not an evaluation split of "
                             f"task {task.config.name!r}; its splits: {', '.join(splits)}")
        return cfg.select_on
    target_split = (config.target_metric() or "").split("/", 1)[0]
    if "valid" in target_split and target_split in splits:
        return target_split
    return "iid_valid" if "iid_valid" in splits else None


def selection_metric(split: str | None, record: dict) -> str | None:
    """The key of ``split``'s exact match (or accuracy) in an evaluation record."""
    if split is None:
        return None
    for name in SELECTION_METRICS:
        if f"{split}/{name}" in record:
            return f"{split}/{name}"
    return None


def read_summary_file(run_dir: Path) -> dict | None:
    """The run's ``summary.json`` (None if there is none); a damaged one is a SglabError."""
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SglabError(f"{str(path)!r} is damaged ({type(exc).__name__}: {exc}); delete it "
                         "to resume the run from its last checkpoint") from None
    if not isinstance(summary, dict):
        raise SglabError(f"{str(path)!r} is damaged (not a JSON object); delete it to resume "
                         "the run from its last checkpoint")
    return summary


ENSEMBLE_SUFFIX = "-ensemble"


def execution_run_id(config: RunConfig, execution: str = "alone") -> str:
    """The run id of ``config`` trained ``alone`` or as an ``ensemble`` member.

    An ensemble member gets exactly the updates it would get alone, computed by batched
    kernels whose float rounding differs from a lone run's; training amplifies that, so
    the two are different results and are kept apart: ``<config run id>-ensemble``.
    """
    if execution not in ("alone", "ensemble"):
        raise ValueError(f"execution must be alone or ensemble, not {execution!r}")
    return config.run_id() + (ENSEMBLE_SUFFIX if execution == "ensemble" else "")


class Trainer:
    """Trains one RunConfig into ``runs_dir/<run_id>/`` and keeps the store index current.

    ``execution="ensemble"``: the run is (or was) trained as an ensemble member by
    :class:`~sglab.train.ensemble.EnsembleTrainer`; its run id says so
    (:func:`execution_run_id`)."""

    def __init__(self, config: RunConfig, runs_dir: str | Path, store=None,
                 printer: Printer | None = print_line, tag: str | None = None,
                 execution: str = "alone"):
        self.config = config
        self.runs_dir = Path(runs_dir)
        self.execution = execution
        self.run_id = execution_run_id(config, execution)
        self.select_on: str | None = None  # resolved against the task by prepare()
        self.run_dir = self.runs_dir / self.run_id
        self.store = store
        self.print = printer or (lambda line: None)
        self.tag = tag

    # ------------------------------------------------------------------ files
    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoints" / "last.pt"

    def read_summary(self) -> dict | None:
        return read_summary_file(self.run_dir)

    def _write_summary(self, summary: dict) -> None:
        atomic_write_json(self.run_dir / "summary.json", summary)
        if self.store is not None:
            self.store.record(self.run_dir, self.config, summary, tag=self.tag)

    # ------------------------------------------------------------------ main
    def run(self, resume: bool = True) -> dict:
        """Train to the end (or early stop). Returns the summary dict.

        ``resume=True`` continues from the last checkpoint if one exists; a finished
        run is not retrained. ``resume=False`` refuses to touch an existing run.
        """
        summary = self.read_summary()
        if summary and summary.get("status") == "finished":
            return self._already_finished(summary)
        if self.execution != "alone":
            raise ValueError("an ensemble member is trained by EnsembleTrainer")
        with RunLock(self.run_dir):
            summary = self.read_summary()  # a process before us may have finished it
            if summary and summary.get("status") == "finished":
                return self._already_finished(summary)
            if not resume and self.checkpoint_path.exists():
                raise SglabError(
                    f"run {self.run_id} already exists and is unfinished; "
                    f"pass --resume {self.run_id} to continue it"
                )
            device = resolve_device(self.config.train.device)
            with cpu_settings(self.config.train, device):
                run = self.prepare(device)
                stepper = LoneStep(run)
                return run_schedule([run], stepper, self.print)[self.run_id]

    def _already_finished(self, summary: dict) -> dict:
        self.print(f"[{self.run_id}] already finished; skipping (delete the run dir to retrain)")
        trained_by = summary.get("sglab") or {}
        if trained_by.get("source_hash") != source_hash():  # reused, never silently
            self.print(f"[{self.run_id}] warning: reusing a run trained by sglab "
                       f"{describe(trained_by or None)}; this is sglab {describe(provenance())} "
                       "(the same config id: the change did not touch its config; delete the "
                       "run dir to retrain it under this code)")
        if self.store is not None:
            self.store.record(self.run_dir, self.config, summary, tag=self.tag)
        return summary

    def prepare(self, device: torch.device, tasks: dict | None = None) -> RunProgress:
        """Build task, model, optimizer and data order, restore the last checkpoint if
        there is one and mark the run as running. ``tasks`` caches built tasks by config."""
        config = self.config
        task_key = json.dumps(config.task.model_dump(mode="json"), sort_keys=True)
        tasks = {} if tasks is None else tasks
        if task_key not in tasks:
            tasks[task_key] = build_task(config.task)
            tasks[task_key].check_model(config.model.network_config(self.runs_dir))
            if getattr(tasks[task_key], "data_note", None):
                self.print(f"[{self.run_id}] {tasks[task_key].data_note}")
        task = tasks[task_key]
        self.select_on = selection_split(config, task)
        torch.manual_seed(config.seed)
        model = build_model(config.model, len(task.vocab), task.max_length,
                            runs_dir=self.runs_dir, **task.model_kwargs()).to(device)
        optimizer = make_optimizer(model, config.train, device)
        generator = torch.Generator().manual_seed(config.seed)
        run = RunProgress(self, task, model, optimizer, generator, device,
                          select_weights(model, config.train.weight_norms))
        run.restored(self.restore(model, optimizer, generator, device))
        run.base = self.start(model, task, device, run.step, run.metric_lines)
        return run

    # ------------------------------------------------------------------ pieces
    # (also used by the EnsembleTrainer, which keeps each member's files the same way)
    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    def checkpoint_step(self) -> int:
        """The step of the last checkpoint (0 when there is none)."""
        if not self.checkpoint_path.exists():
            return 0
        return int(load_checkpoint(self.checkpoint_path, self.config.config_hash())["step"])

    def restore(self, model, optimizer, generator, device) -> dict | None:
        """Load the last checkpoint into model, optimizer and RNGs; None if there is none."""
        if not self.checkpoint_path.exists():
            return None
        state = load_checkpoint(self.checkpoint_path, self.config.config_hash(),
                                required=("step", "model", "optimizer", "torch_rng",
                                          "data_rng", "elapsed"))
        load_state(model, state["model"], self.checkpoint_path)
        load_state(optimizer, state["optimizer"], self.checkpoint_path)
        torch.set_rng_state(state["torch_rng"])
        generator.set_state(state["data_rng"])
        if device.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"])
        self.print(f"[{self.run_id}] resuming from step {state['step']}")
        return state

    def start(self, model, task, device, step: int, metric_lines: int) -> dict:
        """Prepare the run directory and mark the run as running; returns the summary base.

        The base records what :func:`build_model` needs besides the config (``vocab_size``,
        ``max_length``), so that :func:`load_model` rebuilds the model without the task data.
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.run_dir / "config.yaml", dump_yaml(self.config))
        self._truncate_metrics(self.metrics_path, metric_lines)
        cfg = self.config.train
        n_params = sum(p.numel() for p in model.parameters())
        base = {
            "run_id": self.run_id, "execution": self.execution,
            "task": self.config.task.name, "model": self.config.model.name,
            "seed": self.config.seed, "steps": cfg.steps, "parameters": n_params,
            "vocab_size": len(task.vocab), "max_length": task.max_length,
            **({"model_kwargs": task.model_kwargs()} if task.model_kwargs() else {}),
            "select_on": self.select_on, "target_metric": self.config.target_metric(),
            "device": str(device), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            **processor(device), "sglab": provenance(),
        }
        extended_from = (self.read_summary() or {}).get("extended_from")
        if extended_from:  # sglab.train.extend: the steps before this one came from that run
            base["extended_from"] = extended_from
        if self.execution == "ensemble" and dropout_fields_on(self.config.model):
            base["dropout_masks"] = ("drawn from this member's seed by a counter-based generator: "
                                     "statistically, not bitwise, equal to the lone run")
        self._write_summary({**base, "status": "running", "step": step})
        self.print(f"[{self.run_id}] {n_params:,} parameters on {device} "
                   f"({torch.get_num_threads()} threads), {cfg.steps} steps")
        return base

    def finish(self, base: dict, step: int, stopped_early: bool, seconds: float,
               tokens_per_second: float | None, steps_per_second: float | None,
               best: dict | None, target: dict | None, **extra) -> dict:
        """Write the final summary (with the last and best evaluation) and return it."""
        records = read_metrics(self.run_dir)
        summary = {
            **base, **extra, "status": "finished", "step": step, "stopped_early": stopped_early,
            "seconds": round(seconds, 3),
            "train_tokens_per_second": None if tokens_per_second is None else round(tokens_per_second, 1),
            "train_steps_per_second": None if steps_per_second is None else round(steps_per_second, 3),
            "final": records[-1] if records else None, "best": best, "target": target,
            "finished_at": datetime.datetime.now(datetime.UTC).isoformat(
                timespec="seconds"),
        }
        self._write_summary(summary)
        return summary

    def fail(self, base: dict, step: int, error: str) -> dict:
        """Write the summary of a run that cannot go on (status ``failed``) and return it."""
        summary = {**base, "status": "failed", "step": step, "error": error}
        self._write_summary(summary)
        return summary

    def interrupted(self, base: dict, step: int) -> None:
        """Mark the run as stopped by Ctrl-C at ``step`` (checkpointed there, resumable)."""
        self._write_summary({**base, "status": "interrupted", "step": step})

    def evaluation(self, run: RunProgress, last: bool):
        """Evaluate (a subset, or everything at the last step or when stopping), append one
        line to metrics.jsonl, print it, track best/target. Returns (best, target, stop)."""
        cfg = self.config.train
        task, model, device = run.task, run.model, run.device
        record = {"step": run.step, "lr": run.lr, "seconds": round(run.seconds(), 3)}
        model.eval()
        record.update(self.evaluate(task, model, device, None if last else cfg.eval_max_examples))
        if not last and cfg.eval_max_examples and self.should_stop(record):
            record.update(self.evaluate(task, model, device, None))  # final: all examples
        record.update(weight_norms(model, run.norm_names))
        run.write_record(record)
        best, target, stop = self.after_eval(record, run.best, run.target, model)
        shown = {k: v for k, v in record.items() if k.count("/") == 1}
        self.print(f"[{self.run_id}] eval @ {run.step}: " + ", ".join(
            f"{k} {v:.4f}" for k, v in shown.items()))
        return best, target, stop

    def after_eval(self, record, best, target, model):
        """Track the best checkpoint and the first crossing of the target; decide stopping."""
        improved, target = self.track(record, best, target)
        if improved is not best:
            best = improved
            save_checkpoint(self.run_dir / "checkpoints" / "best.pt",
                            {"step": record["step"], "model": model.state_dict(),
                             "config_hash": self.config.config_hash()})
        return best, target, self.should_stop(record)

    def track(self, record: dict, best: dict | None, target: dict | None
              ) -> tuple[dict | None, dict | None]:
        """The best-checkpoint and target records after evaluation ``record`` (``best`` is
        replaced only by a strictly better selection value; ``target`` is the first crossing)."""
        selection = selection_metric(self.select_on, record)
        if selection is not None and (best is None or record[selection] > best["value"]):
            best = {"metric": selection, "split": self.select_on, "value": record[selection],
                    "step": record["step"]}
        metric, threshold = self.config.target_metric(), self.config.train.target_threshold
        if target is None and metric is not None and record.get(metric, -math.inf) >= threshold:
            target = {"metric": metric, "threshold": threshold,
                      "step": record["step"], "seconds": record["seconds"]}
        return best, target

    def should_stop(self, record: dict) -> bool:
        cfg = self.config.train
        return bool(cfg.early_stop_metric and cfg.early_stop_threshold is not None
                    and record.get(cfg.early_stop_metric, -math.inf) >= cfg.early_stop_threshold)

    def evaluate(self, task, model, device, max_examples: int | None) -> dict:
        """Every eval split of the task (:func:`sglab.train.evaluate.evaluate`);
        ``max_examples=None`` scores all examples. The model's forward statistics
        (:func:`forward_statistics`) join as ``<split>/<name>``."""
        record = {}
        for split in task.eval_splits:
            with forward_statistics(model) as statistics:
                record.update(evaluate(model, task, split, self.config.train.eval_batch_size,
                                       max_examples, device))
            record.update({f"{split}/{name}": value for name, value in statistics.items()})
        return record

    def snapshot(self, model, step: int) -> None:
        """Model weights at ``step`` (train.snapshot_steps), loadable with load_trained."""
        save_checkpoint(self.run_dir / "checkpoints" / f"step_{step}.pt",
                        {"step": step, "model": model.state_dict(),
                         "config_hash": self.config.config_hash()})

    def save(self, run: RunProgress) -> None:
        """The last checkpoint: everything a resume needs to go on bit-identically."""
        save_checkpoint(self.checkpoint_path, {
            "step": run.step, "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(), "data_rng": run.generator.get_state(),
            "cuda_rng": torch.cuda.get_rng_state() if run.device.type == "cuda" else None,
            "elapsed": run.seconds(), "best": run.best, "target": run.target,
            "metric_lines": run.metric_lines, "config_hash": self.config.config_hash(),
            "loss_window": run.window_state(),
        })

    @staticmethod
    def _truncate_metrics(path: Path, keep_lines: int) -> None:
        """Drop evaluation records written after the checkpoint we resume from; a file that
        lost records the checkpoint counts is an error (resuming would leave a silent gap)."""
        if not path.exists():
            lines: list[str] = []
        else:
            lines = path.read_text().splitlines(keepends=True)
        complete = [line for line in lines if line.endswith("\n")]
        if len(complete) < keep_lines:
            raise SglabError(
                f"{str(path)!r} holds {len(complete)} whole records, but the checkpoint it "
                f"resumes from was written after {keep_lines}: records were lost (the file was "
                "cut or edited), and resuming would leave a gap in the run's history. Restore "
                "the file, or delete the run directory to train the run again")
        if len(complete) != keep_lines or len(lines) != len(complete):
            atomic_write_text(path, "".join(complete[:keep_lines]))



def load_run_config(run_dir: Path) -> RunConfig:
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise SglabError(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    return validate(RunConfig, load_yaml(path))


def train(config: RunConfig, runs_dir: str | Path, store=None, resume: bool = True,
          printer: Printer | None = print_line, tag: str | None = None) -> dict:
    """Build a Trainer and run it; the run is indexed in ``runs_dir``'s store unless
    another ``store`` is given."""
    store = RunStore(runs_dir) if store is None else store
    return Trainer(config, runs_dir, store=store, printer=printer, tag=tag).run(resume=resume)


__all__ = ["ENSEMBLE_SUFFIX", "LoneStep", "Trainer", "cpu_settings", "execution_run_id",
           "learning_rate", "load_model", "load_run_config", "load_trained", "resolve_device",
           "train"]


def load_trained(run_dir: str | Path, which: str = "last"):
    """(config, task, model) of a stored run, weights from ``checkpoints/<which>.pt``.
    Builds the task (its data); :func:`load_model` does without."""
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    task = build_task(config.task)
    model = build_model(config.model, len(task.vocab), task.max_length, runs_dir=run_dir.parent,
                        **task.model_kwargs())
    _load_weights(model, run_dir, which, config)
    return config, task, model


def load_model(run_dir: str | Path, which: str = "last") -> tuple[RunConfig, torch.nn.Module]:
    """(config, model) of a stored run, weights from ``checkpoints/<which>.pt``, built from
    the vocabulary size and maximum length recorded in ``summary.json`` (no task data is
    generated or loaded)."""
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    summary = read_summary_file(run_dir)
    if not summary or "vocab_size" not in summary or "max_length" not in summary:
        raise SglabError(f"{str(run_dir / 'summary.json')!r} does not record vocab_size and "
                         "max_length (a run from an older sglab); use load_trained, which "
                         "rebuilds the task to learn them")
    model = build_model(config.model, summary["vocab_size"], summary["max_length"],
                        runs_dir=run_dir.parent, **summary.get("model_kwargs", {}))
    _load_weights(model, run_dir, which, config)
    return config, model


def _load_weights(model: torch.nn.Module, run_dir: Path, which: str, config: RunConfig) -> None:
    path = run_dir / "checkpoints" / f"{which}.pt"
    load_state(model, load_checkpoint(path, config.config_hash())["model"], path)
    model.eval()

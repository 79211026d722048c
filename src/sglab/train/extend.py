"""Extend a finished run: the same run trained to more steps, without retraining the
steps it already has.

With a learning rate that does not depend on ``train.steps`` (``lr_schedule: constant``;
warm-up counts from the first step, not towards the last), the first S steps of an
N-step run are exactly those of the S-step run with the same config. :func:`extend_run`
copies a finished S-step run into the run directory of its config with ``train.steps =
N`` (a new run id), re-keys its checkpoints to that config and marks it interrupted at
step S; training it (``Trainer.run(resume=True)``) then goes on from step S, bit for bit
as the N-step run would. The result *is* that run: ``sglab run`` or ``sglab sweep`` with
``--set train.steps=N`` finds it finished. Its summary names the run it was extended
from, its ``seconds`` count both parts, and the source run is left untouched.

:func:`extend_shorter_twin` finds such a source for a run about to be trained: sweeps and
experiments (:func:`sglab.sweep.jobs.run_job`) train a lone run on from its finished
shorter twin instead of from step 0.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from sglab.config import RunConfig, dump_yaml, validate
from sglab.errors import SglabError
from sglab.io import atomic_write_json, atomic_write_text
from sglab.train.checkpoints import load_checkpoint, save_checkpoint
from sglab.train.loop import ENSEMBLE_SUFFIX, load_run_config, read_summary_file


def extend_run(runs_dir: str | Path, run_id: str, steps: int):
    """Prepare run ``run_id`` of ``runs_dir`` to be trained on to ``steps``; returns the
    extended run's config (train it with ``Trainer(config, runs_dir).run(resume=True)``).

    If the extended run's directory exists already (prepared before, partly trained or
    finished), nothing is copied and its config is returned. Anything that makes the
    extension differ from a longer run trained in one go is refused with a
    :class:`SglabError` that says why, before anything is written.
    """
    runs_dir = Path(runs_dir)
    source = runs_dir / run_id
    if not source.is_dir():
        raise SglabError(f"no run {run_id!r} in {str(runs_dir)!r}; list runs with `sglab runs`")
    if run_id.endswith(ENSEMBLE_SUFFIX):
        raise SglabError(f"{run_id!r} was trained as an ensemble member; only a run trained "
                         "alone can be extended (train the longer run with --set train.steps=N)")
    config = load_run_config(source)
    summary = read_summary_file(source) or {}
    done = config.train.steps
    if summary.get("status") != "finished":
        raise SglabError(f"run {run_id!r} is not finished (status "
                         f"{summary.get('status', 'unknown')!r}); finish it first with "
                         f"`sglab train --resume {run_id}`, then extend it")
    if summary.get("stopped_early"):
        raise SglabError(f"run {run_id!r} stopped early at step {summary.get('step')}; a "
                         "longer run of its config stops there too, so there is nothing to "
                         "extend")
    if steps <= done:
        raise SglabError(f"run {run_id!r} has {done} steps; extend it to more than that "
                         f"(--steps {steps} given)")
    train = config.train
    if train.lr_schedule != "constant":
        raise SglabError(f"run {run_id!r} uses lr_schedule {train.lr_schedule!r}, which decays "
                         "towards train.steps, so its steps differ from those of a longer run; "
                         f"train the {steps}-step run from scratch instead")
    if train.eval_max_examples is not None:
        raise SglabError(f"run {run_id!r} caps its evaluations (train.eval_max_examples "
                         f"{train.eval_max_examples}) except at its last step, where it scored "
                         f"every example; a {steps}-step run scores the cap there, so the two "
                         "would differ: train the longer run from scratch instead")
    for name in ("eval_interval", "log_interval"):
        interval = getattr(train, name)
        if done % interval:
            raise SglabError(
                f"run {run_id!r} ends at step {done}, which is not a multiple of its "
                f"train.{name} ({interval}); a {steps}-step run would not evaluate and log "
                "there as this run did, so the two would differ: train the longer run from "
                "scratch instead")
    data = config.to_dict()
    data["train"]["steps"] = steps
    extended = validate(RunConfig, data)
    target = runs_dir / extended.run_id()
    if target.exists():
        return extended
    staging = Path(tempfile.mkdtemp(prefix=f".extending-{extended.run_id()}-", dir=runs_dir))
    try:
        (staging / "checkpoints").mkdir()
        for path in sorted((source / "checkpoints").glob("*.pt")):  # re-keyed to the new config
            state = load_checkpoint(path, config.config_hash())
            state["config_hash"] = extended.config_hash()
            save_checkpoint(staging / "checkpoints" / path.name, state)
        for name in ("metrics.jsonl", "labels.json"):
            if (source / name).is_file():
                shutil.copy2(source / name, staging / name)
        atomic_write_text(staging / "config.yaml", dump_yaml(extended))
        atomic_write_json(staging / "summary.json", {
            "run_id": extended.run_id(), "status": "interrupted", "step": done,
            "extended_from": {"run_id": run_id, "step": done}})
        try:
            staging.rename(target)
        except OSError:  # another process prepared or started the run meanwhile
            if not target.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return extended


def extend_shorter_twin(runs_dir: str | Path, config: RunConfig) -> str | None:
    """If ``config``'s run has not started and a finished lone run of the same config with
    fewer steps can be extended to it exactly (:func:`extend_run`), prepare the extension
    from the longest such run and return that run's id; else None (nothing written)."""
    runs_dir = Path(runs_dir)
    if (runs_dir / config.run_id()).exists() or not runs_dir.is_dir():
        return None

    def without_steps(data: dict) -> dict:
        return {**data, "train": {k: v for k, v in data["train"].items() if k != "steps"}}

    wanted = without_steps(config.to_dict())
    prefix = config.run_id().rsplit("-", 1)[0] + "-"  # the id without its config hash
    twins = []
    for run_dir in runs_dir.glob(prefix + "*"):
        if run_dir.name.endswith(ENSEMBLE_SUFFIX) or not (run_dir / "config.yaml").is_file():
            continue
        try:
            twin = load_run_config(run_dir)
        except SglabError:
            continue
        if twin.train.steps < config.train.steps and without_steps(twin.to_dict()) == wanted:
            twins.append((twin.train.steps, run_dir.name))
    for _, run_id in sorted(twins, reverse=True):
        try:
            extend_run(runs_dir, run_id, config.train.steps)
        except SglabError:  # unfinished, stopped early, or not exactly extendable
            continue
        return run_id
    return None


__all__ = ["extend_run", "extend_shorter_twin"]

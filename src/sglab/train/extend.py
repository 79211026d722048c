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
from, its ``seconds`` count both parts, and the source run is left untouched. A run that
caps its evaluations (``train.eval_max_examples``) scored every example at its last step,
where the longer run scores the cap: that evaluation is redone with the cap from the last
checkpoint, and the best-checkpoint and target records with it. A run that stopped early
(``train.early_stop_metric``) is the longer run already: it is copied, finished, under the
longer config's id.

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
from sglab.io import atomic_write_json, atomic_write_text, json_line
from sglab.store import read_metrics, run_dir_of
from sglab.train.checkpoints import load_checkpoint, save_checkpoint
from sglab.train.loop import (
    ENSEMBLE_SUFFIX,
    Trainer,
    cpu_settings,
    load_run_config,
    load_trained,
    read_summary_file,
    resolve_device,
    select_weights,
    selection_split,
    weight_norms,
)


def extend_run(runs_dir: str | Path, run_id: str, steps: int):
    """Prepare run ``run_id`` of ``runs_dir`` to be trained on to ``steps``; returns the
    extended run's config (train it with ``Trainer(config, runs_dir).run(resume=True)``).

    If the extended run's directory exists already (prepared before, partly trained or
    finished), nothing is copied and its config is returned. Anything that makes the
    extension differ from a longer run trained in one go is refused with a
    :class:`SglabError` that says why, before anything is written.
    """
    runs_dir = Path(runs_dir)
    source = run_dir_of(runs_dir, run_id, "--extend")  # a run of this store, by its id
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
    if steps <= done:
        raise SglabError(f"run {run_id!r} has {done} steps; extend it to more than that "
                         f"(--steps {steps} given)")
    train = config.train
    if train.lr_schedule != "constant":
        raise SglabError(f"run {run_id!r} uses lr_schedule {train.lr_schedule!r}, which decays "
                         "towards train.steps, so its steps differ from those of a longer run; "
                         f"train the {steps}-step run from scratch instead")
    if summary.get("stopped_early"):
        if summary.get("step", done) >= done and train.eval_max_examples is not None:
            raise SglabError(f"run {run_id!r} stopped at its last step {done} on an "
                             "evaluation of every example, which a longer run does not make "
                             f"there; train the {steps}-step run from scratch instead")
        extended = _longer(config, steps)
        _write_extension(source, config, extended, {  # the longer run stops there too
            **summary, "run_id": extended.run_id(), "steps": steps,
            "extended_from": {"run_id": run_id, "step": summary["step"]}})
        return extended
    for name in ("eval_interval", "log_interval"):
        interval = getattr(train, name)
        if done % interval:
            raise SglabError(
                f"run {run_id!r} ends at step {done}, which is not a multiple of its "
                f"train.{name} ({interval}); a {steps}-step run would not evaluate and log "
                "there as this run did, so the two would differ: train the longer run from "
                "scratch instead")
    extended = _longer(config, steps)
    if (runs_dir / extended.run_id()).exists():
        return extended
    records = read_metrics(source, kind="all")
    rescored = (_rescore_last_evaluation(source, extended, records, run_id, done,
                                         summary.get("best"))
                if train.eval_max_examples is not None else None)
    _write_extension(source, config, extended, {
        "run_id": extended.run_id(), "status": "interrupted", "step": done,
        "extended_from": {"run_id": run_id, "step": done}}, rescored)
    return extended


def _longer(config: RunConfig, steps: int) -> RunConfig:
    data = config.to_dict()
    data["train"]["steps"] = steps
    return validate(RunConfig, data)


def _write_extension(source: Path, config: RunConfig, extended: RunConfig, summary: dict,
                     rescored: dict | None = None) -> None:
    """Copy ``source`` into the run directory of ``extended`` (unless it exists): its
    checkpoints re-keyed to that config, its metrics (``rescored``'s where given), labels,
    the config and ``summary``; written in a staging directory and renamed into place."""
    target = source.parent / extended.run_id()
    if target.exists():
        return
    done = config.train.steps
    staging = Path(tempfile.mkdtemp(prefix=f".extending-{extended.run_id()}-", dir=source.parent))
    try:
        (staging / "checkpoints").mkdir()
        for path in sorted((source / "checkpoints").glob("*.pt")):  # re-keyed to the new config
            state = load_checkpoint(path, config.config_hash())
            state["config_hash"] = extended.config_hash()
            if rescored is not None and path.name == "last.pt":
                state["best"], state["target"] = rescored["best"], rescored["target"]
                if rescored["best_is_last"]:
                    save_checkpoint(staging / "checkpoints" / "best.pt", {
                        "step": done, "model": state["model"],
                        "config_hash": extended.config_hash()})
            if rescored is not None and path.name == "best.pt" and rescored["best_is_last"]:
                continue  # written from last.pt
            save_checkpoint(staging / "checkpoints" / path.name, state)
        for name in ("metrics.jsonl", "labels.json"):
            if (source / name).is_file():
                shutil.copy2(source / name, staging / name)
        if rescored is not None:
            atomic_write_text(staging / "metrics.jsonl",
                              "".join(json_line(r) + "\n" for r in rescored["records"]))
        atomic_write_text(staging / "config.yaml", dump_yaml(extended))
        atomic_write_json(staging / "summary.json", summary)
        try:
            staging.rename(target)
        except OSError:  # another process prepared or started the run meanwhile
            if not target.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _rescore_last_evaluation(source: Path, extended: RunConfig, records: list[dict],
                             run_id: str, done: int, kept_best: dict | None) -> dict:
    """A run that caps its evaluations (``train.eval_max_examples``) scores every example at
    its last step only; at that step the longer run scores the cap, as at every other
    evaluation. Re-score the source's last checkpoint the way the longer run does there
    (:meth:`Trainer.evaluation` with ``last=False``, on the run's device and threads) and
    redo the best-checkpoint and target records over the evaluations with that line.
    ``kept_best``: the source's best-checkpoint record (its summary's). Returns the metric
    records, ``best``, ``target`` and whether the best checkpoint is the last one; raises
    SglabError where the longer run would stop there or would keep a best checkpoint the
    source overwrote."""
    steps = extended.train.steps
    evaluations = [k for k, r in enumerate(records) if r.get("kind", "eval") == "eval"]
    if not evaluations or records[evaluations[-1]]["step"] != done:
        raise SglabError(f"run {run_id!r} has no evaluation record at its last step "
                         f"{done}; train the {steps}-step run from scratch instead")
    last_line = records[evaluations[-1]]
    _, task, model = load_trained(source, "last")
    trainer = Trainer(extended, source.parent, printer=None)
    device = resolve_device(extended.train.device)
    with cpu_settings(extended.train, device):
        model.to(device)
        record = {"step": done, "lr": last_line["lr"], "seconds": last_line["seconds"]}
        record.update(trainer.evaluate(task, model, device, extended.train.eval_max_examples))
        if trainer.should_stop(record):  # as Trainer.evaluation: then score every example
            record.update(trainer.evaluate(task, model, device, None))
        record.update(weight_norms(model, select_weights(model, extended.train.weight_norms)))
    if trainer.should_stop(record):
        raise SglabError(f"run {run_id!r} reaches its early-stop threshold at its last step "
                         f"{done}, so a {steps}-step run stops there too: it is this run, "
                         "and there is nothing to extend")
    records = [*records[: evaluations[-1]], record, *records[evaluations[-1] + 1:]]
    trainer.select_on = selection_split(extended, task)
    best = target = None
    for line in (r for r in records if r.get("kind", "eval") == "eval"):
        best, target = trainer.track(line, best, target)
    kept = (kept_best or {}).get("step")  # the source's best.pt
    best_is_last = best is not None and best["step"] == done
    if best is not None and not best_is_last and best["step"] != kept:
        raise SglabError(
            f"run {run_id!r} scored every example at its last step {done} and so kept that "
            f"step as its best checkpoint; a {steps}-step run scores the cap there and keeps "
            f"step {best['step']}, whose weights this run no longer has: train the longer run "
            "from scratch instead")
    return {"records": records, "best": best, "target": target, "best_is_last": best_is_last}


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

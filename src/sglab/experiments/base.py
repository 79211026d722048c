"""Experiment protocol and runner.

An experiment has a spec file beside its module (:mod:`sglab.experiments.spec`): presets
(``quick``: about a minute, used in tests; ``default``: a 2-core CPU, about an hour at
most; ``paper``: the publication's sizes, for a GPU) and claims with the seed's numbers.
Its module turns a preset into labelled runs (:meth:`Experiment.arms`) and the finished
runs (a :class:`~sglab.experiments.runs.RunSet`) into measured values, tables and
figures; the runner judges the claims against the seed (:func:`~sglab.experiments.claims.
judge_all`). It holds no training code: runs go through the sweep runner and the Trainer.
"""

from __future__ import annotations

import copy
import datetime
import inspect
import platform
import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from sglab.config import RunConfig, apply_overrides, parse_override
from sglab.errors import SglabError
from sglab.experiments.claims import judge_all, summary_line
from sglab.experiments.runs import Arm, RunSet, build_arm_configs, finished_runs
from sglab.experiments.spec import (
    ExperimentParams,
    ExperimentSpec,
    load_spec,
    unshared,
    validate_params,
)
from sglab.provenance import describe, provenance
from sglab.report import write_report
from sglab.store import RunStore, write_labels
from sglab.sweep.backends import backend_session, check_backend, train_configs


class Experiment:
    name: str
    #: The typed parameters of a preset; an experiment that sets it reads its title,
    #: description, presets and claims from ``<name>.yaml`` beside its module.
    params_model: type[ExperimentParams] | None = None

    @cached_property
    def spec(self) -> ExperimentSpec:
        if self.params_model is None:
            raise SglabError(f"experiment {self.name!r} has no spec file")
        path = Path(inspect.getfile(type(self))).with_name(f"{self.name}.yaml")
        return load_spec(path, self.params_model, self.name)

    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def presets(self) -> dict[str, dict[str, Any]]:
        return self.spec.presets

    def preset(self, name: str, seeds: int | None = None,
               changes: list[str] | None = None) -> dict[str, Any]:
        """The preset's parameters; ``seeds`` replaces its seeds by ``0..seeds-1`` and each
        of ``changes`` (``KEY=VALUE``, dotted into nested parameters, the value read as YAML)
        replaces one parameter the preset already has. Checked against the params model."""
        if name not in self.presets:
            raise SglabError(f"experiment {self.name!r} has no preset {name!r}; "
                             f"presets: {', '.join(self.presets)}")
        params = unshared(self.presets[name])
        if seeds is not None:
            if seeds < 1:
                raise SglabError("--seeds must be at least 1")
            params["seeds"] = list(range(seeds))
        for text in changes or []:
            set_preset_param(params, text, f"{self.name}:{name}")
        if self.params_model is not None:
            params = validate_params(self.params_model, params, f"{self.name}:{name}")
        return params

    def arms(self, params: dict[str, Any]) -> list[Arm]:
        """Every run of the preset, labelled with its role."""
        raise NotImplementedError

    def stages(self, params: dict[str, Any]) -> list[Callable[[RunSet], list[Arm]]]:
        """The runs in the order they must train: each stage gets the finished runs of the
        stages before it (e.g. mask runs name the run id of the net they mask) and returns
        its arms. Default: one stage, :meth:`arms`."""
        return [lambda previous: self.arms(params)]

    def configs(self, params: dict[str, Any], overrides: list[str]) -> list[RunConfig]:
        """Every run of the preset (validated); user overrides on a grid axis are errors.
        An analysis-only experiment has none (``[]``)."""
        params, overrides = self.settings(params, overrides)
        return build_arm_configs(self.name, self.arms(params), overrides)

    def settings(self, params: dict[str, Any], overrides: list[str]
                 ) -> tuple[dict[str, Any], list[str]]:
        """(params, the overrides left for the run configs). By default every ``--set``
        goes to the runs; an analysis-only experiment applies them to its own settings
        here (validated) and leaves none."""
        return params, list(overrides)

    def check_data(self, configs: list[RunConfig]) -> None:
        """Raise SglabError if data the runs read is missing (e.g. a published data set's
        files), before anything is trained or written. Default: nothing to check."""

    def analyze(self, params: dict[str, Any], runs: RunSet, out_dir: Path) -> dict[str, Any]:
        """The finished runs -> ``{"measured": {claim id: Measured | NotMeasured},
        "sections": [...]}`` (every claim of the spec measured or said why not)."""
        raise NotImplementedError

    def base_config(self, preset: str) -> dict[str, Any]:
        """The config ``sglab train --preset EXPERIMENT:PRESET`` starts from: the preset's
        ``base`` if it has one, else its first run (without the seed)."""
        params = self.preset(preset)
        if "base" in params:
            return copy.deepcopy(params["base"])
        arms = self.arms(params)
        if not arms:
            raise SglabError(f"experiment {self.name!r} trains no runs (it only analyzes), so it "
                             f"has no config to train from; run it with `sglab run {self.name}`")
        first = arms[0]
        return apply_overrides(first.base, dict(first.overrides))


def set_preset_param(params: dict[str, Any], text: str, where: str) -> None:
    """Apply ``KEY=VALUE`` to a preset's parameters in place; only keys the preset has."""
    path, value = parse_override(text)
    node = params
    for depth, key in enumerate(path):
        if not isinstance(node, dict) or key not in node:
            known = ", ".join(sorted(node)) if isinstance(node, dict) else "none (not a mapping)"
            raise SglabError(f"--param {text}: preset {where} has no parameter "
                             f"{'.'.join(path[:depth + 1])!r}; keys there: {known}")
        if depth == len(path) - 1:
            node[key] = value
        node = node[key]


def first_stage_configs(experiment: Experiment, preset: str, seeds: int | None = None,
                        params: list[str] | None = None,
                        overrides: list[str] | None = None) -> list[RunConfig]:
    """The run configs of the preset's first stage: every run of a one-stage experiment;
    the base runs of a staged one (later stages depend on the runs before them)."""
    params, overrides = experiment.settings(experiment.preset(preset, seeds, params),
                                            list(overrides or []))
    stages = experiment.stages(params)
    if not stages:
        return []
    return build_arm_configs(experiment.name, stages[0](finished_runs([], [], [], Path("."))),
                             overrides)


def run_experiment(experiment: Experiment, preset: str, out_dir: str | Path,
                   runs_dir: str | Path, workers: int | None = None, threads: int | None = None,
                   seeds: int | None = None, overrides: list[str] | None = None,
                   printer=print, ensemble: bool = True, backend: str = "local",
                   address: str | None = None, params: list[str] | None = None) -> dict[str, Any]:
    """Train (or reuse) every run of the preset, analyze, write results.json + report.html.

    ``params`` change the preset's own parameters (``KEY=VALUE``, e.g. the models it
    compares), ``overrides`` the run configs. ``backend`` picks where the runs train
    (``local`` process pool or ``ray``; see :mod:`sglab.sweep.backends`); the analysis
    always runs here."""
    started = time.perf_counter()
    started_at = datetime.datetime.now(datetime.UTC)
    check_backend(backend, address, workers)
    params, overrides = experiment.settings(experiment.preset(preset, seeds, params),
                                            list(overrides or []))
    out_dir, runs_dir = Path(out_dir), Path(runs_dir)
    arms, configs, summaries = [], [], []
    with backend_session(backend, address):
        for stage in experiment.stages(params):
            stage_arms = stage(finished_runs(arms, configs, summaries, runs_dir))
            stage_configs = build_arm_configs(experiment.name, stage_arms, overrides)
            experiment.check_data(stage_configs)
            stage_summaries = train_configs(
                stage_configs, runs_dir, backend=backend, address=address, workers=workers,
                threads=threads, tag=f"{experiment.name}/{preset}",
                quiet=params.get("quiet", False), printer=printer, ensemble=ensemble)
            arms, configs = arms + stage_arms, configs + stage_configs
            summaries = summaries + stage_summaries
            if any(s.get("status") != "finished" for s in stage_summaries):
                break
    failed = [s for s in summaries if s.get("status") != "finished"]
    if failed:
        raise SglabError(f"{len(failed)} run(s) failed, e.g. {failed[0]['run_id']}: "
                         f"{failed[0].get('error', 'unknown error')}. Fix the cause and rerun; "
                         "finished runs are reused.")
    store = RunStore(runs_dir) if configs else None
    for arm, config, summary in zip(arms, configs, summaries):
        write_labels(runs_dir / summary["run_id"], experiment.name, arm.labels)
        store.record(runs_dir / summary["run_id"], config, summary)
    if not configs and threads:  # analysis only: it runs here, with the threads asked for
        import torch

        torch.set_num_threads(threads)
    printer(f"{experiment.name}: analyzing {len(summaries)} runs" if summaries
            else f"{experiment.name}: no runs to train; analyzing")
    analysis = experiment.analyze(params, finished_runs(arms, configs, summaries, runs_dir),
                                  out_dir)
    claims = [c.to_dict() for c in judge_all(experiment.spec.claims, analysis["measured"])]
    results = {
        "experiment": experiment.name, "title": experiment.title, "preset": preset,
        "description": experiment.description, "claims": claims,
        "verdicts": summary_line(claims),
        "sections": analysis.get("sections", []), "runs": [s["run_id"] for s in summaries],
        "params": params, "seconds": round(time.perf_counter() - started, 1),
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "labels": [{"run_id": s["run_id"], "seed": c.seed, **arm.labels, **run_metrics(s)}
                   for arm, c, s in zip(arms, configs, summaries)],
        "provenance": run_provenance(summaries, started_at),
    }
    path = write_report(results, out_dir)
    for claim in claims:
        printer(f"  [{claim['verdict']}] {claim['id']}: {claim['evidence']}")
    printer(f"{experiment.name}: report written to {path}")
    return results


def run_metrics(summary: dict) -> dict[str, Any]:
    """A run's headline metrics for results.json: its steps and the split-level metrics
    (``iid_test/exact_match``, not per-group breakdowns) at the last evaluation and at the
    selected checkpoint."""
    def headline(record: dict | None) -> dict[str, Any]:
        return {k: v for k, v in (record or {}).items() if k.count("/") == 1}

    return {"steps": summary.get("step"), "final": headline(summary.get("final")),
            **({"selected": {"step": summary["best"].get("step"), **headline(summary["best"])}}
               if summary.get("best") else {})}


def run_provenance(summaries: list[dict], started_at: datetime.datetime) -> dict[str, Any]:
    """What produced a result: this sglab and machine, and for the runs how many this command
    trained and how many it found finished in the run store, under which sglab."""
    import torch

    from sglab.train.loop import processor

    trained, reused = [], {}
    for summary in summaries:
        finished_at = summary.get("finished_at")
        if finished_at and datetime.datetime.fromisoformat(finished_at) >= started_at:
            trained.append(summary["run_id"])
        else:
            trained_by = describe(summary.get("sglab"))
            reused[trained_by] = reused.get(trained_by, 0) + 1
    processors = sorted({s.get("processor", "unrecorded") for s in summaries})
    return {"sglab": provenance(), "python": platform.python_version(),
            "torch": torch.__version__, "processors": processors,
            # where this command ran the analysis (all of an analysis-only experiment's work)
            "analyzed_on": processor(torch.device("cpu"))["processor"],
            "runs_trained": len(trained), "runs_reused": sum(reused.values()),
            "reused_trained_by": reused,
            # the runs' own training time, summed: what the result cost whether its runs were
            # trained by this command or reused (the command's wall time is "seconds")
            "run_seconds": round(sum(s.get("seconds") or 0 for s in summaries), 1)}


__all__ = ["Arm", "Experiment", "RunSet", "run_experiment"]

"""Experiment protocol and runner.

An experiment declares presets (``quick``: about a minute, used in tests;
``default``: at most ~30 minutes on a 2-core CPU, where its claims are expected
to hold; ``paper``: the publication's sizes, for a GPU), turns a preset into run
configs, and turns finished runs into claims, tables and figures. It holds no
training code: runs go through the sweep runner and the Trainer.
"""

from __future__ import annotations

import copy
import datetime
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sglab.config import RunConfig
from sglab.errors import SglabError
from sglab.report import write_report
from sglab.sweep.local import run_configs


@dataclass
class Claim:
    """A sentence from the paper, the measured evidence, and whether it held.

    ``passed`` is None when the claim cannot be measured at this preset (the
    evidence says why).
    """

    id: str
    statement: str
    evidence: str = ""
    passed: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Experiment(ABC):
    name: str
    title: str
    description: str
    presets: dict[str, dict[str, Any]]

    def preset(self, name: str, seeds: int | None = None) -> dict[str, Any]:
        if name not in self.presets:
            raise SglabError(f"experiment {self.name!r} has no preset {name!r}; "
                             f"presets: {', '.join(self.presets)}")
        params = copy.deepcopy(self.presets[name])
        if seeds is not None:
            if seeds < 1:
                raise SglabError("--seeds must be at least 1")
            params["seeds"] = list(range(seeds))
        return params

    @abstractmethod
    def configs(self, params: dict[str, Any], overrides: list[str]) -> list[RunConfig]:
        """Every run of the preset (validated)."""

    @abstractmethod
    def analyze(self, params: dict[str, Any], configs: list[RunConfig], summaries: list[dict],
                runs_dir: Path, out_dir: Path) -> dict[str, Any]:
        """Return {"claims": [Claim, ...], "sections": [...]} from finished runs."""


def run_experiment(experiment: Experiment, preset: str, out_dir: str | Path,
                   runs_dir: str | Path, workers: int | None = None, threads: int | None = None,
                   seeds: int | None = None, overrides: list[str] | None = None,
                   printer=print, ensemble: bool = True) -> dict[str, Any]:
    """Train (or reuse) every run of the preset, analyze, write results.json + report.html."""
    started = time.perf_counter()
    params = experiment.preset(preset, seeds)
    configs = experiment.configs(params, list(overrides or []))
    out_dir, runs_dir = Path(out_dir), Path(runs_dir)
    summaries = run_configs(configs, runs_dir, workers=workers, threads=threads,
                            tag=f"{experiment.name}/{preset}", quiet=params.get("quiet", False),
                            printer=printer, ensemble=ensemble)
    failed = [s for s in summaries if s.get("status") != "finished"]
    if failed:
        raise SglabError(f"{len(failed)} run(s) failed, e.g. {failed[0]['run_id']}: "
                         f"{failed[0].get('error', 'unknown error')}. Fix the cause and rerun; "
                         "finished runs are reused.")
    printer(f"{experiment.name}: analyzing {len(summaries)} runs")
    analysis = experiment.analyze(params, configs, summaries, runs_dir, out_dir)
    claims = [c.to_dict() for c in analysis["claims"]]
    results = {
        "experiment": experiment.name, "title": experiment.title, "preset": preset,
        "description": experiment.description, "claims": claims,
        "sections": analysis.get("sections", []), "runs": [s["run_id"] for s in summaries],
        "params": params, "seconds": round(time.perf_counter() - started, 1),
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    path = write_report(results, out_dir)
    for claim in claims:
        word = {True: "PASS", False: "FAIL"}.get(claim["passed"], "N/A")
        printer(f"  [{word}] {claim['id']}: {claim['evidence']}")
    printer(f"{experiment.name}: report written to {path}")
    return results

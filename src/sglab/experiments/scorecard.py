"""The reproduction scorecard: every claim of every experiment against the seed's numbers.

:func:`collect` reads the committed results (``results/<experiment>/<preset>/results.json``,
written by ``sglab run``); :func:`render_markdown` turns them into ``docs/scorecard.md`` and
:func:`render_html` into a page with the same table and a bar per verdict. The output depends
on the result files alone (no clock, no machine), so a test can regenerate it and compare.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglab.errors import SglabError
from sglab.experiments.claims import Verdict, format_value, verdict_counts

PRESET_ORDER = ("default", "paper", "quick")
VERDICT_COLORS = {"REPRODUCES": "#137333", "QUALITATIVE": "#a56300", "FAILS": "#b3261e",
                  "NOT MEASURED": "#888888"}


@dataclass
class ExperimentResult:
    experiment: str
    preset: str
    results: dict[str, Any]

    @property
    def claims(self) -> list[dict[str, Any]]:
        return self.results.get("claims", [])

    @property
    def judged(self) -> bool:
        """Whether the claims carry verdicts against the seed (results of older releases
        carry pass / fail only)."""
        return all("verdict" in claim for claim in self.claims)

    def counts(self) -> dict[str, int]:
        return verdict_counts(self.claims) if self.judged else {}

    def seeds(self) -> int:
        return len(self.results.get("params", {}).get("seeds") or [])

    def runs(self) -> str:
        """``27 / 0``: runs trained by the command that wrote the result / reused."""
        provenance = self.results.get("provenance") or {}
        if "runs_trained" not in provenance:
            return str(len(self.results.get("runs", []))) + " / ?"
        return f"{provenance['runs_trained']} / {provenance['runs_reused']}"

    def run_time(self) -> str:
        """The runs' training time summed; for an analysis-only result (no runs), the time
        of the analysis itself, marked so."""
        provenance = self.results.get("provenance") or {}
        seconds, suffix = provenance.get("run_seconds"), ""
        trains_nothing = provenance.get("runs_trained") == provenance.get("runs_reused") == 0
        if trains_nothing and self.results.get("seconds") is not None:
            seconds, suffix = self.results["seconds"], " (analysis)"
        if seconds is None:
            return "-"
        return (f"{seconds / 3600:.1f} h" if seconds >= 3600
                else f"{seconds / 60:.0f} min") + suffix


def collect(results_dir: Path) -> dict[str, list[ExperimentResult]]:
    """``{experiment: [its results, default first]}`` for every results.json under
    ``results_dir`` (``<experiment>/<preset>/results.json``)."""
    found: dict[str, list[ExperimentResult]] = {}
    for path in sorted(Path(results_dir).glob("*/*/results.json")):
        try:
            results = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SglabError(f"cannot read {path}: {exc}; rerun the experiment or delete the "
                             "file") from None
        experiment, preset = path.parent.parent.name, path.parent.name
        found.setdefault(experiment, []).append(ExperimentResult(experiment, preset, results))
    for entries in found.values():
        entries.sort(key=lambda r: PRESET_ORDER.index(r.preset)
                     if r.preset in PRESET_ORDER else len(PRESET_ORDER))
    return found


def short_summary(counts: dict[str, int]) -> str:
    """``3 reproduce, 1 qualitative, 1 fails`` (verdicts with no claim left out; a verb in
    the singular after 1)."""
    words = {"REPRODUCES": ("reproduces", "reproduce"), "QUALITATIVE": ("qualitative",) * 2,
             "FAILS": ("fails", "fail"), "NOT MEASURED": ("not measured",) * 2}
    parts = [f"{counts[v]} {words[v][counts[v] != 1]}" for v in words if counts.get(v)]
    return ", ".join(parts) or "no claims"


def _ours(claim: dict[str, Any]) -> str:
    """Our values the seed's references name (mean ± std, or the median, n seeds), else
    every value."""
    names = list(claim.get("references") or {}) or list(claim.get("values") or {})
    parts = []
    for name in names:
        value = claim["values"].get(name)
        if isinstance(value, dict) and "median" in value:  # a claim judged on medians
            parts.append(f"{name} median {value['median']:.3g} (n={len(value['seeds'])})")
        elif isinstance(value, dict) and "seeds" in value:
            spread = f" ± {value['std']:.2f}" if value.get("std") is not None else ""
            parts.append(f"{name} {value['mean']:.3g}{spread} (n={len(value['seeds'])})")
        elif isinstance(value, (int, float, bool)):
            parts.append(f"{name} {format_value(value)}")
        elif value is not None:
            parts.append(f"{name} {format_value(value)}")
    return "; ".join(parts) or "-"


def _seeds_value(claim: dict[str, Any]) -> str:
    refs = claim.get("references") or {}
    parts = []
    for name, ref in refs.items():
        spread = f" ± {ref['std']:g}" if ref.get("std") is not None else ""
        seeds = f" (n={ref['seeds']})" if ref.get("seeds") else ""
        parts.append(f"{name} {ref['mean']:g}{spread}{seeds}")
    return "; ".join(parts) or "effect only"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _setup_lines(scales: dict[str, Any]) -> list[str]:
    """The setup table: what each `default` scales down, and what the seed's setup costs."""
    if not scales:
        return []
    lines = ["## Setup", "",
             "What `default` scales down against the seed's setup, the smallest run with the "
             "seed's mechanism on 2 CPU cores, and `paper` on one GPU (from the experiment's "
             "spec).", "",
             "| experiment | `default` against the seed | smallest faithful run, 2 CPU cores | "
             "`paper`, one GPU |", "|---|---|---|---|"]
    for name, scale in scales.items():
        if scale is None:
            lines.append(f"| {name} | - | - | - |")
        else:
            lines.append(f"| {name} | {_cell(scale.default)} | {_cell(scale.faithful_cpu)} | "
                         f"{_cell(scale.paper_gpu)} |")
    return lines + [""]


def render_markdown(found: dict[str, list[ExperimentResult]], registered: list[str],
                    scales: dict[str, Any] | None = None) -> str:
    """The scorecard page; ``scales``: ``{experiment: ScaleSpec}`` for the setup table."""
    lines = ["# Reproduction scorecard", "",
             "Generated by `sglab scorecard` from the committed results in `results/`; do not "
             "edit by hand.", "Each claim is the source's statement with the source's numbers, "
             "judged over seeds: REPRODUCES (the effect holds and our mean is within tolerance "
             "of the source's), QUALITATIVE (the effect holds, the numbers are off), FAILS (the "
             "effect does not hold), NOT MEASURED (with the reason).", ""]
    totals = {v.value: 0 for v in Verdict}
    rows = []
    for name in registered:
        entries = [r for r in found.get(name, []) if r.judged]
        if not entries:
            scale = (scales or {}).get(name)
            why = (f"not measured: needs {_cell(scale.user_files)}"
                   if scale is not None and scale.user_files else "no judged result committed")
            rows.append(f"| {name} | - | - | - | - | - | {why} |")
            continue
        for result in entries:
            counts = result.counts()
            if result.preset == "default":
                for verdict, count in counts.items():
                    totals[verdict] += count
            rows.append(f"| {name} | {result.preset} | {result.results.get('created', '-')[:10]} "
                        f"| {result.seeds()} | {result.runs()} | {result.run_time()} "
                        f"| {short_summary(counts)} |")
    lines += ["## Summary", "",
              f"Over the `default` results: {', '.join(f'{n} {v}' for v, n in totals.items())}.",
              "", "Runs: trained by the command that wrote the result / reused from the run store "
              "(trained earlier with the same config id). Run time: the runs' own training "
              "time, summed (one thread each); for an experiment that trains nothing, its "
              "analysis's.", "",
              "| experiment | preset | measured | seeds | runs | run time | verdicts |",
              "|---|---|---|---|---|---|---|", *rows, "", *_setup_lines(scales or {}),
              "## Claims", "",
              "| experiment | claim | source | the source's numbers | ours | verdict |",
              "|---|---|---|---|---|---|"]
    for name in registered:
        for result in found.get(name, []):
            if not result.judged:
                continue
            for claim in result.claims:
                lines.append(
                    f"| {name} ({result.preset}) | `{claim['id']}` | {_cell(claim['source'])} | "
                    f"{_cell(_seeds_value(claim))} | {_cell(_ours(claim))} | "
                    f"**{claim['verdict']}** |")
    return "\n".join(lines) + "\n"


def render_html(found: dict[str, list[ExperimentResult]], registered: list[str]) -> str:
    """The summary with a bar per verdict, and the claims table."""
    rows = []
    for name in registered:
        for result in found.get(name, []):
            if not result.judged:
                continue
            counts = result.counts()
            total = sum(counts.values()) or 1
            bar = "".join(
                f"<span title='{v}: {n}' style='display:inline-block;height:1em;"
                f"width:{12 * n}em;max-width:{100 * n / total:.0f}%;"
                f"background:{VERDICT_COLORS[v]}'></span>"
                for v, n in counts.items() if n)
            rows.append(f"<tr><td>{html.escape(name)}</td><td>{result.preset}</td>"
                        f"<td>{html.escape(short_summary(counts))}</td><td style='width:40%'>"
                        f"{bar}</td></tr>")
    claims = []
    for name in registered:
        for result in found.get(name, []):
            for claim in result.claims if result.judged else []:
                claims.append(
                    "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
                        f"{name} ({result.preset})", claim["id"], claim["source"],
                        _seeds_value(claim), _ours(claim)))
                    + f"<td style='color:{VERDICT_COLORS[claim['verdict']]};font-weight:600'>"
                      f"{claim['verdict']}</td></tr>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:2em auto}table{border-collapse:"
             "collapse}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;"
             "vertical-align:top}")
    return ("<!doctype html><html><head><meta charset='utf-8'><title>sglab scorecard</title>"
            f"<style>{style}</style></head><body><h1>Reproduction scorecard</h1>"
            "<table><tr><th>experiment</th><th>preset</th><th>verdicts</th><th></th></tr>"
            + "".join(rows) + "</table><h2>Claims</h2><table><tr><th>experiment</th>"
            "<th>claim</th><th>source</th><th>the source's numbers</th><th>ours</th>"
            "<th>verdict</th></tr>" + "".join(claims) + "</table></body></html>\n")


def experiment_summaries(found: dict[str, list[ExperimentResult]]) -> dict[str, str]:
    """``{experiment: short summary of its default result}`` (the README's verdict column)."""
    return {name: short_summary(r.counts()) for name, entries in found.items()
            for r in entries if r.preset == "default" and r.judged}


__all__ = ["ExperimentResult", "collect", "experiment_summaries", "render_html",
           "render_markdown", "short_summary"]

"""Reports for a single run directory and for a sweep."""

from __future__ import annotations

import json
from pathlib import Path

from sglab.report.figures import metric_curves, new_figure, save_figure
from sglab.report.html import write_report
from sglab.store import read_metrics


def run_report(run_dir: Path, out_dir: Path) -> Path:
    """Learning curves and final metrics of one run."""
    import yaml

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    records = read_metrics(run_dir)
    accuracy_keys = sorted({k for r in records for k in r if k.endswith("/exact_match")})
    loss_keys = sorted({k for r in records for k in r if k.endswith("/loss")})
    fig, axes = new_figure(10, 3.6, ncols=2)
    metric_curves(axes[0][0], records, accuracy_keys)
    axes[0][0].set_ylabel("exact match")
    axes[0][0].legend(fontsize=8)
    metric_curves(axes[0][1], records, loss_keys)
    axes[0][1].set_yscale("log")
    axes[0][1].set_ylabel("answer-token loss")
    axes[0][1].legend(fontsize=8)
    figure = save_figure(fig, out_dir, "curves")
    final = summary.get("final") or {}
    results = {
        "title": f"run {summary['run_id']}",
        "sections": [{
            "title": "Final metrics",
            "tables": [{"columns": ["metric", "value"],
                        "rows": [[k, v] for k, v in sorted(final.items())]},
                       {"columns": ["field", "value"],
                        "rows": [[k, json.dumps(v) if isinstance(v, dict) else v]
                                 for k, v in summary.items() if k != "final"]}],
            "figures": [{"file": figure, "title": "learning curves"}],
        }],
        "config": yaml.safe_load((run_dir / "config.yaml").read_text()),
    }
    return write_report(results, out_dir)


def sweep_report(spec, configs, summaries: list[dict], out_dir: Path,
                 source: dict | None = None) -> Path:
    """The report of a sweep: a row per run. ``source`` (the sweep's name, file, preset and
    --set) is recorded under ``sweep``, so that another sweep does not overwrite it."""
    keys = list(spec.grid)
    rows = []
    for config, summary in zip(configs, summaries):
        cell = []
        for key in keys:  # a grid key may name a setting the old way (model.pos_encoding)
            node = config.value_at(key)
            cell.append(json.dumps(node) if isinstance(node, list) else node)
        final = summary.get("final") or {}
        target = config.target_metric()
        rows.append([*cell, config.seed, summary["run_id"], summary.get("status"), target or "-",
                     final.get(target, "-"), (summary.get("target") or {}).get("step", "-")])
    results = {
        "title": f"sweep {spec.name}", "runs": [s["run_id"] for s in summaries],
        "sections": [{"title": "Runs", "tables": [{
            "columns": [*keys, "seed", "run", "status", "target metric", "final value",
                        "step to target"],
            "rows": rows}]}],
        "config": spec.model_dump(),
        **({"sweep": source} if source is not None else {}),
    }
    return write_report(results, Path(out_dir))

"""The ``sglab`` command line. It parses, calls library functions and prints.

Errors a user can cause are printed without a traceback and exit with status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from sglab.errors import SglabError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="sglab: train small networks on compositional tasks and test whether "
                       "they generalize systematically.")

RunsDir = Annotated[Path | None, typer.Option(
    "--runs-dir", help="Run store directory (default: $SGLAB_RUNS_DIR or ./runs).")]
Sets = Annotated[list[str] | None, typer.Option(
    "--set", help="Dotted override KEY=VALUE, e.g. model.pos_encoding=none (repeatable).")]
Workers = Annotated[int | None, typer.Option(
    "--workers", min=1, help="Worker processes (default: one per core).")]
Threads = Annotated[int | None, typer.Option(
    "--threads", min=1, help="torch threads per worker (default: cores / workers).")]
NoEnsemble = Annotated[bool, typer.Option(
    "--no-ensemble", help="Train every run in its own process instead of batching compatible "
                          "runs (same shapes, different seeds/scalars) into ensembles.")]
Backend = Annotated[str, typer.Option(
    help="local (process pool on this machine) | ray (a Ray cluster; pip install "
         "'sglab\\[ray]')")]
Address = Annotated[str | None, typer.Option(
    help="Ray cluster address (ray backend; default: start a local Ray instance).")]


def _out(line: str) -> None:
    print(line, flush=True)


@app.command("list")
def list_cmd(what: Annotated[str, typer.Argument(help="tasks | models | experiments | all")] = "all"):
    """List registered tasks, models and experiments."""
    from sglab import registry

    kinds = ["tasks", "models", "experiments"] if what == "all" else [what]
    for kind in kinds:
        if kind not in ("tasks", "models", "experiments"):
            raise SglabError(f"cannot list {what!r}; choose tasks, models, experiments or all")
        _out(f"{kind}:")
        if kind == "experiments":
            for name, exp in sorted(registry.experiments().items()):
                _out(f"  {name:20s} {exp.title}  (presets: {', '.join(exp.presets)})")
        else:
            for name, entry in sorted(registry.entries(kind[:-1]).items()):
                _out(f"  {name:20s} {entry.description}")


@app.command()
def train(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML run config.")] = None,
    task: Annotated[str | None, typer.Option(help="Task name (same as --set task.name=...).")] = None,
    model: Annotated[str | None, typer.Option(help="Model name.")] = None,
    set_: Sets = None,
    preset: Annotated[str | None, typer.Option(
        help="Start from a named experiment preset's base config, as EXPERIMENT:PRESET "
             "(e.g. symmetry:quick); without a single base, the preset's first run.")] = None,
    resume: Annotated[str | None, typer.Option(help="Continue the run with this id.")] = None,
    extend: Annotated[str | None, typer.Option(
        help="Train this finished run on to --steps (a constant-lr run only): the result is "
             "the run of its config with train.steps = --steps, under that run's id.")] = None,
    steps: Annotated[int | None, typer.Option(help="With --extend: the new last step.")] = None,
    runs_dir: RunsDir = None,
    out: Annotated[Path | None, typer.Option(help="Also write report.html + results.json here.")] = None,
):
    """Train one run (or resume one with --resume RUN_ID, or train a finished one on with
    --extend RUN_ID --steps N)."""
    from sglab.config import build_run_config, load_yaml
    from sglab.store import RunStore, runs_dir_from
    from sglab.train.loop import ENSEMBLE_SUFFIX, Trainer, load_run_config

    root = runs_dir_from(str(runs_dir) if runs_dir else None)
    if (extend is None) != (steps is None):
        raise SglabError("--extend RUN_ID and --steps N go together: "
                         "`sglab train --extend RUN_ID --steps N`")
    if extend:
        if config or task or model or set_ or preset or resume:
            raise SglabError("--extend takes the config stored with the run and changes only "
                             "train.steps; drop the other options")
        from sglab.train.extend import extend_run

        cfg = extend_run(root, extend, steps)
        _out(f"extending {extend} to {steps} steps as run {cfg.run_id()}")
        resume = cfg.run_id()
    elif resume:
        if config or task or model or set_ or preset:
            raise SglabError("--resume takes the config stored with the run; drop the other options")
        run_dir = root / resume
        if not run_dir.is_dir():
            raise SglabError(f"no run {resume!r} in {str(root)!r}; list runs with `sglab runs`")
        cfg = load_run_config(run_dir)
    else:
        base: dict = load_yaml(config) if config else {}
        if preset:
            base = _preset_base(preset, base)
        extra = list(set_ or [])
        if task:
            extra.insert(0, f"task.name={task}")
        if model:
            extra.insert(0, f"model.name={model}")
        cfg = build_run_config(base, extra)
    if resume and resume.endswith(ENSEMBLE_SUFFIX):  # an ensemble member goes on as one
        from sglab.train.ensemble import EnsembleTrainer

        trainer = Trainer(cfg, root, execution="ensemble")
        summary = EnsembleTrainer([cfg], root, store=RunStore(root), printer=_out).run()[0]
    else:
        trainer = Trainer(cfg, root, store=RunStore(root), printer=_out)
        summary = trainer.run(resume=bool(resume))
    if summary["status"] == "failed":
        raise SglabError(f"run {summary['run_id']} failed at step {summary['step']}: "
                         f"{summary.get('error')}")
    _out(f"run {summary['run_id']} {summary['status']} in {root / summary['run_id']}")
    if out:
        from sglab.report.run import run_report

        _out(f"report: {run_report(trainer.run_dir, out)}")


def _experiment_preset(spec: str, where: str):
    """``EXPERIMENT:PRESET`` -> (the experiment, the preset name)."""
    from sglab import registry

    if ":" not in spec:
        raise SglabError(f"{where}{spec!r}: write EXPERIMENT:PRESET, e.g. symmetry:quick")
    name, preset = spec.split(":", 1)
    return registry.experiment(name), preset


def _preset_base(spec: str, base: dict) -> dict:
    from sglab.config import deep_merge

    experiment, preset = _experiment_preset(spec, "--preset ")
    return deep_merge(experiment.base_config(preset), base)


@app.command()
def run(
    name: Annotated[str, typer.Argument(help="Experiment name (see `sglab list experiments`).")],
    preset: Annotated[str, typer.Option(help="quick | default | paper")] = "default",
    seeds: Annotated[int | None, typer.Option(help="Override the preset's number of seeds.")] = None,
    set_: Sets = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", help="Change one of the preset's own parameters, KEY=VALUE with the value "
                        "as YAML, e.g. models='[LSTM]' (repeatable; keys the preset has).")] = None,
    out: Annotated[Path | None, typer.Option(help="Output dir (default: results/NAME/PRESET).")] = None,
    runs_dir: RunsDir = None,
    workers: Workers = None,
    threads: Threads = None,
    no_ensemble: NoEnsemble = False,
    backend: Backend = "local",
    address: Address = None,
):
    """Run a named experiment: train its grid, check its claims, write the report."""
    from sglab import registry
    from sglab.experiments import run_experiment
    from sglab.store import runs_dir_from

    experiment = registry.experiment(name)
    out_dir = out or Path("results") / name / preset
    results = run_experiment(experiment, preset, out_dir, runs_dir_from(
        str(runs_dir) if runs_dir else None), workers=workers, threads=threads, seeds=seeds,
        overrides=list(set_ or []), printer=_out, ensemble=not no_ensemble, backend=backend,
        address=address, params=list(param or []))
    _out(f"{name} {preset}: {results['verdicts']}")


@app.command()
def sweep(
    spec: Annotated[Path, typer.Argument(help="Sweep YAML (base, grid, seeds).")],
    backend: Backend = "local",
    address: Address = None,
    preset: Annotated[str | None, typer.Option(
        help="Start from an experiment preset's base config (EXPERIMENT:PRESET); the "
             "sweep file's base is applied on top.")] = None,
    set_: Sets = None,
    out: Annotated[Path | None, typer.Option(help="Output dir (default: results/SWEEP_NAME).")] = None,
    runs_dir: RunsDir = None,
    workers: Workers = None,
    threads: Threads = None,
    no_ensemble: NoEnsemble = False,
):
    """Run a grid x seeds sweep; rerunning skips finished runs and resumes the others."""
    from sglab.report.run import sweep_report
    from sglab.store import runs_dir_from
    from sglab.sweep import expand, load_sweep
    from sglab.sweep.backends import check_backend, train_configs

    check_backend(backend, address, workers)
    spec_data = load_sweep(spec)
    if preset:
        spec_data.base = _preset_base(preset, spec_data.base)
    configs = expand(spec_data, list(set_ or []))
    root = runs_dir_from(str(runs_dir) if runs_dir else None)
    tag = f"sweep/{spec_data.name}"
    summaries = train_configs(configs, root, backend=backend, address=address, workers=workers,
                              threads=threads, tag=tag, quiet=backend == "ray", printer=_out,
                              ensemble=not no_ensemble)
    out_dir = out or Path("results") / spec_data.name
    _out(f"report: {sweep_report(spec_data, configs, summaries, out_dir)}")
    if any(s.get("status") != "finished" for s in summaries):
        raise SglabError("some runs failed (see the report); rerun the sweep to retry them")


@app.command()
def runs(
    where: Annotated[list[str] | None, typer.Option(
        "--where", help="Filter KEY=VALUE / KEY>VALUE on a column, config path or "
                        "final.METRIC (repeatable).")] = None,
    runs_dir: RunsDir = None,
    reindex: Annotated[bool, typer.Option(help="Rebuild the index from run directories first.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
):
    """Query the run store."""
    from sglab.store import RunStore, format_labels, runs_dir_from
    from sglab.sweep.jobs import target_value

    store = RunStore(runs_dir_from(str(runs_dir) if runs_dir else None))
    if reindex:
        def skipped(line: str) -> None:
            print(f"skipped {line}", file=sys.stderr, flush=True)

        _out(f"indexed {store.reindex(skipped=skipped)} runs")
    rows = store.query(list(where or []))
    if as_json:
        for row in rows:
            _out(json.dumps(row))
        return
    _out(f"{'run_id':44s} {'status':9s} {'step':>6s} {'target metric':>24s} {'value':>7s} "
         "tag / labels")
    for row in rows:
        metric, final = target_value(row["summary"])
        shown = f"{final:.4f}" if isinstance(final, float) else "-"
        labels = format_labels(row["summary"].get("labels") or {})
        _out(f"{row['run_id']:44s} {row['status'] or '-':9s} {row['step'] or 0:>6d} "
             f"{metric or '-':>24s} {shown:>7s} {row['tag'] or ''}"
             + (f" [{labels}]" if labels else ""))
    _out(f"{len(rows)} run(s)")


@app.command()
def report(path: Annotated[Path, typer.Argument(help="Experiment/sweep output dir or run dir.")],
           out: Annotated[Path | None, typer.Option(help="Where to write (default: PATH).")] = None):
    """(Re)build report.html from results.json, or a run report from a run directory."""
    from sglab.report import write_report
    from sglab.report.run import run_report

    if (path / "results.json").is_file():
        results = json.loads((path / "results.json").read_text())
        if out and out != path:
            raise SglabError("an experiment report is rebuilt in place; drop --out")
        _out(f"report: {write_report(results, path)}")
    elif (path / "summary.json").is_file():
        from sglab.train.loop import read_summary_file

        read_summary_file(path)  # a damaged summary is a clear error
        _out(f"report: {run_report(path, out or path)}")
    else:
        raise SglabError(f"{str(path)!r} has neither results.json (experiment or sweep output) "
                         "nor summary.json (run directory)")


@app.command()
def scorecard(
    results: Annotated[Path, typer.Option(help="The committed results (EXPERIMENT/PRESET/"
                                               "results.json).")] = Path("results"),
    out: Annotated[Path, typer.Option(help="The Markdown scorecard to write.")] =
        Path("docs/scorecard.md"),
    html_out: Annotated[Path, typer.Option("--html", help="The HTML page to write.")] =
        Path("results/scorecard.html"),
):
    """Write the reproduction scorecard: every claim of every experiment's committed result
    against the source's numbers."""
    from sglab import registry
    from sglab.experiments.scorecard import collect, render_html, render_markdown
    from sglab.io import atomic_write_text

    if not results.is_dir():
        raise SglabError(f"no results directory {str(results)!r}; run an experiment first "
                         "(sglab run NAME) or pass --results DIR")
    found = collect(results)
    names = sorted(registry.experiments())
    for path, text in ((out, render_markdown(found, names)), (html_out, render_html(found, names))):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    judged = sum(1 for entries in found.values() for r in entries if r.judged)
    _out(f"scorecard: {judged} judged results of {len(names)} experiments -> {out}, {html_out}")


data_app = typer.Typer(no_args_is_help=True, help="Generate, export and load data sets.")
app.add_typer(data_app, name="data")

EXPORTERS = ("scan",)


@data_app.command("export")
def data_export(
    dataset: Annotated[str, typer.Argument(help="Data set to export: scan.")],
    split: Annotated[str, typer.Option(help="simple | length | addprim_jump | addprim_turn_left "
                                            "| cutoff_L (e.g. cutoff_26)")] = "length",
    out: Annotated[Path, typer.Option(help="Directory for train.txt and test.txt.")] = Path("."),
    seed: Annotated[int, typer.Option(help="Seed of the random parts (simple, cutoff_L).")] = 0,
):
    """Write a generated split as train.txt / test.txt (and iid_valid.txt) in the published
    `IN: ... OUT: ...` line format."""
    import difflib

    from sglab.io import atomic_write_text
    from sglab.tasks.scan import build_split, format_lines

    if dataset not in EXPORTERS:
        near = difflib.get_close_matches(dataset, EXPORTERS, n=1, cutoff=0.4)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise SglabError(f"cannot export {dataset!r}.{hint} Exportable: {', '.join(EXPORTERS)}")
    parts = build_split(split, seed)
    for name, examples in parts.items():
        file = out / ("test.txt" if name.endswith("_test") else f"{name}.txt")  # published names
        atomic_write_text(file, format_lines(examples))
        _out(f"{file}: {len(examples)} examples ({name})")


@data_app.command("build")
def data_build(
    spec: Annotated[str, typer.Argument(help="EXPERIMENT:PRESET, e.g. ndr-listops:paper.")],
    seeds: Annotated[int | None, typer.Option(help="Override the preset's number of seeds.")] = None,
    set_: Sets = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", help="Change one of the preset's own parameters, as for `sglab run`.")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Build this many task configs at once.")] = 1,
):
    """Build the task data of an experiment preset's runs into the data cache, once per
    distinct task config, so that every run and worker loads it instead of building it
    (staged experiments: the first stage's runs)."""
    from sglab.experiments.base import first_stage_configs
    from sglab.tasks.cache import fill_cache

    experiment, preset = _experiment_preset(spec, "")
    configs = first_stage_configs(experiment, preset, seeds, list(param or []),
                                  list(set_ or []))
    fill_cache([config.task for config in configs], workers=workers, printer=_out)


@data_app.command("cache")
def data_cache(clear: Annotated[bool, typer.Option(help="Delete the cached files.")] = False):
    """Show where generated task data is cached (SGLAB_DATA_CACHE; `off` disables it),
    its files and their size; --clear deletes them."""
    from sglab.tasks.cache import cache_dir, cache_files

    directory = cache_dir()
    if directory is None:
        _out("data cache: off (SGLAB_DATA_CACHE=off)")
        return
    files = cache_files(directory)
    size = sum(f.stat().st_size for f in files)
    _out(f"data cache {directory}: {len(files)} file(s), {size / 1e6:.1f} MB")
    for file in files:
        _out(f"  {file.name}  {file.stat().st_size / 1e6:.1f} MB")
    if clear:
        for file in files:
            file.unlink(missing_ok=True)
        for lock in cache_files(directory, locks=True):
            lock.unlink(missing_ok=True)
        _out(f"deleted {len(files)} file(s)")


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of type ``kind`` in ``exc``'s chain of causes and contexts."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point. Usage errors exit 2 (click); SglabError prints its message and exits 2."""
    try:
        app(args=argv)
    except SystemExit as exc:  # click ends every command with one
        interrupt = _cause(exc, KeyboardInterrupt)  # typer turns Ctrl-C into exit 130
        if interrupt is not None:
            print(str(interrupt) or "interrupted; rerun the same command to resume",
                  file=sys.stderr)
            return 130
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except SglabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # TrainingInterrupted says where and how to resume
        print(str(exc) or "interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

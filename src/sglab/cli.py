"""The ``sglab`` command line. It parses, calls library functions and prints.

Errors a user can cause are printed without a traceback and exit with status 2.
"""

from __future__ import annotations

import errno
import json
import os
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
    "--set", help="Dotted override KEY=VALUE, e.g. model.positions=none (repeatable).")]
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
    help="Ray cluster address (ray backend), e.g. 10.0.0.5:6379 or ray://10.0.0.5:10001; "
         "an address that does not answer within $SGLAB_RAY_CONNECT_TIMEOUT seconds (default "
         "30) is an error. Without --address Ray joins a cluster already running on this host "
         "if there is one (the RAY_ADDRESS variable, or one started with `ray start`), else "
         "starts a local instance; pass --address local (and unset RAY_ADDRESS) to always "
         "start a fresh local instance.")]


def _out(line: str) -> None:
    print(line, flush=True)


def _version(value: bool) -> None:
    if value:
        from sglab.provenance import describe, provenance

        _out(f"sglab {describe(provenance())}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print sglab's version and the hash of its source (and git commit), and exit.")]
        = False,
        tensorboard: Annotated[bool, typer.Option(
            "--tensorboard", help="Runs also write TensorBoard event files to "
            "<run>/tensorboard/ (needs sglab[tensorboard]; the same as SGLAB_TENSORBOARD=1).")]
        = False) -> None:
    from sglab.train.run_log import ENV, tensorboard_on

    if tensorboard:
        os.environ[ENV] = "1"  # inherited by the workers a sweep starts
    tensorboard_on()  # a bad $SGLAB_TENSORBOARD is refused before anything runs


def _check_out_dir(out: Path, option: str = "--out") -> None:
    """Refuse, before anything runs, an output directory that cannot be made or written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SglabError(f"{option} {str(out)!r} is a file, not a directory; pass {option} a "
                         "directory")
    existing = out if out.exists() else next(p for p in out.absolute().parents if p.exists())
    if not existing.is_dir():
        raise SglabError(f"{option} {str(out)!r} cannot be made: {str(existing)!r} is a file; "
                         f"pass {option} a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SglabError(f"{option} {str(out)!r} cannot be written ({str(existing)!r} is not "
                         f"writable for you); pass {option} a directory you can write")


def _write_report(out: Path, write):
    """``write()`` (which writes a report into ``out``), a failed write as one message."""
    try:
        return write()
    except OSError as exc:
        raise SglabError(f"cannot write the report to {str(out)!r}: {exc.strerror or exc}"
                         + (f" ({exc.filename})" if exc.filename else "")
                         + "; pass --out a writable directory with free space") from None


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
    from sglab.store import RunStore, run_dir_of, runs_dir_from
    from sglab.train.loop import ENSEMBLE_SUFFIX, Trainer, execution_run_id, load_run_config

    root = runs_dir_from(str(runs_dir) if runs_dir else None)
    if (extend is None) != (steps is None):
        raise SglabError("--extend RUN_ID and --steps N go together: "
                         "`sglab train --extend RUN_ID --steps N`")
    if out:
        _check_out_dir(out)
    # an option given empty (--resume "$UNSET") is an error, never "no option"
    if extend is not None:
        if config or task or model or set_ or preset or resume is not None:
            raise SglabError("--extend takes the config stored with the run and changes only "
                             "train.steps; drop the other options")
        from sglab.train.extend import extend_run

        cfg = extend_run(root, extend, steps)
        _out(f"extending {extend} to {steps} steps as run {cfg.run_id()}")
        resume = cfg.run_id()
    elif resume is not None:
        if config or task or model or set_ or preset:
            raise SglabError("--resume takes the config stored with the run; drop the other options")
        run_dir = run_dir_of(root, resume, "--resume")
        cfg = load_run_config(run_dir)
        stored_id = execution_run_id(
            cfg, "ensemble" if resume.endswith(ENSEMBLE_SUFFIX) else "alone")
        if stored_id != resume:
            raise SglabError(
                f"run directory {str(run_dir)!r} holds the config of run {stored_id}, not of "
                f"{resume} (renamed or copied?), so training would go to {stored_id}: rename "
                f"the directory back to {stored_id}, or train its config as a new run with "
                f"`sglab train --config {run_dir / 'config.yaml'}`")
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

        _out(f"report: {_write_report(out, lambda: run_report(trainer.run_dir, out))}")


def _first_lines(exc: BaseException, limit: int = 300) -> str:
    """The message of ``exc`` on one line, cut at ``limit`` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    _check_out_dir(out_dir)
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
    out_dir = out or Path("results") / spec_data.name
    source = {"name": spec_data.name, "file": str(spec.resolve()), "preset": preset,
              "set": list(set_ or [])}
    _check_out_dir(out_dir)
    _check_sweep_out(out_dir, source, out is None)
    tag = f"sweep/{spec_data.name}"
    summaries = train_configs(configs, root, backend=backend, address=address, workers=workers,
                              threads=threads, tag=tag, quiet=backend == "ray", printer=_out,
                              ensemble=not no_ensemble)
    path = _write_report(out_dir, lambda: sweep_report(spec_data, configs, summaries, out_dir,
                                                       source=source))
    _out(f"report: {path}")
    if any(s.get("status") != "finished" for s in summaries):
        raise SglabError("some runs failed (see the report); rerun the sweep to retry them")


def _check_sweep_out(out_dir: Path, source: dict, default_out: bool) -> None:
    """Refuse to write a sweep's report over another sweep's (or an experiment's) report in
    ``out_dir``: the same sweep rerun (same name, sweep file, preset and --set) may."""
    results = out_dir / "results.json"
    if not results.is_file():
        return
    try:
        found = json.loads(results.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        found = None
    owner = found.get("sweep") if isinstance(found, dict) else None
    if owner == source:
        return
    if isinstance(found, dict) and owner is None and found.get("title") == f"sweep {source['name']}":
        return  # written before reports recorded their sweep: a rerun of the same name
    if isinstance(owner, dict):
        who = (f"sweep {owner.get('name')!r} (file {owner.get('file')}"
               + (f", --preset {owner['preset']}" if owner.get("preset") else "")
               + (f", --set {' '.join(owner['set'])}" if owner.get("set") else "") + ")")
    elif isinstance(found, dict) and found.get("experiment"):
        who = f"experiment {found['experiment']} (preset {found.get('preset')})"
    elif isinstance(found, dict):
        who = repr(str(found.get("title", "another command"))[:80])
    else:
        who = "something else (its results.json cannot be read)"
    this = (f"sweep {source['name']!r} (file {source['file']}"
            + (f", --preset {source['preset']}" if source.get("preset") else "")
            + (f", --set {' '.join(source['set'])}" if source.get("set") else "") + ")")
    how = ("give the sweep its own `name:` (the default --out is results/NAME) or pass --out DIR"
           if default_out else "pass another --out DIR")
    raise SglabError(f"{str(out_dir)!r} holds the report of {who}; this {this} would overwrite "
                     f"it. To keep both, {how}; to replace it, delete {str(out_dir)!r} first")


@app.command()
def runs(
    where: Annotated[list[str] | None, typer.Option(
        "--where", help="Filter KEY=VALUE / KEY>VALUE on a column, config path or "
                        "final.METRIC (repeatable).")] = None,
    runs_dir: RunsDir = None,
    reindex: Annotated[bool, typer.Option(
        help="Rebuild the index from run directories first (also the way to repair a damaged "
             "runs.db; runs whose directory is gone leave it).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the table's rows as CSV.")] = False,
    migrate: Annotated[bool, typer.Option(
        help="Rewrite stored run configs written in an older layout (flat transformer model "
             "sections) in the current one, then reindex; run ids do not change.")] = False,
):
    """Query the run store. A running run shows the step of its last record; one whose
    trainer is gone (killed) shows as interrupted."""
    from sglab.store import RunStore, format_labels, runs_dir_from
    from sglab.sweep.jobs import target_value

    if as_json and as_csv:
        raise SglabError("--json and --csv are two formats; choose one")
    store = RunStore(runs_dir_from(str(runs_dir) if runs_dir else None))

    def skipped(line: str) -> None:
        print(f"skipped {line}", file=sys.stderr, flush=True)

    def note(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if migrate:
        migrated = store.migrate_configs(skipped=skipped)
        _out(f"migrated the config of {len(migrated)} run(s) to the current layout")
    if reindex or migrate:
        _out(f"indexed {store.reindex(skipped=skipped, note=note)} runs")
    rows = store.current(store.query(list(where or [])))
    if as_json:
        for row in rows:
            _out(json.dumps(row))
        return
    table = []
    for row in rows:
        metric, final = target_value(row["summary"])
        table.append([row["run_id"], row["status"] or "-", row["step"] or 0, metric or "-",
                      f"{final:.4f}" if isinstance(final, float) else "-", row["tag"] or "",
                      format_labels(row["summary"].get("labels") or {})])
    if as_csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["run_id", "status", "step", "target_metric", "value", "tag", "labels"])
        writer.writerows(table)
        sys.stdout.flush()
        return
    _out(f"{'run_id':44s} {'status':11s} {'step':>6s} {'target metric':>24s} {'value':>7s} "
         "tag / labels")
    for run_id, status, step, metric, shown, tag, labels in table:
        _out(f"{run_id:44s} {status:11s} {step:>6d} {metric:>24s} {shown:>7s} {tag}"
             + (f" [{labels}]" if labels else ""))
    _out(f"{len(rows)} run(s)")


@app.command()
def report(path: Annotated[Path, typer.Argument(help="Experiment/sweep output dir or run dir.")],
           out: Annotated[Path | None, typer.Option(help="Where to write (default: PATH).")] = None):
    """(Re)build report.html from results.json, or a run report from a run directory."""
    from sglab.report import write_report
    from sglab.report.run import run_report

    if (path / "results.json").is_file():
        try:
            results = json.loads((path / "results.json").read_bytes().decode("utf-8"))
        except (OSError, ValueError) as exc:
            raise SglabError(f"{str(path / 'results.json')!r} cannot be read ({_first_lines(exc)}); "
                             "rerun the experiment or sweep that wrote it") from None
        if not isinstance(results, dict):
            raise SglabError(f"{str(path / 'results.json')!r} does not hold a JSON object; rerun "
                             "the experiment or sweep that wrote it")
        if out and out != path:
            raise SglabError("an experiment report is rebuilt in place; drop --out")
        _out(f"report: {_write_report(path, lambda: write_report(results, path))}")
    elif (path / "summary.json").is_file():
        from sglab.train.loop import read_summary_file

        read_summary_file(path)  # a damaged summary is a clear error
        if out:
            _check_out_dir(out)
        _out(f"report: {_write_report(out or path, lambda: run_report(path, out or path))}")
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
    experiments = registry.experiments()
    names = sorted(experiments)
    scales = {name: experiments[name].spec.scale for name in names}
    for path, text in ((out, render_markdown(found, names, scales)),
                       (html_out, render_html(found, names))):
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


# errors of the machine a command runs on, not of sglab: one line each, exit 2
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM,
                       errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG,
                       errno.EIO, errno.EMFILE, errno.ENFILE}


def _environment_error(exc: BaseException) -> str | None:
    """One line for an error of the machine (disk full, permissions, out of memory) found in
    ``exc``'s chain, or None."""
    oserror = _cause(exc, OSError)
    if oserror is not None and oserror.errno in _ENVIRONMENT_ERRNOS:
        where = f" ({oserror.filename})" if oserror.filename else ""
        if oserror.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return (f"no space left to write{where}: {oserror.strerror}. Nothing half-written "
                    "was kept; free some space (or pass --runs-dir / --out on another disk) and "
                    "rerun the same command: a run goes on from its last checkpoint")
        return (f"{oserror.strerror or oserror}{where}; check the path and its permissions "
                "(or pass --runs-dir / --out elsewhere) and rerun the same command")
    memory = _cause(exc, MemoryError)
    runtime = _cause(exc, RuntimeError)
    text = str(runtime).lower() if runtime is not None else ""
    if memory is not None or "out of memory" in text or "not enough memory" in text:
        what = _first_lines(runtime, 200) if runtime is not None else "MemoryError"
        return (f"out of memory ({what}): a batch does not fit. Lower train.batch_size (and "
                "train.eval_batch_size) or the model size with --set (that is a new run), or "
                "free memory and rerun the same command (a run goes on from its last "
                "checkpoint)")
    return None


def _quiet_stdout() -> None:
    """After a broken pipe (output piped to `head`): send what is left to /dev/null, so that
    flushing at exit raises nothing either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point. Usage errors exit 2 (click); SglabError prints its message and exits 2."""
    try:
        try:
            app(args=argv)
        except SystemExit as exc:  # click ends every command with one
            interrupt = _cause(exc, KeyboardInterrupt)  # typer turns Ctrl-C into exit 130
            if interrupt is not None:
                print(str(interrupt) or "interrupted; rerun the same command to resume",
                      file=sys.stderr)
                return 130
            if _cause(exc, BrokenPipeError) is not None:  # typer's exit 1 after a broken pipe
                _quiet_stdout()
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except SglabError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:  # TrainingInterrupted says where and how to resume
            print(str(exc) or "interrupted; rerun the same command to resume", file=sys.stderr)
            return 130
        except BrokenPipeError:  # the reader of our output went away: stop quietly
            _quiet_stdout()
            return 1
        except (OSError, RuntimeError, MemoryError) as exc:
            line = _environment_error(exc)
            if line is None:
                raise
            print(f"error: {line}", file=sys.stderr)
            return 2
    except BrokenPipeError:  # stderr is gone too
        _quiet_stdout()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

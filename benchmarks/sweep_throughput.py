"""Sweep throughput: trained model-steps per second of one grid x seeds sweep, four ways.

    python benchmarks/sweep_throughput.py            # 4 cells x 5 seeds, addition (+ anchors)
    python benchmarks/sweep_throughput.py --quick    # seconds: addition, 2 cells x 2 seeds
    python benchmarks/sweep_throughput.py --device cuda --steps 500
    python benchmarks/sweep_throughput.py --tasks ndr --seeds 4 --modes pool,forced --steps 300

The same runs are trained, each way into a fresh run store:

- sequential: one run per process, one after another (``sglab train`` per run, torch's
  default threads) -- what a user gets without the sweep runner;
- pool: the local process pool, one run per job (``--no-ensemble``), default placement;
- ensemble: the local process pool with compatible runs batched into ensembles;
- ray: the Ray backend on a local Ray instance (when Ray is installed; not in --quick);
- forced: each seed group trained as one vmapped ensemble whether or not the planner would
  batch it: the seeds of a cell split over one process per core, one thread each -- the
  ensemble against process-pool ratio on the same cores, whatever the planner decides.

Tasks: ``addition`` (symmetry's default model), ``anchors`` (init-scale's), ``ndr`` (the NDR
of ndr-ctl's default, backward direction: a small-op-bound step, where batching seeds into
one vmapped step should pay most).

Throughput is total trained steps / wall-clock seconds (process start, data, evaluation
and checkpoints included), reported as a ratio to the sequential baseline. It also
measures the per-step overhead outside the model's own compute (data generation,
logging, evaluation, checkpoints) as a fraction of the Trainer's step time. The last
line is ``ensemble/sequential throughput ratio: X.XX`` (of the first task).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import parse_with_quick

from sglab import registry
from sglab.config import RunConfig, dump_yaml
from sglab.models import build_model
from sglab.sweep import SweepSpec, expand, run_configs
from sglab.sweep.jobs import available_cores
from sglab.tasks import build_task
from sglab.tasks.base import target_loss
from sglab.train import Trainer
from sglab.train.evaluate import forward_batch, model_batch
from sglab.train.loop import make_optimizer


def addition_grid(seeds: int, steps: int, cells: int, device: str) -> SweepSpec:
    """The symmetry experiment's default model; cells vary positions and residual ablation."""
    base = registry.experiment("symmetry").preset("default")["base"]
    base = json.loads(json.dumps(base))
    base["task"].update(test_size=2000)  # keep the final evaluation small next to training
    base["train"].update(steps=steps, eval_interval=steps, checkpoint_interval=steps,
                         log_interval=steps, early_stop_metric=None, early_stop_threshold=None,
                         device=device, threads=None)
    grid = {"model.pos_encoding": ["learned", "none"], "model.residual_ablation": [[], [0]]}
    if cells == 2:
        grid = {"model.pos_encoding": ["learned", "none"]}
    return SweepSpec(name="addition", base=base, grid=grid, seeds=seeds)


def anchors_grid(seeds: int, steps: int, cells: int, device: str) -> SweepSpec | None:
    """The init-scale experiment's default model; cells vary the init rate gamma."""
    try:
        preset = registry.experiment("init-scale").preset("default")
    except Exception:  # the anchors study is not installed in this version
        return None
    base = json.loads(json.dumps(preset["base"]))
    base.setdefault("train", {}).update(steps=steps, eval_interval=steps,
                                        checkpoint_interval=steps, log_interval=steps,
                                        early_stop_metric=None, device=device, threads=None)
    gammas = [0.3, 0.5, 0.7, 0.9][:cells]
    return SweepSpec(name="anchors", base=base, grid={"model.init_gamma": gammas}, seeds=seeds)


def ndr_grid(seeds: int, steps: int, cells: int, device: str) -> SweepSpec:
    """ndr-ctl's default NDR (backward); one cell: only the seeds vary."""
    experiment = registry.experiment("ndr-ctl")
    params = experiment.preset("default")
    arms = zip(experiment.arms(params), experiment.configs(params, []))
    config = next(c for arm, c in arms
                  if arm.labels.get("variant") == "ndr" and arm.labels.get("direction") == "backward")
    base = config.to_dict()
    base.pop("seed", None)
    base["train"].update(steps=steps, eval_interval=steps, checkpoint_interval=steps,
                         log_interval=steps, early_stop_metric=None, early_stop_threshold=None,
                         device=device, threads=None)
    return SweepSpec(name="ndr", base=base, grid={}, seeds=seeds)


def _train_group(config_dicts: list[dict], runs_dir: str) -> None:
    """One worker of the forced mode: its configs as one ensemble on one thread."""
    from sglab.store import RunStore
    from sglab.train.ensemble import EnsembleTrainer

    torch.set_num_threads(1)
    configs = [RunConfig.model_validate(c) for c in config_dicts]
    if len(configs) == 1:
        Trainer(configs[0], runs_dir, printer=None).run()
    else:
        EnsembleTrainer(configs, runs_dir, store=RunStore(runs_dir), printer=None).run()


def run_forced(configs: list[RunConfig], runs_dir: Path) -> None:
    """Every cell's seeds split over one process per core, each group one ensemble."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cores = available_cores()
    cells: dict[str, list[RunConfig]] = {}
    for config in configs:
        cells.setdefault(json.dumps(config.model_copy(update={"seed": 0}).to_dict(),
                                    sort_keys=True), []).append(config)
    groups = [[c.to_dict() for c in members[k::cores]]
              for members in cells.values() for k in range(min(cores, len(members)))]
    runs_dir.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("spawn")) as pool:
        for future in [pool.submit(_train_group, group, str(runs_dir)) for group in groups]:
            future.result()


def run_sequential(configs: list[RunConfig], runs_dir: Path) -> None:
    """One ``sglab train`` process per run, one after another."""
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    for config in configs:
        path = runs_dir / f"{config.run_id()}.yaml"
        runs_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_yaml(config))
        subprocess.run([sys.executable, "-m", "sglab.cli", "train", "--config", str(path),
                        "--runs-dir", str(runs_dir)], check=True, env=env,
                       stdout=subprocess.DEVNULL)


def timed(label: str, function) -> float:
    start = time.perf_counter()
    function()
    seconds = time.perf_counter() - start
    print(f"  {label:10s} {seconds:7.1f} s", flush=True)
    return seconds


def step_overhead(config: RunConfig, scratch: Path) -> dict[str, float]:
    """Fractions of a Trainer step spent outside the model's forward/backward/update."""
    steps = config.train.steps
    torch.set_num_threads(1)
    task = build_task(config.task)
    torch.manual_seed(config.seed)
    model = build_model(config.model, len(task.vocab), task.max_length)
    optimizer = make_optimizer(model, config.train, torch.device("cpu"))
    generator = torch.Generator().manual_seed(config.seed)
    batches = [model_batch(model, task.train_batch(config.train.batch_size, generator))
               for _ in range(steps)]
    start = time.perf_counter()
    for _ in range(steps):
        model_batch(model, task.train_batch(config.train.batch_size, generator))
    data_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for batch in batches:
        loss = target_loss(forward_batch(model, batch), batch.targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    compute_seconds = time.perf_counter() - start
    trainer_seconds = Trainer(config, scratch, printer=None).run()["seconds"]
    return {"data": data_seconds / trainer_seconds,
            "model": compute_seconds / trainer_seconds,
            "other (eval, logging, checkpoints, setup)":
                max(trainer_seconds - data_seconds - compute_seconds, 0.0) / trainer_seconds}


def benchmark(spec: SweepSpec, use_ray: bool, root: Path,
              modes: tuple[str, ...] = ("sequential", "pool", "ensemble", "ray")) -> dict[str, float]:
    configs = expand(spec)
    total_steps = sum(c.train.steps for c in configs)
    print(f"{spec.name}: {len(configs)} runs ({len(configs) // len(spec.seeds)} cells x "
          f"{len(spec.seeds)} seeds) x {configs[0].train.steps} steps on {available_cores()} core(s)",
          flush=True)
    quiet = lambda line: None  # noqa: E731
    ways = {
        "sequential": lambda: run_sequential(configs, root / "sequential"),
        "pool": lambda: run_configs(configs, root / "pool", quiet=True, ensemble=False,
                                    printer=quiet),
        "ensemble": lambda: run_configs(configs, root / "ensemble", quiet=True, printer=quiet),
        "forced": lambda: run_forced(configs, root / "forced"),
    }
    seconds = {name: timed(name, way) for name, way in ways.items() if name in modes}
    if use_ray and "ray" in modes:
        from sglab.sweep.ray_backend import run_configs_ray

        seconds["ray"] = timed("ray", lambda: run_configs_ray(configs, root / "ray",
                                                              printer=quiet, poll_seconds=1.0))
    throughput = {k: total_steps / v for k, v in seconds.items()}
    reference = throughput.get("sequential", next(iter(throughput.values())))
    reference_name = "sequential" if "sequential" in throughput else next(iter(throughput))
    for key, value in throughput.items():
        print(f"  {key:10s} {value:8.1f} model-steps/s  "
              f"({value / reference:.2f}x {reference_name})")
    overhead_config = configs[0].model_copy(update={"train": configs[0].train.model_copy(
        update={"threads": 1})})
    fractions = step_overhead(overhead_config, root / "overhead")
    print("  step time (1 thread): " + ", ".join(f"{k} {v:.0%}" for k, v in fractions.items()))
    return {k: v / reference for k, v in throughput.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per cell")
    parser.add_argument("--steps", type=int, default=300, help="steps per run")
    parser.add_argument("--cells", type=int, default=4, help="grid cells per task")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray backend")
    parser.add_argument("--tasks", default="addition,anchors")
    parser.add_argument("--modes", default="sequential,pool,ensemble,ray",
                        help="which ways to run the sweep (ratios are to the first one given)")
    args = parse_with_quick(parser, {"seeds": 2, "steps": 10, "cells": 2, "tasks": "addition",
                                     "modes": "pool,ensemble,forced"})
    seeds, steps, cells = args.seeds, args.steps, args.cells
    try:
        import ray  # noqa: F401
        have_ray = True
    except ImportError:
        have_ray = False
    use_ray = have_ray and not args.quick and not args.no_ray
    builders = {"addition": addition_grid, "anchors": anchors_grid, "ndr": ndr_grid}
    ratios = {}
    root = Path(tempfile.mkdtemp(prefix="sglab-sweep-bench-"))
    try:
        for name in args.tasks.split(","):
            spec = builders[name](seeds, steps, cells, args.device)
            if spec is None:
                print(f"{name}: not available, skipped")
                continue
            ratios[name] = benchmark(spec, use_ray, root / name, tuple(args.modes.split(",")))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    first = next(iter(ratios.values()))
    if "ensemble" in first and "sequential" in args.modes:
        print(f"ensemble/sequential throughput ratio: {first['ensemble']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

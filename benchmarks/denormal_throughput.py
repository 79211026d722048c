"""Training step rate of a stored run with and without flushing subnormal floats to zero.

    python benchmarks/denormal_throughput.py --run runs/anchors-transformer-s1-839bcaf63a
    python benchmarks/denormal_throughput.py --run RUN_DIR --steps 60 --rounds 5

Some CPU runs slow down by several times in the middle of training (the init-scale
anchors models at depths 5-6: 18-20 steps/s falling to 5-8 and back) when activations,
gradients or optimizer moments underflow into subnormal floats, which x86 cores compute
far more slowly. ``train.flush_denormal=true`` flushes them to zero. This script copies
the run's directory to a temporary one (the stored run is never touched), restores its
last checkpoint (model, optimizer, data order) and times optimizer steps of that state
with the flush off and on, in interleaved rounds in one process so machine noise hits
both alike; it reports the median step rate of each and their ratio. A run whose
checkpoint holds no subnormal arithmetic shows a ratio near 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import parse_with_quick, significant

from sglab.config import TrainConfig, build_run_config
from sglab.train.loop import LoneStep, Trainer, cpu_settings, load_run_config


def quick_run(runs_dir: Path) -> Path:
    """A tiny anchors run trained for a few steps: something to time in --quick mode."""
    config = build_run_config({}, [
        "task.name=anchors", "task.train_size=500", "task.test_size=100",
        "task.unseen_size=50", "model.n_layers=2", "model.d_model=16", "model.n_heads=1",
        "train.steps=10", "train.batch_size=16", "train.eval_interval=10",
        "train.checkpoint_interval=10", "train.log_interval=10", "train.threads=1",
    ])
    Trainer(config, runs_dir, printer=None).run()
    return runs_dir / config.run_id()


def copy_of(run_dir: Path, into: Path) -> Path:
    """The run's config, summary, metrics and last checkpoint, copied (snapshots left)."""
    if not (run_dir / "checkpoints" / "last.pt").is_file():
        raise SystemExit(f"error: {run_dir} has no checkpoints/last.pt: give the directory of "
                         f"a stored run (runs/<run id>) that has trained at least one "
                         f"checkpoint interval")
    copy = into / run_dir.name
    (copy / "checkpoints").mkdir(parents=True)
    for name in ("config.yaml", "summary.json", "metrics.jsonl"):
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, copy / name)
    shutil.copy2(run_dir / "checkpoints" / "last.pt", copy / "checkpoints" / "last.pt")
    return copy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=None,
                        help="a stored run's directory (required without --quick)")
    parser.add_argument("--steps", type=int, default=40, help="timed steps per round and setting")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parse_with_quick(parser, {"steps": 3, "rounds": 1})
    if args.run is None and not args.quick:
        parser.error("--run RUN_DIR is required (the directory of a stored run)")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        source = args.run if args.run is not None else quick_run(scratch / "trained")
        run_dir = copy_of(source, scratch / "copy")
        config = load_run_config(run_dir)
        device = torch.device("cpu")
        trainer = Trainer(config, run_dir.parent, printer=None)
        run = trainer.prepare(device)
        if run.step == 0:
            raise SystemExit(f"error: the checkpoint of {source} was not restored (its config "
                             f"does not match the run's id); nothing timed")
        stepper = LoneStep(run)
        settings = {flush: TrainConfig(device="cpu", threads=args.threads, flush_denormal=flush)
                    for flush in (False, True)}
        rates: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(args.rounds):
            for flush, train in settings.items():
                with cpu_settings(train, device):
                    start = time.perf_counter()
                    for _ in range(args.steps):
                        stepper.step([run], [config.train.lr])
                    rates[flush].append(args.steps / (time.perf_counter() - start))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(json.dumps({"run": str(args.run) if args.run else "quick", "step": run.step,
                      "threads": args.threads, "steps_per_round": args.steps,
                      "rounds": args.rounds, "steps_per_s_flush_off": significant(off),
                      "steps_per_s_flush_on": significant(on),
                      "ratio_on_over_off": significant(on / off)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

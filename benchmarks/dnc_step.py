"""Training speed of the DNC on the bit tasks, to size the experiments' default presets.

    python benchmarks/dnc_step.py                               # every DNC experiment, 1 thread
    python benchmarks/dnc_step.py --experiment dnc-key-value --members 1 3 --steps 40
    python benchmarks/dnc_step.py --members 1 --steps 500 --compile  # compiled time step

For each experiment's ``default`` base config (variant DNC-MDS unless ``--variant``), trains
``--steps`` iterations alone (``--members 1``) and as a vmapped ensemble of K seeds, one torch
thread, evaluation pushed past the end. Reports seconds per iteration, milliseconds per
sequence time step (mean sequence length of the task's validation batches) and how many
iterations fit in ``--budget-minutes`` for the preset's runs on ``--workers`` processes.
With ``--compile`` the figure includes compiling the step (about 20-30 s the first time a
shape is seen, a few seconds from torch's on-disk cache after that): use enough steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile

import torch
from common import parse_with_quick

from sglab import registry
from sglab.config import build_run_config
from sglab.tasks import build_task
from sglab.train import Trainer
from sglab.train.ensemble import EnsembleTrainer

EXPERIMENTS = ("dnc-repeat-copy", "dnc-associative-recall", "dnc-key-value")


def measure(name: str, variant: str, members: int, steps: int, compile: bool = False) -> dict:
    experiment = registry.experiment(name)
    params = experiment.presets["default"]
    overrides = {"model.variant": variant, "train.steps": steps, "train.eval_interval": 10 * steps,
                 "train.checkpoint_interval": 10 * steps, "train.log_interval": 10 * steps,
                 "train.threads": 1, "task.valid_batches": 1, "train.compile": compile}
    if "M" in variant.removeprefix("DNC"):
        overrides["model.mask_min"] = params.get("mask_min", 0.0)
    configs = [build_run_config(params["base"], {**overrides, "seed": seed})
               for seed in range(members)]
    task = build_task(configs[0].task)
    mean_length = statistics.mean(len(b.inputs[0]) for b in build_task(
        configs[0].task.model_copy(update={"valid_batches": 16})).valid)
    with tempfile.TemporaryDirectory() as runs:
        if members == 1:
            summaries = [Trainer(configs[0], runs, printer=None).run()]
        else:
            summaries = EnsembleTrainer(configs, runs, printer=None).run()
    per_iteration = 1 / summaries[0]["train_steps_per_second"]
    del task
    return {"experiment": name, "variant": variant, "members": members,
            "batch": configs[0].train.batch_size, "mean_length": round(mean_length, 1),
            "seconds_per_iteration": round(per_iteration, 4),
            "ms_per_time_step": round(1000 * per_iteration / mean_length, 2),
            "runs_in_preset": len(experiment.arms(params)),
            "variants_in_preset": len(params["variants"]), "seeds": len(params["seeds"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", choices=EXPERIMENTS, action="append")
    parser.add_argument("--variant", default="DNC-MDS")
    parser.add_argument("--members", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compile", action="store_true",
                        help="train.compile: lone runs compile the DNC's time step")
    parser.add_argument("--budget-minutes", type=float, default=25.0)
    args = parse_with_quick(parser, {"experiment": ["dnc-key-value"], "members": [1],
                                     "steps": 3})
    torch.set_num_threads(1)
    for name in args.experiment or EXPERIMENTS:
        for members in args.members:
            row = measure(name, args.variant, members, args.steps, args.compile)
            if members == row["seeds"]:  # one ensemble per variant, spread over the workers
                waves = -(-row["variants_in_preset"] // args.workers)
                row["iterations_in_budget"] = int(args.budget_minutes * 60
                                                  / (waves * row["seconds_per_iteration"]))
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

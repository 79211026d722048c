"""Ensemble throughput: member-steps/s and fraction of the matmul rate for K members.

    python benchmarks/gpu_throughput.py --experiment symmetry --preset paper   # GPU
    python benchmarks/gpu_throughput.py --quick                               # CPU, ~1 min

Takes the first run config of an experiment preset, makes K copies that differ only
in the seed and trains them as one ensemble (``EnsembleTrainer``; K = 1 is a plain
``Trainer`` run) for a few steps. Reports the ensemble's steps/s, member-steps/s,
tokens/s over all members and the achieved share of a large matmul's FLOP/s (bf16 on
a GPU when the preset trains in bf16, float32 otherwise) measured in the same process.
Evaluation and checkpoints happen only at the last step and are excluded from the rates.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from matmul_rate import matmul_flops

from sglab import registry
from sglab.config import build_run_config
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.train import Trainer
from sglab.train.ensemble import EnsembleTrainer, ensemble_key


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="symmetry")
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--members", default="1,4,16,64", help="comma-separated ensemble sizes")
    parser.add_argument("--steps", type=int, default=100, help="training steps per measurement")
    parser.add_argument("--quick", action="store_true",
                        help="the experiment's quick preset, members 1,2,4, 30 steps (runs on CPU)")
    parser.add_argument("--set", action="append", default=[], help="extra KEY=VALUE overrides")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    if args.quick:
        args.preset, args.members, args.steps = "quick", "1,2,4", 30

    experiment = registry.experiment(args.experiment)
    template = experiment.configs(experiment.preset(args.preset), [])[0].to_dict()
    template.pop("seed", None)
    fixed = [f"train.steps={args.steps}", f"train.eval_interval={args.steps}",
             f"train.checkpoint_interval={args.steps}", f"train.log_interval={args.steps}",
             "train.early_stop_metric=null", "train.eval_max_examples=64"] + args.set
    probe = build_run_config(template, fixed + ["seed=0"])
    if ensemble_key(probe) is None:
        print("note: this configuration cannot train as an ensemble (dropout); "
              "measuring with model.dropout=0")
        fixed.append("model.dropout=0")
        probe = build_run_config(template, fixed + ["seed=0"])

    task = build_task(probe.task)
    model = build_model(probe.model, len(task.vocab), task.max_length)
    flops_per_token = model.flops_per_token(task.max_length)
    device = torch.device("cuda" if torch.cuda.is_available() and probe.train.device != "cpu"
                          else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" and probe.train.precision == "bf16" \
        else torch.float32
    peak = matmul_flops(device, dtype, 4096 if device.type == "cuda" else 1024,
                        repeats=20 if device.type == "cuda" else 5)
    print(f"{args.experiment}:{args.preset}, {probe.model.name}, {model.num_parameters():,} "
          f"parameters, {args.steps} steps per size, device {device}, matmul peak "
          f"{peak / 1e12:.2f} TFLOP/s ({dtype})")

    rows = []
    for size in [int(k) for k in args.members.split(",")]:
        configs = [build_run_config(template, fixed + [f"seed={k}"]) for k in range(size)]
        with tempfile.TemporaryDirectory() as runs_dir:
            if size == 1:
                summaries = [Trainer(configs[0], runs_dir, printer=None).run()]
            else:
                summaries = EnsembleTrainer(configs, runs_dir, printer=None).run()
        steps_per_second = summaries[0]["train_steps_per_second"]
        tokens_per_second = sum(s["train_tokens_per_second"] for s in summaries)
        row = {"members": size, "steps_per_second": round(steps_per_second, 2),
               "member_steps_per_second": round(size * steps_per_second, 1),
               "tokens_per_second": round(tokens_per_second),
               "peak_fraction": round(flops_per_token * tokens_per_second / peak, 4)}
        rows.append(row)
        print("  ".join(f"{key} {value}" for key, value in row.items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"experiment": args.experiment, "preset": args.preset,
                                         "device": torch.cuda.get_device_name() if device.type == "cuda"
                                         else "cpu", "torch": torch.__version__, "rows": rows},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

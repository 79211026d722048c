"""Training throughput, time to accuracy, and fraction of matmul peak on 3-digit addition.

    python benchmarks/addition_throughput.py                     # symmetry default model, CPU
    python benchmarks/addition_throughput.py --d-model 128       # the 4-layer d=128 model
    python benchmarks/addition_throughput.py --preset paper      # 6x384 model (GPU)
    python benchmarks/addition_throughput.py --quick             # seconds: the quick preset

Trains one run of the chosen preset's base config (learned positions, no residual
ablation, seed 0) until the test exact match reaches 99% or the step budget ends,
evaluating on the full test set. Reports tokens/s and steps/s of training (evaluation
excluded), the time from launch to 51% and 99% test exact match, and the achieved
fraction of a large float32 (CPU) or bf16 (GPU) matmul's FLOP/s measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from common import parse_with_quick
from matmul_rate import matmul_flops

from sglab import registry
from sglab.config import build_run_config
from sglab.models import build_model
from sglab.store import read_metrics
from sglab.tasks import build_task
from sglab.train import Trainer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="default", help="symmetry preset (default|paper)")
    parser.add_argument("--d-model", type=int, help="override model.d_model")
    parser.add_argument("--n-layers", type=int, help="override model.n_layers")
    parser.add_argument("--steps", type=int, help="override train.steps")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    parser.add_argument("--set", action="append", default=[], help="extra KEY=VALUE overrides")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--runs-dir", type=Path, help="keep the run here (default: a temporary directory)")
    args = parse_with_quick(parser, {"preset": "quick", "steps": 100})

    params = registry.experiment("symmetry").preset(args.preset)
    overrides = ["model.pos_encoding=learned", "seed=0", "train.eval_max_examples=null",
                 "train.early_stop_metric=iid_test/exact_match", "train.early_stop_threshold=0.99",
                 "train.target_threshold=0.99"]
    if args.d_model:
        overrides += [f"model.d_model={args.d_model}"]
    if args.n_layers:
        overrides += [f"model.n_layers={args.n_layers}"]
    if args.steps:
        overrides += [f"train.steps={args.steps}", f"train.eval_interval={min(args.steps, 250)}"]
    if args.threads:
        overrides += [f"train.threads={args.threads}"]
    config = build_run_config(params["base"], overrides + args.set)
    device = torch.device("cuda" if torch.cuda.is_available() and config.train.device != "cpu"
                          else "cpu")

    with tempfile.TemporaryDirectory() as scratch:
        runs_dir = args.runs_dir or Path(scratch)
        summary = Trainer(config, runs_dir).run()
        records = read_metrics(Path(runs_dir) / summary["run_id"])

    task = build_task(config.task)
    model = build_model(config.model, len(task.vocab), task.max_length)
    context = (config.task.block_size if config.task.loss_on != "answer"
               else int(task.split("train").lengths.max()) - 1)
    flops_per_token = model.flops_per_token(context)
    tokens_per_second = summary["train_tokens_per_second"]
    steps_per_second = summary["train_steps_per_second"]
    dtype = torch.bfloat16 if device.type == "cuda" and config.train.precision == "bf16" \
        else torch.float32
    peak = matmul_flops(device, dtype, 4096 if device.type == "cuda" else 2048,
                        repeats=20 if device.type == "cuda" else 5)

    def first(threshold):
        hit = next((r for r in records if r["iid_test/exact_match"] >= threshold), None)
        return (hit["step"], hit["seconds"]) if hit else (None, None)

    step51, sec51 = first(0.51)
    step99, sec99 = first(0.99)
    achieved = flops_per_token * tokens_per_second
    figures = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "threads": summary["threads"], "torch": torch.__version__,
        "model": f"{config.model.n_layers} layers, d={config.model.d_model}, "
                 f"{model.num_parameters():,} parameters",
        "batch_size": config.train.batch_size, "steps_run": summary["step"],
        "protocol": config.task.loss_on,
        "tokens_per_second": round(tokens_per_second), "steps_per_second": round(steps_per_second, 2),
        "final_test_exact_match": summary["final"]["iid_test/exact_match"],
        "seconds_to_51pct": sec51, "step_to_51pct": step51,
        "seconds_to_99pct": sec99, "step_to_99pct": step99,
        "model_flops_per_second": achieved, "matmul_peak_flops_per_second": peak,
        "peak_fraction": achieved / peak,
    }
    width = max(map(len, figures))
    for key, value in figures.items():
        shown = f"{value:.3e}" if isinstance(value, float) and value > 1e5 else value
        print(f"{key:{width}s}  {shown}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

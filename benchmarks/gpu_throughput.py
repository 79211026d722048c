"""Ensemble throughput: member-steps/s and fraction of the matmul rate for K members.

    python benchmarks/gpu_throughput.py --experiment symmetry --preset paper   # GPU
    python benchmarks/gpu_throughput.py --quick                               # CPU, seconds

Takes the first run config of an experiment preset (dropout and all; ``--arm LABEL=VALUE``
picks the first run whose arm has those labels, e.g. ``--arm variant=ndr``), makes K copies
that differ only in the seed and trains them as one ensemble (``EnsembleTrainer``) for a
few steps; K = 1 is measured twice, as a plain ``Trainer`` run ("lone": fused attention,
the global generator's dropout) and as a one-member ensemble (vmapped, keyed dropout
masks). Reports steps/s, member-steps/s, tokens/s over all members, peak GPU memory and
the achieved share of a large matmul's FLOP/s (bf16 on a GPU when the preset trains in
bf16, float32 otherwise) measured in the same process. Evaluation and checkpoints happen
only at the last step and are excluded from the rates; ``--warmup N`` also leaves out the
first N steps (``torch.compile``'s tracing, allocator growth), which a compiled step needs. A
size that runs out of memory ends the list.

``--grid`` adds the projected wall time of the preset's whole grid at the best measured
member-steps/s (every run to its last step, no early stop, one process) and its floor:
the grid's training FLOPs at the full matmul rate.

``--profile K`` prints the 15 costliest kernels of a K-member ensemble step.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from common import parse_with_quick, significant
from matmul_rate import matmul_flops

from sglab import registry
from sglab.config import build_run_config
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.train import Trainer
from sglab.train.ensemble import EnsembleTrainer


def _train(configs, lone: bool, warmup: int = 0) -> list[dict]:
    """Train the configs (alone: the first one) and return their summaries. With ``warmup``
    > 0 each summary's rates are replaced by those of the steps after the first ``warmup``
    (compilation, autotuning and allocator growth happen there), read from the training
    records, which are logged every ``warmup`` steps."""
    with tempfile.TemporaryDirectory() as runs_dir:
        if lone:
            summaries = [Trainer(configs[0], runs_dir, printer=None).run()]
        else:
            summaries = EnsembleTrainer(configs, runs_dir, printer=None).run()
        if warmup:
            for summary in summaries:
                _steady_rates(summary, Path(runs_dir) / summary["run_id"], warmup)
        return summaries


def _steady_rates(summary: dict, run_dir: Path, warmup: int) -> None:
    """Steps/s and tokens/s between the training records at step ``warmup`` and at the last
    step (a step's training record is written before its evaluation and checkpoint)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("kind") == "train"]
    first = next(r for r in train if r["step"] >= warmup)
    last = train[-1]
    steps, seconds = last["step"] - first["step"], last["seconds"] - first["seconds"]
    if steps <= 0 or seconds <= 0:
        raise SystemExit(f"no training records after step {warmup} in {run_dir}")
    tokens_per_step = summary["train_tokens_per_second"] / summary["train_steps_per_second"]
    summary["train_steps_per_second"] = steps / seconds
    summary["train_tokens_per_second"] = steps / seconds * tokens_per_step


def _profile(configs) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        _train(configs, lone=False)
    key = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=60))


def _arm_config(parser: argparse.ArgumentParser, experiment, params: dict, wanted: list[str]):
    """The config of the first arm whose labels include every ``LABEL=VALUE`` of ``wanted``."""
    if bad := [w for w in wanted if "=" not in w]:
        parser.error(f"--arm takes LABEL=VALUE, got {bad[0]!r}")
    labels = dict(w.split("=", 1) for w in wanted)
    arms = experiment.arms(params)
    for arm in arms:
        if all(str(arm.labels.get(key)) == value for key, value in labels.items()):
            print(f"arm: {arm.labels}", flush=True)
            return arm.config()
    shown = sorted({", ".join(f"{k}={v}" for k, v in arm.labels.items()) for arm in arms})
    parser.error(f"no arm of {experiment.name} has {labels}; its arms: " + "; ".join(shown))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="symmetry")
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--members", default="1,4,16,64", help="comma-separated ensemble sizes")
    parser.add_argument("--steps", type=int, default=100, help="training steps per measurement")
    parser.add_argument("--warmup", type=int, default=0,
                        help="steps left out of the rates (compilation, first-step costs); the "
                        "measurement trains warmup + steps steps and times the last steps; "
                        "steps must be a multiple of warmup")
    parser.add_argument("--grid", action="store_true",
                        help="also project the wall time of the preset's whole grid")
    parser.add_argument("--profile", type=int, metavar="K", help="print the costliest kernels of "
                        "a K-member ensemble (10 steps) instead of measuring rates")
    parser.add_argument("--set", action="append", default=[], help="extra KEY=VALUE overrides")
    parser.add_argument("--arm", action="append", default=[], metavar="LABEL=VALUE",
                        help="measure the first run whose arm has this label (repeatable), e.g. "
                        "variant=ndr; default: the preset's first run")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parse_with_quick(parser, {"preset": "quick", "members": "1,2", "steps": 5})

    experiment = registry.experiment(args.experiment)
    params = experiment.preset(args.preset)
    preset_configs = experiment.configs(params, [])
    template = (_arm_config(parser, experiment, params, args.arm) if args.arm
                else preset_configs[0]).to_dict()
    template.pop("seed", None)
    steps = 10 if args.profile else args.steps
    warmup = 0 if args.profile else args.warmup
    if warmup and steps % warmup:
        parser.error(f"--steps ({steps}) must be a multiple of --warmup ({warmup})")
    total = steps + warmup
    fixed = [f"train.steps={total}", f"train.eval_interval={total}",
             f"train.checkpoint_interval={total}", f"train.log_interval={warmup or total}",
             "train.early_stop_metric=null", "train.early_stop_threshold=null",
             "train.eval_max_examples=64"] + args.set
    probe = build_run_config(template, fixed + ["seed=0"])
    if args.profile:
        _profile([build_run_config(template, fixed + [f"seed={k}"]) for k in range(args.profile)])
        return 0

    task = build_task(probe.task)
    model = build_model(probe.model, len(task.vocab), task.max_length)
    flops_per_token = model.flops_per_token(task.max_length)
    cuda = torch.cuda.is_available() and probe.train.device != "cpu"
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda and probe.train.precision == "bf16" else torch.float32
    peak = matmul_flops(device, dtype, 4096 if cuda else 1024, repeats=20 if cuda else 5)
    print(f"{args.experiment}:{args.preset}, {probe.model.name}, {model.num_parameters():,} "
          f"parameters, {flops_per_token / 1e6:.1f} MFLOP per trained token, {args.steps} steps "
          f"per size, device {torch.cuda.get_device_name() if cuda else 'cpu'}, matmul peak "
          f"{peak / 1e12:.2f} TFLOP/s ({dtype})", flush=True)

    rows = []
    sizes = [int(k) for k in args.members.split(",")]
    measurements = [(1, True)] if 1 in sizes else []
    measurements += [(size, False) for size in sizes]
    for size, lone in measurements:
        configs = [build_run_config(template, fixed + [f"seed={k}"]) for k in range(size)]
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        row = {"members": size, "execution": "lone" if lone else "ensemble"}
        try:
            summaries = _train(configs, lone, warmup)
        except torch.OutOfMemoryError:
            row["error"] = "out of memory"
            rows.append(row)
            print("  ".join(f"{key} {value}" for key, value in row.items()), flush=True)
            break
        steps_per_second = summaries[0]["train_steps_per_second"]
        tokens_per_second = sum(s["train_tokens_per_second"] for s in summaries)
        row.update({"steps_per_second": significant(steps_per_second),
                    "member_steps_per_second": significant(size * steps_per_second),
                    "tokens_per_second": round(tokens_per_second),
                    "peak_fraction": round(flops_per_token * tokens_per_second / peak, 4)})
        if cuda:
            row["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        rows.append(row)
        print("  ".join(f"{key} {value}" for key, value in row.items()), flush=True)

    grid = None
    measured = [r for r in rows if "member_steps_per_second" in r]
    if args.grid and measured:
        best = max(measured, key=lambda r: r["member_steps_per_second"])
        member_steps = sum(c.train.steps for c in preset_configs)
        tokens_per_member_step = best["tokens_per_second"] / best["member_steps_per_second"]
        floor = member_steps * tokens_per_member_step * flops_per_token / peak
        grid = {"runs": len(preset_configs), "member_steps": member_steps,
                "projected_seconds": round(member_steps / best["member_steps_per_second"]),
                "at": f"{best['members']} member(s), {best['execution']}",
                "floor_seconds_at_matmul_peak": round(floor)}
        print(f"grid: {grid['runs']} runs, {member_steps:,} member-steps; at the best rate "
              f"({grid['at']}) {grid['projected_seconds']} s without early stops; floor at the "
              f"matmul peak {grid['floor_seconds_at_matmul_peak']} s "
              "(runs differ in shape: a projection from the first run's config)")
    if args.json:
        args.json.write_text(json.dumps({"experiment": args.experiment, "preset": args.preset,
                                         "device": torch.cuda.get_device_name() if cuda else "cpu",
                                         "torch": torch.__version__, "rows": rows, "grid": grid},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sweep jobs: which runs train together, and the function that trains one job.

A job is one run, or several runs trained as one ensemble (same shapes, differing only
in seed and scalar hyperparameters; see :mod:`sglab.train.ensemble`). Every backend
(local process pool, Ray) executes the same :func:`run_job`, so a job behaves the same
wherever it runs: finished runs are skipped, unfinished ones resume from their
checkpoints, and a failure is recorded in the run's summary instead of stopping the
other runs.
"""

from __future__ import annotations

import os
import traceback
from collections import Counter
from pathlib import Path

from sglab.config import RunConfig

MAX_ENSEMBLE_MEMBERS = 8  # on a CPU
MAX_GPU_ENSEMBLE_MEMBERS = 64


def available_cores() -> int:
    """CPU cores this process may use (respects CPU affinity, e.g. in containers)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


# On a GPU a member whose step already holds this many tokens trains faster alone: the lone
# path has fused attention and dropout, the vmapped one materialises every attention pattern
# and draws keyed dropout masks. Measured on one H100 (symmetry paper model, dropout 0.2):
# 65,536 tokens a step (packed rows): lone 21.5 steps/s, ensembles of 1 and 2 members 3.9
# and 3.8 member-steps/s; ~3,300 tokens a step (one example per row): lone 15.6 steps/s,
# 16 members 145 member-steps/s. The threshold lies between the two measured points.
GPU_ENSEMBLE_MAX_TOKENS = 16_384

# On a CPU the stacked step only pays for tiny steps, where it amortises the per-call
# overhead of K lone steps; larger steps run slower stacked (bigger working set). Measured
# with benchmarks/gpu_throughput.py on this project's 2-core CPU, one thread, torch 2.13,
# member-steps/s of K-member ensembles over a lone run: symmetry quick model at batch 16
# (208 tokens a step) K=2 0.83x, K=4 1.26x; at batch 32 (416) 0.74x / 1.06x; symmetry
# quick (830) 0.86x / 0.96x; symmetry default (1,660) 0.87-0.91x / 0.82x; init-scale
# default (2,300) 0.92x / 0.78x; topics default (3,200) 1.03x / 1.05x; moe-lm at context
# 128 (4,096) 0.58x at K=2. A DNC, whose ops see the batch rows one time step at a time,
# gains: repeat copy 0.20 s an iteration alone, 0.54 s for 3 stacked members (1.11x). So a
# member whose ops see this many rows or more (member_rows_per_op) trains alone on a CPU:
# the transformer seeds of every `default` preset do, DNC and FNN seeds batch.
CPU_ENSEMBLE_MAX_ROWS = 512


_TASK_SHAPES: dict[str, tuple[int, int]] = {}  # task config (JSON) -> (vocabulary, longest row)


def task_shape(config: RunConfig) -> tuple[int, int]:
    """The task's vocabulary size and longest row, which size its model (each distinct
    task config is built once per process)."""
    from sglab.tasks import build_task

    key = config.task.model_dump_json()
    if key not in _TASK_SHAPES:
        task = build_task(config.task)
        _TASK_SHAPES[key] = (len(task.vocab), task.max_length)
    return _TASK_SHAPES[key]


def member_tokens_per_step(config: RunConfig) -> int:
    """Tokens in one training step of one member: batch rows x the task's longest row."""
    return config.train.batch_size * task_shape(config)[1]


# Models whose ops see one batch row at a time, not every position at once: the DNC steps
# through time, an FNN reads a row as one flat vector.
ROW_AT_A_TIME_MODELS = frozenset({"dnc", "fnn"})


# Models that compile their one-step function under ``train.compile`` (the DNC); a vmapped
# ensemble cannot use it, and compiled lone runs are faster than stacked eager members:
# associative recall at `default` size (DNC-MDS, batch 16, one thread, with one other job
# on the 2 cores) 0.027 s an iteration compiled alone (600 iterations, compiling from the
# on-disk cache included), 0.067 eager alone, 0.144 for 3 stacked eager members (0.048 a
# member); repeat copy 0.027 compiled alone, 0.164 for 3 stacked members.
STEP_COMPILED_MODELS = frozenset({"dnc"})


def member_rows_per_op(config: RunConfig) -> int:
    """How many rows one op of a member's step works on, which decides whether stacking
    members amortises per-op overhead on a CPU: the step's tokens for models that process
    every position at once, the batch rows for :data:`ROW_AT_A_TIME_MODELS`."""
    if config.model.name in ROW_AT_A_TIME_MODELS:
        return config.train.batch_size
    return member_tokens_per_step(config)


def ensembles_pay_off(config: RunConfig) -> bool:
    """Whether batching this run with others is worth it on the device it trains on. Never
    for a :data:`STEP_COMPILED_MODELS` model with ``train.compile`` (an ensemble would
    compile its whole vmapped forward, unrolled over time). On a GPU when a member's step is
    small (it leaves the GPU launch-bound), not when it holds ``GPU_ENSEMBLE_MAX_TOKENS``
    tokens or more. On a CPU only without dropout, for decoder-only models and while a
    member's ops see fewer than ``CPU_ENSEMBLE_MAX_ROWS`` rows (:func:`member_rows_per_op`):
    the stacked step saves little there, and lone runs keep the exact dropout masks and run
    ids of a lone run."""
    import torch

    from sglab.models.dropout import dropout_fields_on

    if config.train.compile and config.model.name in STEP_COMPILED_MODELS:
        return False
    device = config.train.device
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        return member_tokens_per_step(config) < GPU_ENSEMBLE_MAX_TOKENS
    if dropout_fields_on(config.model) or getattr(config.model, "encoder_decoder", False):
        return False
    return member_rows_per_op(config) < CPU_ENSEMBLE_MAX_ROWS


def members_for_memory(member_bytes: int, budget_bytes: int,
                       cap: int = MAX_GPU_ENSEMBLE_MEMBERS) -> int:
    """How many members of ``member_bytes`` each fit in ``budget_bytes`` (at least 1, at
    most ``cap``)."""
    return max(1, min(cap, budget_bytes // max(member_bytes, 1)))


def estimated_member_bytes(config: RunConfig, parameters: int, tokens_per_step: int) -> int:
    """A member's training memory: fp32 weights, gradients and two Adam moments (16 bytes a
    parameter) plus activations (about 16 floats of width d_model per token and layer,
    attention patterns not counted)."""
    width = getattr(config.model, "d_model", 256)
    layers = getattr(config.model, "n_layers", 1)
    return 16 * parameters + 4 * 16 * width * layers * tokens_per_step


def _count_parameters(build_model, config: RunConfig) -> int:
    """The model's parameter count, from a model built on the meta device (no memory) or,
    where a model's construction needs real values (frozen rows picked by a mask), on the CPU."""
    import torch

    vocab_size, max_length = task_shape(config)
    try:
        with torch.device("meta"):
            model = build_model(config.model, vocab_size, max_length)
    except (NotImplementedError, RuntimeError):
        model = build_model(config.model, vocab_size, max_length)
    return sum(p.numel() for p in model.parameters())


def gpu_member_limits(configs: list[RunConfig], workers: int,
                      printer=print) -> dict[str, int] | int:
    """Ensemble sizes for a sweep on a GPU: per ensemble key, as many members as fit in the
    free GPU memory shared by ``workers`` (estimated from one member's parameters and
    tokens per step, :func:`estimated_member_bytes`). On a CPU: ``MAX_ENSEMBLE_MEMBERS``."""
    import torch

    from sglab.train.ensemble import ensemble_key

    if not torch.cuda.is_available() or not any(c.train.device != "cpu" for c in configs):
        return MAX_ENSEMBLE_MEMBERS
    from sglab.models import build_model

    budget = int(0.8 * torch.cuda.mem_get_info()[0] / max(workers, 1))
    limits: dict[str, int] = {}
    for config in configs:
        key = ensemble_key(config)
        if key is None or key in limits or not ensembles_pay_off(config):
            continue
        parameters = _count_parameters(build_model, config)
        member = estimated_member_bytes(config, parameters, member_tokens_per_step(config))
        limits[key] = members_for_memory(member, budget)
        printer(f"sweep: {config.model.name} ({parameters:,} parameters, ~{member / 2**20:.0f} "
                f"MiB a member): up to {limits[key]} members per ensemble in "
                f"{budget / 2**30:.1f} GiB of GPU memory per worker")
    return limits


def executions(configs: list[RunConfig], ensemble: bool) -> list[str]:
    """How a sweep trains each config: as an ensemble member when another config of the
    sweep shares its :func:`ensemble_key` and ensembles pay off on its device
    (:func:`ensembles_pay_off`; also when the planner then splits the group so that a job
    holds one member), else alone. It depends on the sweep's configs and the device kind,
    never on the number of workers, and so does every run id."""
    from sglab.train.ensemble import ensemble_key

    keys: list[str | None] = []
    for config in configs:
        key = ensemble_key(config) if ensemble else None
        # only then ensembles_pay_off, which may build the task to count a step's tokens
        keys.append(key if key is not None and ensembles_pay_off(config) else None)
    sizes = Counter(key for key in keys if key is not None)
    return ["ensemble" if key is not None and sizes[key] > 1 else "alone" for key in keys]


def sweep_run_ids(configs: list[RunConfig], ensemble: bool,
                  modes: list[str] | None = None) -> list[str]:
    """The run id each config of a sweep trains under (see :func:`executions`; ``modes``:
    their result, when the caller has it already)."""
    from sglab.train.loop import execution_run_id

    modes = executions(configs, ensemble) if modes is None else modes
    return [execution_run_id(config, execution) for config, execution in zip(configs, modes)]


def _is_finished(run_id: str, runs_dir: Path) -> bool:
    import json

    path = runs_dir / run_id / "summary.json"
    try:
        return json.loads(path.read_text()).get("status") == "finished"
    except (OSError, ValueError):
        return False


def plan_jobs(configs: list[RunConfig], runs_dir: str | Path, ensemble: bool = True,
              min_jobs: int = 1,
              max_members: int | dict[str, int] = MAX_ENSEMBLE_MEMBERS) -> list[list[int]]:
    """Group config indices into jobs.

    Unfinished runs with equal :func:`ensemble_key` form ensembles of at most
    ``max_members`` (one number, or one per ensemble key: :func:`gpu_member_limits`); the
    largest ensembles are split until there are at least
    ``min_jobs`` jobs (so that every worker has work). Finished runs become jobs of
    their own (they are only re-recorded, which is instant). Jobs come biggest first
    (:func:`expected_work`), finished ones last.
    """
    from sglab.train.ensemble import ensemble_key

    runs_dir = Path(runs_dir)
    groups: dict[str, list[int]] = {}
    jobs: list[list[int]] = []
    run_ids, modes = sweep_run_ids(configs, ensemble), executions(configs, ensemble)
    finished = [_is_finished(run_id, runs_dir) for run_id in run_ids]
    for i, config in enumerate(configs):
        if modes[i] == "alone" or finished[i]:
            jobs.append([i])
        else:
            groups.setdefault(ensemble_key(config), []).append(i)
    if isinstance(max_members, dict):  # per group (e.g. sized for GPU memory)
        limits = {key: max_members.get(key, MAX_ENSEMBLE_MEMBERS) for key in groups}
    else:
        limits = {key: max_members for key in groups}
    for key, members in groups.items():
        n_chunks = -(-len(members) // limits[key])
        if n_chunks > 1:  # split anyway: into a multiple of the workers, so none idles
            n_chunks = -(-n_chunks // min_jobs) * min_jobs
        jobs.extend(members[c::n_chunks] for c in range(n_chunks))
    while jobs and len(jobs) < min_jobs:
        largest = max(jobs, key=len)
        if len(largest) < 2:
            break
        jobs.remove(largest)
        jobs.extend([largest[: len(largest) // 2], largest[len(largest) // 2:]])
    # longest first, so that the last job to start is a short one (ties: config order)
    work = [0 if done else expected_work(config) for done, config in zip(finished, configs)]
    return sorted(jobs, key=lambda job: (-sum(work[i] for i in job), job[0]))


def expected_work(config: RunConfig) -> int:
    """A rough size of a run's training, by which a sweep starts its biggest jobs first
    (workers take jobs in order; with the biggest last, one worker trains it alone at the
    end while the others idle): steps x batch rows x layer applications per step
    (``model.n_layers``, the shared layer's training steps for the NDR; 1 for a model
    without layers). It ignores width and sequence length, which vary less within one
    experiment than steps and depth do."""
    layers = getattr(config.model, "n_layers", None) or 1
    return config.train.steps * config.train.batch_size * layers


def run_job(config_data: list[dict], runs_dir: str, threads: int | None, tag: str | None,
            quiet: bool, execution: str = "alone") -> list[dict]:
    """Train one job in this process; returns one summary per run. ``execution`` (see
    :func:`executions`): ``ensemble`` trains the configs as members of one ensemble, even
    a job of one; ``alone`` trains each as a lone run."""
    import torch

    from sglab.config import validate
    from sglab.errors import RunBusyError
    from sglab.store import RunStore
    from sglab.train.ensemble import EnsembleTrainer
    from sglab.train.extend import extend_shorter_twin
    from sglab.train.loop import Trainer

    if threads:
        torch.set_num_threads(threads)
    configs = [validate(RunConfig, data) for data in config_data]
    printer = None if quiet else (lambda line: print(line, flush=True))
    store = RunStore(runs_dir)
    trainers = [Trainer(c, runs_dir, store=store, printer=printer, tag=tag, execution=execution)
                for c in configs]
    try:
        if execution == "alone":
            for trainer in trainers:  # a finished shorter twin: train it on, not from step 0
                twin = extend_shorter_twin(runs_dir, trainer.config)
                if twin and printer:
                    printer(f"[{trainer.run_id}] extends the finished run {twin}")
            return [trainer.run(resume=True) for trainer in trainers]
        return EnsembleTrainer(configs, runs_dir, store=store, printer=printer, tag=tag).run()
    except RunBusyError as exc:  # another process trains it: leave its files alone
        return [{"run_id": t.run_id, "status": "busy", "error": str(exc)} for t in trainers]
    except Exception as exc:  # record and go on with the other jobs
        summaries = []
        for trainer in trainers:
            previous = trainer.read_summary() or {}
            if previous.get("status") == "finished":
                summaries.append(previous)
                continue
            summary = {"run_id": trainer.run_id, "status": "failed",
                       "error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc()}
            trainer.run_dir.mkdir(parents=True, exist_ok=True)
            trainer._write_summary(summary)
            summaries.append(summary)
        return summaries


def describe_jobs(jobs: list[list[int]]) -> str:
    ensembles = [job for job in jobs if len(job) > 1]
    if not ensembles:
        return f"{len(jobs)} job(s), no ensembles"
    sizes = sorted({len(job) for job in ensembles})
    return (f"{len(jobs)} job(s): {len(ensembles)} ensemble(s) of "
            f"{'/'.join(map(str, sizes))} runs, {len(jobs) - len(ensembles)} single run(s)")


def target_value(summary: dict) -> tuple[str | None, float | None]:
    """The run's target metric (summaries before it was recorded: ``test/exact_match``)
    and its value at the last evaluation."""
    metric = summary.get("target_metric", "test/exact_match")
    return metric, (summary.get("final") or {}).get(metric) if metric else None


def summary_line(summary: dict) -> str:
    metric, value = target_value(summary)
    shown = f" {metric} {value:.4f}" if isinstance(value, (int, float)) else ""
    if summary.get("status") == "failed" and summary.get("error"):
        shown += f" ({summary['error'].splitlines()[0]})"
    return f"{summary.get('run_id')} {summary.get('status')}{shown}"

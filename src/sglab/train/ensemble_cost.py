"""What training runs as one ensemble costs and gains: a member's step size, its memory, and
whether stacking members pays off on a device (:mod:`sglab.train.ensemble` trains them;
the sweep planner, :mod:`sglab.sweep.jobs`, decides with these).
"""

from __future__ import annotations

from sglab.config import RunConfig

MAX_ENSEMBLE_MEMBERS = 8  # on a CPU
MAX_GPU_ENSEMBLE_MEMBERS = 64


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


def count_parameters(config: RunConfig, build_model=None) -> int:
    """The model's parameter count, from a model built on the meta device (no memory) or,
    where a model's construction needs real values (frozen rows picked by a mask), on the CPU
    (``build_model``: the factory, :func:`sglab.models.build_model` by default)."""
    import torch

    if build_model is None:
        from sglab.models import build_model

    vocab_size, max_length = task_shape(config)
    try:
        with torch.device("meta"):
            model = build_model(config.model, vocab_size, max_length)
    except (NotImplementedError, RuntimeError):
        model = build_model(config.model, vocab_size, max_length)
    return sum(p.numel() for p in model.parameters())

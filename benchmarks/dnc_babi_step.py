"""Training speed of the token DNC at the ``dnc-babi`` preset sizes, without the bAbI files.

    python benchmarks/dnc_babi_step.py                       # default and paper, 1 thread
    python benchmarks/dnc_babi_step.py --preset paper --steps 3 --length 120

One iteration is what the Trainer does per step: forward over a batch of stories of
``--length`` tokens (random words of a bAbI-sized vocabulary, one answer word after every
``--question-every`` tokens), cross-entropy on the answer words, backward, gradient clip and
the preset's RMSProp step. A single-layer LSTM DNC costs the same per time step whatever
the words, so random stories of the right length time the real ones; the step time grows
linearly with the story length (the en-10k stories range from tens to hundreds of words).
Also reports the forward-only cost of one evaluation batch per time step.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import parse_with_quick

from sglab import registry
from sglab.config import build_run_config
from sglab.models import build_model
from sglab.tasks.base import IGNORE, target_loss
from sglab.train.loop import make_optimizer

VOCABULARY = 180  # en-10k, all 20 tasks: about 180 distinct words with the null token


def story_batch(batch: int, length: int, question_every: int, generator: torch.Generator):
    tokens = torch.randint(1, VOCABULARY, (batch, length), generator=generator)
    targets = torch.full_like(tokens, IGNORE)
    answers = torch.arange(question_every - 1, length, question_every)
    targets[:, answers] = torch.randint(1, VOCABULARY, (batch, len(answers)), generator=generator)
    return tokens, targets


def measure(preset: str, variant: str, steps: int, length: int, question_every: int,
            eval_batch: int) -> dict:
    params = registry.experiment("dnc-babi").presets[preset]
    config = build_run_config(params["base"], {"model.variant": variant, "train.threads": 1})
    model = build_model(config.model, VOCABULARY, length)
    optimizer = make_optimizer(model, config.train, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    batch = config.train.batch_size
    times = []
    for _ in range(steps + 1):  # the first iteration warms up and is not counted
        tokens, targets = story_batch(batch, length, question_every, generator)
        start = time.perf_counter()
        loss = target_loss(model(tokens), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimizer.step()
        times.append(time.perf_counter() - start)
    per_iteration = sum(times[1:]) / steps
    with torch.no_grad():
        tokens, _ = story_batch(eval_batch, length, question_every, generator)
        start = time.perf_counter()
        model(tokens)
        evaluation = time.perf_counter() - start
    return {"preset": preset, "variant": variant, "batch": batch, "story_tokens": length,
            "parameters": sum(p.numel() for p in model.parameters()),
            "seconds_per_iteration": round(per_iteration, 3),
            "ms_per_time_step": round(1000 * per_iteration / length, 2),
            "iterations": config.train.steps,
            "hours_for_iterations": round(per_iteration * config.train.steps / 3600, 2),
            "eval_batch": eval_batch,
            "eval_ms_per_story_token": round(1000 * evaluation / (eval_batch * length), 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("default", "paper"), action="append")
    parser.add_argument("--variant", default="DNC-MD")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--length", type=int, default=100, help="tokens per story")
    parser.add_argument("--question-every", type=int, default=20)
    parser.add_argument("--eval-batch", type=int, default=64)
    args = parse_with_quick(parser, {"preset": ["default"], "steps": 2, "length": 30,
                                     "eval_batch": 8})
    torch.set_num_threads(1)
    for preset in args.preset or ("default", "paper"):
        print(json.dumps(measure(preset, args.variant, args.steps, args.length,
                                 args.question_every, args.eval_batch)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

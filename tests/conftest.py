import os
import textwrap

import pytest
import torch

from sglab.config import build_run_config
from sglab.models import build_model
from sglab.tasks import build_task

# no test writes to the user's data cache; tests of the cache point it at a temp dir
os.environ["SGLAB_DATA_CACHE"] = "off"


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def tiny_config(*overrides: str):
    """A config that trains in about a second."""
    return build_run_config({}, [
        "task.train_size=500", "task.test_size=200", "model.n_layers=2", "model.n_heads=2",
        "model.d_model=16", "train.steps=30", "train.batch_size=16", "train.eval_interval=10",
        "train.checkpoint_interval=10", "train.log_interval=10", "train.warmup_steps=5",
        "train.threads=1", *overrides,
    ])


def tiny_model(*overrides: str, seed: int = 0):
    config = tiny_config(*overrides)
    task = build_task(config.task)
    torch.manual_seed(seed)
    return task, build_model(config.model, len(task.vocab), task.max_length)


def trainer_paused_at(eval_step: int, seconds: int) -> str:
    """Source of a script that trains the config of its command line (runs dir, then
    overrides) and sleeps for ``seconds`` once evaluation ``eval_step`` is printed, so a
    test can kill it or race it there."""
    return textwrap.dedent(f"""
        import sys, time, torch
        torch.set_num_threads(1)
        from sglab.config import build_run_config
        from sglab.train import Trainer
        config = build_run_config({{}}, sys.argv[2:])
        def printer(line):
            print(line, flush=True)
            if "eval @ {eval_step}" in line:
                time.sleep({seconds})
        Trainer(config, sys.argv[1], printer=printer).run()
    """)

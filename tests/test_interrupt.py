import os
import re
import signal
import subprocess
import sys
import threading

import pytest
import torch

from sglab.cli import main
from sglab.config import build_run_config
from sglab.store import read_metrics
from sglab.train import Trainer
from sglab.train.interrupt import first_ctrl_c

OVERRIDES = ["task.train_size=500", "task.test_size=200", "model.n_layers=1", "model.n_heads=2",
             "model.d_model=16", "train.steps=400", "train.batch_size=16", "train.eval_interval=100",
             "train.checkpoint_interval=100", "train.log_interval=5", "train.warmup_steps=5",
             "train.threads=1"]


def _weights(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]


def test_ctrl_c_checkpoints_says_how_to_resume_and_resumes_bit_identically(tmp_path, capsys):
    config = build_run_config({}, OVERRIDES)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglab.cli", "train", "--runs-dir", str(tmp_path / "runs"),
         *[f"--set={o}" for o in OVERRIDES]],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        if " step 20/" in line:
            proc.send_signal(signal.SIGINT)
            break
    output = proc.stdout.read()
    assert proc.wait() == 130
    match = re.search(r"interrupted at step (\d+); resume with: sglab train --resume (\S+)", output)
    assert match, output
    step, run_id = int(match.group(1)), match.group(2)
    assert run_id == config.run_id() and 20 <= step < 400
    run_dir = tmp_path / "runs" / run_id
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["step"] == step

    assert main(["train", "--resume", run_id, "--runs-dir", str(tmp_path / "runs")]) == 0
    Trainer(config, tmp_path / "clean", printer=None).run()
    resumed, clean = _weights(run_dir), _weights(tmp_path / "clean" / run_id)
    assert all(torch.equal(resumed[name], clean[name]) for name in clean)
    timeless = lambda path: [{k: v for k, v in record.items() if k != "seconds"}
                             for record in read_metrics(path, kind="all")]
    assert timeless(run_dir) == timeless(tmp_path / "clean" / run_id)


def test_interruptions_survive_a_pickle_round_trip():
    # a pool worker's TrainingInterrupted is pickled to the sweep process that started it
    import pickle

    from sglab.errors import SweepInterrupted, TrainingInterrupted

    for exc in (TrainingInterrupted(20, ["a"]), TrainingInterrupted(7, ["a", "b"]),
                SweepInterrupted(["a", "b"], 3)):
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and str(again) == str(exc)
        assert vars(again) == vars(exc)


def _press_ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)


def test_first_ctrl_c_sets_the_event_and_the_second_stops_at_once():
    before = signal.getsignal(signal.SIGINT)
    presses = []
    with first_ctrl_c(on_press=lambda: presses.append(1)) as pressed:
        assert not pressed.is_set()
        _press_ctrl_c()
        assert pressed.is_set() and presses == [1]
        with pytest.raises(KeyboardInterrupt):
            _press_ctrl_c()
    assert signal.getsignal(signal.SIGINT) is before


def test_a_stop_asked_before_makes_the_first_ctrl_c_the_second():
    asked = threading.Event()
    asked.set()
    presses = []
    with first_ctrl_c(asked, on_press=lambda: presses.append(1)) as pressed:
        assert pressed is asked
        with pytest.raises(KeyboardInterrupt):
            _press_ctrl_c()
    assert presses == []


def test_outside_the_main_thread_no_handler_is_installed():
    before, seen = signal.getsignal(signal.SIGINT), []

    def worker():
        with first_ctrl_c() as pressed:
            seen.append((pressed.is_set(), signal.getsignal(signal.SIGINT)))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [(False, before)]

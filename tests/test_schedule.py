"""The training schedule (sglab.train.schedule) on its own, without a model.

The learning rate against its formula at the points that tell schedules apart (linear and
cosine decay agree at the start, the middle and the end, not at the quarters), and the
step driver ``run_schedule`` with a stand-in stepper and trainer: what it does at each
step (learning rates, logs, evaluations, checkpoints, snapshots, early stop, a non-finite
loss, a resume, Ctrl-C) and what it writes and prints.
"""

from __future__ import annotations

import json
import math
import os
import signal
from types import SimpleNamespace

import pytest
import torch

from sglab.errors import TrainingInterrupted
from sglab.train import schedule as schedule_module
from sglab.train.schedule import RunProgress, format_seconds, learning_rate, run_schedule

# ----------------------------------------------------------------------------- learning rate


def lr_cfg(**kw):
    values = dict(lr=1.0, min_lr=0.1, warmup_steps=10, steps=110, lr_schedule="cosine")
    values.update(kw)
    return SimpleNamespace(**values)


def cosine(step, lr, min_lr, warmup, steps):
    """nanoGPT: lr * (s + 1) / warmup while s < warmup, then min_lr + 1/2 (1 + cos(pi p))
    (lr - min_lr) with p = (s - warmup) / (steps - warmup) capped at 1."""
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min((step - warmup) / max(steps - warmup, 1), 1.0)
    return min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (lr - min_lr)


@pytest.mark.parametrize("step, expected", [
    (0, 0.1),                                       # start of warmup: lr / warmup
    (4, 0.5),                                       # (4 + 1) / 10
    (9, 1.0),                                       # end of warmup
    (10, 1.0),                                      # after warmup: the peak
    (35, 0.1 + 0.45 * (1 + math.cos(math.pi / 4))),  # a quarter: 0.8682, linear gives 0.775
    (60, 0.55),                                     # half way
    (85, 0.1 + 0.45 * (1 + math.cos(3 * math.pi / 4))),  # three quarters: 0.2318 (linear 0.325)
    (110, 0.1),                                     # the last step: min_lr
    (500, 0.1),                                     # past the end it stays at min_lr
])
def test_cosine_with_warmup_and_min_lr_at_the_points_that_tell_schedules_apart(step, expected):
    assert learning_rate(step, lr_cfg()) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert learning_rate(step, lr_cfg()) == pytest.approx(cosine(step, 1.0, 0.1, 10, 110))


def test_cosine_without_warmup_decays_from_the_first_step():
    cfg = lr_cfg(lr=3e-3, min_lr=0.0, warmup_steps=0, steps=100)
    for step in (0, 1, 25, 50, 75, 99, 100):
        assert learning_rate(step, cfg) == pytest.approx(cosine(step, 3e-3, 0.0, 0, 100))
    assert learning_rate(0, cfg) == 3e-3
    assert learning_rate(25, cfg) == pytest.approx(3e-3 * (1 + math.sqrt(0.5)) / 2)
    assert learning_rate(100, cfg) == pytest.approx(0.0, abs=1e-18)


def test_cosine_is_monotone_and_its_mean_is_the_midpoint():
    cfg = lr_cfg()
    values = [learning_rate(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert sum(values) / len(values) == pytest.approx((1.0 + 0.1) / 2, rel=1e-9)


def test_constant_schedule_keeps_the_peak_after_warmup():
    cfg = lr_cfg(lr_schedule="constant", lr=2e-3, min_lr=1e-5, warmup_steps=4, steps=40)
    assert [learning_rate(s, cfg) for s in range(5)] == pytest.approx(
        [5e-4, 1e-3, 1.5e-3, 2e-3, 2e-3])
    assert {learning_rate(s, cfg) for s in (4, 10, 20, 30, 39, 40, 80)} == {2e-3}
    no_warmup = lr_cfg(lr_schedule="constant", lr=2e-3, warmup_steps=0)
    assert learning_rate(0, no_warmup) == 2e-3


def test_warmup_as_long_as_training_never_divides_by_zero():
    cfg = lr_cfg(warmup_steps=5, steps=5)
    assert [learning_rate(s, cfg) for s in range(5)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert learning_rate(5, cfg) == pytest.approx(1.0)  # span max(0, 1): progress 0
    assert learning_rate(6, cfg) == pytest.approx(0.1)  # progress 1
    assert learning_rate(7, cfg) == pytest.approx(0.1)  # capped


@pytest.mark.parametrize("seconds, text", [
    (0, "0m00s"), (9.4, "0m09s"), (59.6, "1m00s"), (61, "1m01s"), (600, "10m00s"),
    (3599, "59m59s"), (3600, "1h00m"), (3725, "1h02m"), (3600 + 3540, "1h59m"),
    (36000 + 59 * 60 + 59, "10h59m"),
])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


# ----------------------------------------------------------------------------- stand-ins


def train_cfg(**kw):
    values = dict(steps=6, lr=1.0, min_lr=0.0, warmup_steps=0, lr_schedule="constant",
                  log_interval=2, eval_interval=3, checkpoint_interval=4, snapshot_steps=[],
                  grad_clip=None)
    values.update(kw)
    return SimpleNamespace(**values)


class FakeClock:
    """Stands in for time.perf_counter in the schedule: time passes only when told to."""

    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


NO_CLOCK = FakeClock()  # never advanced


class FakeTrainer:
    """Records what the schedule asks of a run's Trainer; an evaluation takes 2 s and a
    checkpoint 4 s of the clock."""

    def __init__(self, run_id, cfg, tmp_path, stop_at=None, clock=NO_CLOCK):
        self.run_id, self.stop_at, self.clock = run_id, stop_at, clock
        self.config = SimpleNamespace(train=cfg)
        self.metrics_path = tmp_path / f"{run_id}.jsonl"
        self.events: list[tuple] = []
        self.arguments: list[tuple] = []  # (event, base, model) as passed

    def snapshot(self, model, step):
        self.events.append(("snapshot", step))
        self.arguments.append(("snapshot", None, model))

    def evaluation(self, run, last):
        self.events.append(("evaluate", run.step, last))
        self.clock.advance(2.0)
        stop = self.stop_at is not None and run.step >= self.stop_at
        return {"step": run.step}, ({"step": 1} if run.step > 3 else None), stop

    def save(self, run):
        self.events.append(("save", run.step))
        self.clock.advance(4.0)

    def finish(self, base, step, stopped_early, seconds, tokens_per_second, steps_per_second,
               best, target, **extra):
        self.events.append(("finish", step, stopped_early))
        return {"status": "finished", "step": step, "stopped_early": stopped_early,
                "seconds": seconds, "tokens_per_second": tokens_per_second,
                "steps_per_second": steps_per_second, "best": best, "target": target,
                "base": base, **extra}

    def fail(self, base, step, problem):
        self.events.append(("fail", step))
        self.arguments.append(("fail", base, None))
        return {"status": "failed", "step": step, "error": problem}

    def interrupted(self, base, step):
        self.events.append(("interrupted", step))
        self.arguments.append(("interrupted", base, None))

    def records(self):
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines()]


class FakeStepper:
    """Losses by (run id, step) (default 1.0), ``tokens`` per run and step; a step takes
    ``seconds`` of the clock."""

    def __init__(self, runs, losses=None, on_step=None, tokens=10, clock=NO_CLOCK,
                 seconds=0.5):
        self.runs = list(runs)
        self.losses = losses or {}
        self.on_step = on_step
        self.tokens, self.clock, self.seconds = tokens, clock, seconds
        self.calls: list[tuple] = []  # (run ids, lrs)
        self.synced: list[tuple] = []
        self.removed: list[list[int]] = []

    def step(self, runs, lrs):
        assert [r.run_id for r in runs] == [r.run_id for r in self.runs]
        self.calls.append(([r.run_id for r in runs], list(lrs)))
        if self.on_step:
            self.on_step(runs)
        self.clock.advance(self.seconds)
        return ([torch.tensor(self.losses.get((r.run_id, r.step + 1), 1.0)) for r in runs],
                [self.tokens] * len(runs))

    def sync(self, index):
        self.synced.append((self.runs[index].run_id, self.runs[index].step))

    def remove(self, indices):
        self.removed.append(list(indices))
        self.runs = [r for k, r in enumerate(self.runs) if k not in indices]


def schedule(runs, stepper, printer=lambda line: None, **kw):
    """run_schedule; a TrainingInterrupted (a KeyboardInterrupt, which would stop pytest
    itself) where no Ctrl-C came is a test failure."""
    try:
        return run_schedule(runs, stepper, printer, **kw)
    except TrainingInterrupted as stopped:
        raise AssertionError(f"interrupted without a Ctrl-C: {stopped}") from None


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(schedule_module, "time", SimpleNamespace(perf_counter=fake))
    return fake


def make_run(tmp_path, run_id="a", device="cpu", stop_at=None, clock=NO_CLOCK, **cfg):
    trainer = FakeTrainer(run_id, train_cfg(**cfg), tmp_path, stop_at, clock)
    run = RunProgress(trainer, task=None, model=object(), optimizer=None, generator=None,
                      device=torch.device("cpu"), norm_names=[])
    if device != "cpu":  # the schedule reads only its type (a GPU: "cuda")
        run.device = SimpleNamespace(type=device)
    run.base = {"run_id": run_id}
    return run


# ----------------------------------------------------------------------------- the driver


def test_a_lone_run_logs_evaluates_checkpoints_and_finishes_on_schedule(tmp_path):
    run = make_run(tmp_path, steps=6, snapshot_steps=[0, 5], lr_schedule="cosine",
                   warmup_steps=2, lr=1.0, min_lr=0.0)
    stepper = FakeStepper([run], losses={("a", 1): 3.0, ("a", 2): 5.0, ("a", 5): 2.0})
    lines: list[str] = []
    summaries = schedule([run], stepper, lines.append)
    assert list(summaries) == ["a"]
    summary = summaries["a"]
    assert summary["status"] == "finished" and summary["step"] == 6
    assert summary["stopped_early"] is False and "ensemble_size" not in summary
    assert summary["best"] == {"step": 6} and summary["target"] == {"step": 1}
    assert summary["base"] == {"run_id": "a"}
    assert summary["tokens_per_second"] > 0 and summary["steps_per_second"] > 0
    assert summary["seconds"] >= 0
    # learning rates of steps 0..5: warmup 0.5, 1.0, then cosine over the 4 remaining steps
    lrs = [lr[0] for _, lr in stepper.calls]
    assert lrs == pytest.approx([0.5, 1.0, 1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5,
                                 0.5 * (1 + math.cos(3 * math.pi / 4))])
    assert run.step == 6 and run.lr == pytest.approx(lrs[-1])
    assert run.trainer.events == [
        ("snapshot", 0), ("evaluate", 3, False), ("save", 4), ("snapshot", 5),
        ("evaluate", 6, True), ("save", 6), ("finish", 6, False)]
    assert stepper.synced == [("a", 3), ("a", 4), ("a", 5), ("a", 6)]
    assert stepper.removed == [[0]]
    records = run.trainer.records()
    assert [(r["kind"], r["step"], r["train/loss"]) for r in records] == [
        ("train", 2, 4.0), ("train", 4, 1.0), ("train", 6, 1.5)]
    assert [r["lr"] for r in records] == pytest.approx([lrs[1], lrs[3], lrs[5]])
    assert all(r["seconds"] >= 0 for r in records) and run.metric_lines == 3
    assert run.log.file.closed
    assert len(lines) == 3
    assert lines[0].startswith("[a] step 2/6 loss 4.0000 lr 1.00e+00 | ")
    assert lines[2].startswith("[a] step 6/6 loss 1.5000 lr ")
    assert " steps/s " in lines[0] and "k tok/s | ETA " in lines[0]
    assert lines[2].endswith("ETA 0m00s")


def test_an_ensemble_logs_one_line_for_all_members_and_members_leave_at_their_end(tmp_path):
    short = make_run(tmp_path, "short", steps=4, log_interval=2, eval_interval=4,
                     checkpoint_interval=4)
    long = make_run(tmp_path, "long", steps=6, log_interval=2, eval_interval=4,
                    checkpoint_interval=4)
    stepper = FakeStepper([short, long], losses={("short", 1): 2.0, ("long", 1): 4.0})
    lines: list[str] = []
    summaries = schedule([short, long], stepper, lines.append, ensemble_size=2)
    assert [s["ensemble_size"] for s in summaries.values()] == [2, 2]
    assert summaries["short"]["step"] == 4 and summaries["long"]["step"] == 6
    assert [ids for ids, _ in stepper.calls] == [["short", "long"]] * 4 + [["long"]] * 2
    assert stepper.removed == [[0], [0]]  # the short one at step 4, then the long one
    assert short.trainer.events == [("evaluate", 4, True), ("save", 4), ("finish", 4, False)]
    assert long.trainer.events == [("evaluate", 4, False), ("save", 4), ("evaluate", 6, True),
                                   ("save", 6), ("finish", 6, False)]
    assert lines[0].startswith("[ensemble x2] step 2/6 mean loss 2.0000 | ")  # (1.5 + 2.5) / 2
    assert "member-steps/s | ETA " in lines[0]
    assert lines[1].startswith("[ensemble x2] step 4/6 mean loss 1.0000 | ")
    assert lines[2].startswith("[long] step 6/6 loss 1.0000 lr ")  # alone again: its own line
    assert [r["train/loss"] for r in short.trainer.records()] == [1.5, 1.0]


def test_early_stop_checkpoints_and_finishes_the_run_as_stopped(tmp_path):
    run = make_run(tmp_path, steps=12, eval_interval=3, checkpoint_interval=5, stop_at=6)
    stepper = FakeStepper([run])
    summary = schedule([run], stepper, lambda line: None)["a"]
    assert summary["stopped_early"] is True and summary["step"] == 6
    assert run.trainer.events == [("evaluate", 3, False), ("save", 5), ("evaluate", 6, False),
                                  ("save", 6), ("finish", 6, True)]
    assert len(stepper.calls) == 6


def test_a_non_finite_loss_fails_the_run_at_its_step_on_a_cpu(tmp_path):
    run = make_run(tmp_path, steps=10, log_interval=5, grad_clip=0.5)
    other = make_run(tmp_path, "b", steps=10, log_interval=5)
    stepper = FakeStepper([run, other], losses={("a", 3): math.inf})
    lines: list[str] = []
    summaries = schedule([run, other], stepper, lines.append)
    failed = summaries["a"]
    assert failed["status"] == "failed" and failed["step"] == 3
    assert failed["error"].startswith(
        "training loss became inf at step 3 (lr 1, grad_clip 0.5); the run stopped as failed.")
    assert "Lower train.lr, or set train.grad_clip" in failed["error"]
    assert lines[0] == f"[a] {failed['error']}"
    assert run.trainer.events == [("fail", 3)]
    assert stepper.removed[0] == [0]
    assert summaries["b"]["status"] == "finished" and summaries["b"]["step"] == 10
    assert run.log.file.closed


def test_off_the_cpu_the_loss_is_checked_when_the_run_logs(tmp_path):
    run = make_run(tmp_path, device="cuda", steps=10, log_interval=4, eval_interval=100,
                   checkpoint_interval=100)
    stepper = FakeStepper([run], losses={("a", 2): math.nan})
    summary = schedule([run], stepper, lambda line: None)["a"]
    assert summary["status"] == "failed" and summary["step"] == 4
    assert "became nan between steps 1 and 4 (lr 1, grad_clip off)" in summary["error"]
    assert len(stepper.calls) == 4


def test_a_run_resumed_at_its_end_finishes_without_a_step(tmp_path):
    done = make_run(tmp_path, steps=6)
    done.restored({"step": 6, "elapsed": 12.5, "best": {"step": 6}, "target": None,
                   "metric_lines": 3})
    going = make_run(tmp_path, "b", steps=6)
    stepper = FakeStepper([done, going])
    summaries = schedule([done, going], stepper, lambda line: None)
    assert summaries["a"]["step"] == 6 and summaries["a"]["best"] == {"step": 6}
    assert summaries["a"]["seconds"] >= 12.5
    assert done.trainer.events == [("finish", 6, False)]
    assert stepper.removed[0] == [0]
    assert {tuple(ids) for ids, _ in stepper.calls} == {("b",)}
    assert not done.trainer.metrics_path.exists()  # nothing more written for it


def test_restored_takes_the_progress_and_the_open_loss_window(tmp_path):
    run = make_run(tmp_path)
    run.restored(None)
    assert (run.step, run.elapsed, run.best, run.target, run.metric_lines) == (0, 0.0, None,
                                                                                None, 0)
    window = {"loss_sum": torch.tensor(6.0), "steps": 3, "tokens": 30}
    run.restored({"step": 7, "elapsed": 2.0, "best": {"x": 1}, "target": {"y": 2},
                  "metric_lines": 4, "loss_window": window})
    assert (run.step, run.elapsed, run.best, run.target, run.metric_lines) == (
        7, 2.0, {"x": 1}, {"y": 2}, 4)
    assert run.window_state() == {"loss_sum": torch.tensor(6.0), "steps": 3, "tokens": 30}
    assert run.seconds() >= 2.0
    assert run.take_window() == (2.0, 3, 30)
    assert run.window_state()["loss_sum"].item() == 0.0
    assert run.take_window() == (0.0, 0, 0)  # an empty window divides by one
    run.restored({"step": 8, "elapsed": 1.0})  # an older checkpoint: no window, no records
    assert (run.best, run.target, run.metric_lines) == (None, None, 0)


def test_a_resumed_run_continues_the_schedule_and_the_loss_window(tmp_path):
    run = make_run(tmp_path, steps=6, log_interval=4, eval_interval=100,
                   checkpoint_interval=100)
    run.restored({"step": 3, "elapsed": 0.0, "metric_lines": 0,
                  "loss_window": {"loss_sum": torch.tensor(9.0), "steps": 3, "tokens": 30}})
    stepper = FakeStepper([run], losses={("a", 4): 3.0})
    schedule([run], stepper, lambda line: None)
    assert len(stepper.calls) == 3
    records = run.trainer.records()
    assert [(r["step"], r["train/loss"]) for r in records] == [(4, 3.0), (6, 1.0)]


def test_ctrl_c_stops_after_the_step_with_every_run_checkpointed(tmp_path):
    runs = [make_run(tmp_path, "a", steps=10), make_run(tmp_path, "b", steps=10)]

    def interrupt(active):
        if active[0].step == 1:  # during the second step
            os.kill(os.getpid(), signal.SIGINT)

    stepper = FakeStepper(runs, on_step=interrupt)
    lines: list[str] = []
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as stopped:
        run_schedule(runs, stepper, lines.append)
    assert stopped.value.step == 2 and stopped.value.run_ids == ["a", "b"]
    assert signal.getsignal(signal.SIGINT) is before
    assert len(stepper.calls) == 2
    assert lines[0] == ("Ctrl-C: stopping after this step with a checkpoint (Ctrl-C again "
                        "to stop at once)")
    assert lines[1].startswith("[ensemble x2] step 2/10 mean loss 1.0000")
    for run in runs:
        assert run.trainer.events == [("save", 2), ("interrupted", 2)]
        assert run.log.file.closed
    assert stepper.synced == [("a", 2), ("b", 2)]


def test_loss_problem_names_the_step_or_the_window(tmp_path):
    run = make_run(tmp_path, steps=10)
    run.step, run.window_steps, run.window_loss = 5, 1, torch.tensor(1.0)
    assert run.loss_problem(True) is None
    run.window_loss = torch.tensor(-math.inf)
    run.lr = 0.00123
    assert run.loss_problem(False).startswith("training loss became -inf at step 5 (lr 0.00123, ")
    run.window_steps = 3
    assert "between steps 3 and 5" in run.loss_problem(False)
    assert "at step 5" in run.loss_problem(True)


# ----------------------------------------------------------------------------- times and rates


def test_rates_eta_and_run_seconds_follow_the_clock_less_the_pauses(tmp_path, clock):
    """A step takes 0.5 s, an evaluation 2 s and a checkpoint 4 s; the rates count only
    training time. Timeline: steps 1-3 end at 100.5, 101, 101.5; the evaluation at step 3
    pauses 2 s; step 4 ends at 104: the first window is 4 steps in 104 - 100 - 2 = 2 s."""
    run = make_run(tmp_path, steps=6, log_interval=4, eval_interval=3, checkpoint_interval=100,
                   clock=clock)
    run.elapsed = 0.12345  # time of an earlier process (a resume)
    stepper = FakeStepper([run], tokens=1_000_000, clock=clock)
    lines: list[str] = []
    summary = schedule([run], stepper, lines.append)["a"]
    assert lines[0] == ("[a] step 4/6 loss 1.0000 lr 1.00e+00 | 2.0 steps/s 2000.0k tok/s | "
                        "ETA 0m01s")  # (6 - 4) steps x 2 s / 4 steps
    # second window: steps 5 and 6 in 1 s, then the last evaluation (2 s) and checkpoint (4 s)
    assert lines[1] == ("[a] step 6/6 loss 1.0000 lr 1.00e+00 | 2.0 steps/s 2000.0k tok/s | "
                        "ETA 0m00s")
    records = run.trainer.records()
    assert [r["seconds"] for r in records] == [4.123, 5.123]  # since launch, rounded to ms
    assert summary["seconds"] == pytest.approx(11.12345)  # 111 - 100 + the earlier 0.12345
    assert summary["tokens_per_second"] == pytest.approx(6_000_000 / 3.0)
    assert summary["steps_per_second"] == pytest.approx(6 / 3.0)
    assert run.train_tokens == 6_000_000


def test_long_gaps_between_logged_steps_get_progress_lines_that_record_nothing(
        tmp_path, clock, monkeypatch):
    monkeypatch.setattr(schedule_module, "PROGRESS_SECONDS", 1.0)
    run = make_run(tmp_path, steps=6, log_interval=6, eval_interval=100,
                   checkpoint_interval=100, clock=clock)
    lines: list[str] = []
    schedule([run], FakeStepper([run], clock=clock), lines.append)  # 0.5 s a step
    assert lines == ["[a] step 2/6 | 2.0 steps/s | ETA 0m02s (loss logged every 6 steps)",
                     "[a] step 4/6 | 2.0 steps/s | ETA 0m01s (loss logged every 6 steps)",
                     "[a] step 6/6 loss 1.0000 lr 1.00e+00 | 2.0 steps/s 0.0k tok/s | ETA 0m00s"]
    # the logged window still spans all 6 steps; one loss record, as without the progress lines
    assert [r["step"] for r in run.trainer.records()] == [6]
    runs = [make_run(tmp_path, name, steps=4, log_interval=4, eval_interval=100,
                     checkpoint_interval=100, clock=clock) for name in ("b", "c")]
    lines = []
    schedule(runs, FakeStepper(runs, clock=clock), lines.append, ensemble_size=2)
    assert lines[0] == "[ensemble x2] step 2/4 | 2.0 steps/s | ETA 0m01s (loss logged every 4 steps)"


def test_a_one_step_window_estimates_the_rest_from_that_step(tmp_path, clock):
    run = make_run(tmp_path, steps=3, log_interval=1, eval_interval=100,
                   checkpoint_interval=100, clock=clock)
    lines: list[str] = []
    schedule([run], FakeStepper([run], tokens=1000, clock=clock), lines.append)
    assert [line.split("| ")[1] for line in lines] == ["2.0 steps/s 2.0k tok/s "] * 3
    assert [line.split("ETA ")[1] for line in lines] == ["0m01s", "0m00s", "0m00s"]
    # (3 - 1) x 0.5 s / 1 step = 1 s; then (3 - 2) x 0.5 = 0.5 s rounds to even, 0 s


def test_ensemble_rates_count_member_steps(tmp_path, clock):
    runs = [make_run(tmp_path, name, steps=4, log_interval=4, eval_interval=100,
                     checkpoint_interval=100, clock=clock) for name in ("a", "b")]
    lines: list[str] = []
    summaries = schedule(runs, FakeStepper(runs, tokens=1000, clock=clock), lines.append,
                         ensemble_size=2)
    # 4 steps in 2 s; both members' tokens: 8000 in 2 s
    assert lines == ["[ensemble x2] step 4/4 mean loss 1.0000 | 2.0 steps/s 4.0k tok/s, "
                     "4.0 member-steps/s | ETA 0m00s"]
    assert [s["tokens_per_second"] for s in summaries.values()] == [2000.0, 2000.0]
    assert [s["steps_per_second"] for s in summaries.values()] == [2.0, 2.0]


def test_a_member_that_logs_alone_in_an_ensemble_gets_the_ensemble_line(tmp_path):
    short = make_run(tmp_path, "short", steps=3, log_interval=2, eval_interval=100,
                     checkpoint_interval=100)
    long = make_run(tmp_path, "long", steps=4, log_interval=4, eval_interval=100,
                    checkpoint_interval=100)
    lines: list[str] = []
    schedule([short, long], FakeStepper([short, long]), lines.append)
    # step 2: short logs (long does not), 2 active; step 3: short's last step, alone logging
    assert [line.split(" |")[0] for line in lines] == [
        "[ensemble x2] step 2/3 mean loss 1.0000", "[ensemble x2] step 3/3 mean loss 1.0000",
        "[long] step 4/4 loss 1.0000 lr 1.00e+00"]


@pytest.mark.parametrize("step, bookkeeping", [
    (1, False), (4, True), (6, True), (7, True), (10, True), (11, True), (13, False),
    (21, False), (39, True), (40, True),
])
def test_bookkeeping_steps_log_evaluate_checkpoint_snapshot_or_end(step, bookkeeping):
    """39 steps; log every 4, evaluate every 6, checkpoint every 10, snapshots at 7 and 11
    (4: log; 6: evaluate; 10: checkpoint; 7, 11: snapshot; 39: the last; 40: past it;
    13 and 21 leave remainder 1 everywhere)."""
    cfg = train_cfg(steps=39, log_interval=4, eval_interval=6, checkpoint_interval=10,
                    snapshot_steps=[7, 11])
    assert schedule_module._bookkeeping_step(SimpleNamespace(step=step, cfg=cfg)) is bookkeeping


def test_a_fresh_run_progress_starts_empty_on_its_device(tmp_path):
    trainer = FakeTrainer("a", train_cfg(), tmp_path)
    run = RunProgress(trainer, task="task", model="model", optimizer="opt", generator="gen",
                      device=torch.device("meta"), norm_names=["w"])
    assert (run.task, run.model, run.optimizer, run.generator) == ("task", "model", "opt", "gen")
    assert run.norm_names == ["w"] and run.cfg is trainer.config.train and run.run_id == "a"
    assert (run.step, run.elapsed, run.metric_lines, run.best, run.target) == (0, 0.0, 0, None,
                                                                                None)
    assert run.base == {} and run.lr == 0.0 and run.log is None
    assert (run.window_steps, run.window_tokens, run.train_tokens) == (0, 0, 0)
    assert run.window_loss.device.type == "meta" and run.window_loss.shape == ()
    run.restored({"step": 1, "elapsed": 0.0,
                  "loss_window": {"loss_sum": torch.tensor(1.0), "steps": 1, "tokens": 4}})
    assert run.window_loss.device.type == "meta"  # the open window moves to the run's device


def test_seconds_count_from_launch_and_restarts_at_a_resume(tmp_path, clock):
    run = make_run(tmp_path, clock=clock)
    clock.advance(3.0)
    assert run.seconds() == 3.0
    run.restored({"step": 2, "elapsed": 10.0})
    clock.advance(1.5)
    assert run.seconds() == 11.5


def test_a_window_of_one_step_is_that_steps_loss(tmp_path):
    run = make_run(tmp_path)
    run.window_loss, run.window_steps, run.window_tokens = torch.tensor(3.0), 1, 7
    assert run.take_window() == (3.0, 1, 7)


def test_ctrl_c_during_a_lone_run_and_what_it_hands_the_trainer(tmp_path):
    run = make_run(tmp_path, steps=10, snapshot_steps=[0])
    stepper = FakeStepper([run], on_step=lambda active: os.kill(os.getpid(), signal.SIGINT))
    with pytest.raises(TrainingInterrupted) as stopped:
        run_schedule([run], stepper, lambda line: None)
    assert stopped.value.step == 1 and stopped.value.run_ids == ["a"]
    assert run.trainer.events == [("snapshot", 0), ("save", 1), ("interrupted", 1)]
    assert run.trainer.arguments == [("snapshot", None, run.model),
                                     ("interrupted", {"run_id": "a"}, None)]


def test_a_failed_run_and_its_snapshots_get_the_runs_base_and_model(tmp_path):
    run = make_run(tmp_path, steps=10, snapshot_steps=[1])
    schedule([run], FakeStepper([run], losses={("a", 2): math.nan}))
    assert run.trainer.events == [("snapshot", 1), ("fail", 2)]
    assert run.trainer.arguments == [("snapshot", None, run.model), ("fail", {"run_id": "a"},
                                                                     None)]


def test_the_non_finite_loss_message_in_full(tmp_path):
    run = make_run(tmp_path, steps=10)
    run.step, run.window_steps, run.window_loss, run.lr = 4, 1, torch.tensor(math.nan), 0.5
    assert run.loss_problem(True) == (
        "training loss became nan at step 4 (lr 0.5, grad_clip off); the run stopped as "
        "failed. Lower train.lr, or set train.grad_clip (e.g. 1.0), and train again")


def test_every_pause_of_a_window_is_left_out_of_its_rate(tmp_path, clock):
    """Step 2 evaluates (2 s), step 3 checkpoints (4 s): the window of steps 1-4 spans
    100 -> 108 with 6 s of pauses, so 4 steps took 2 s."""
    run = make_run(tmp_path, steps=8, log_interval=4, eval_interval=2, checkpoint_interval=3,
                   clock=clock)
    lines: list[str] = []
    schedule([run], FakeStepper([run], tokens=1000, clock=clock), lines.append)
    assert lines[0].split("| ")[1] == "2.0 steps/s 2.0k tok/s "

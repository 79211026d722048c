"""Fault injection: damage runs the way users and machines do, and print what happened.

    python benchmarks/faults.py            # about a minute on 2 CPU cores
    python benchmarks/faults.py --quick    # the faults that take a few seconds each
    python benchmarks/faults.py --only bit_flip --only ctrl_c

Each fault is injected against the real command line (``python -m sglab.cli``) in a
temporary directory; the table lists the fault, the expected behaviour and what was
observed. The exit status is 1 if any observation differs from the expectation.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import parse_with_quick

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))  # the sglab of this checkout, as the commands below run it
TINY = ["task.train_size=500", "task.test_size=200", "model.n_layers=1", "model.n_heads=2",
        "model.d_model=16", "train.batch_size=16", "train.warmup_steps=5", "train.threads=1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}


def sglab(*args: str, runs: Path, extra: list[str] = (), **popen) -> subprocess.Popen:
    fresh_run = args[0] == "train" and not {"--resume", "--extend"} & set(args)
    sets = [f"--set={o}" for o in [*TINY, *extra]] if fresh_run else []
    env = popen.pop("env", ENV)
    return subprocess.Popen([sys.executable, "-m", "sglab.cli", *args, "--runs-dir", str(runs),
                             *sets], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            **popen)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    output, _ = proc.communicate()
    return proc.returncode, output


def run_id_of(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("run ") and " in " in line:
            return line.split()[1]
    raise RuntimeError(f"no run id in:\n{output}")


def last_line(text: str) -> str:
    """The message a user would read: the error line if there is one, else the last line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    chosen = next((line for line in lines if line.startswith(("error:", "interrupted"))),
                  lines[-1] if lines else "")
    return " ".join(part if "/tmp" not in part else "'.../" + part.rsplit("/", 1)[-1]
                    for part in chosen.split(" "))[:100]


def bit_flip(tmp: Path) -> tuple[bool, str]:
    code, out = finish(sglab("train", runs=tmp, extra=["train.steps=20"]))
    run_dir = tmp / run_id_of(out)
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    checkpoint = run_dir / "checkpoints" / "last.pt"
    data = bytearray(checkpoint.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0x5A for b in data[middle:middle + 64])
    checkpoint.write_bytes(bytes(data))
    code, out = finish(sglab("train", "--resume", run_dir.name, runs=tmp))
    return code == 2 and "last.pt" in out, f"exit {code}: {last_line(out)}"


def concurrent_launch(tmp: Path) -> tuple[bool, str]:
    extra = ["train.steps=100000", "train.log_interval=10"]
    first = sglab("train", runs=tmp, extra=extra)
    for line in first.stdout:
        if " step 10/" in line:
            break
    code, out = finish(sglab("train", runs=tmp, extra=extra))
    first.kill()
    first.wait()
    return code == 2 and f"process {first.pid}" in out, f"exit {code}: {last_line(out)}"


def sigkill_pool_parent(tmp: Path) -> tuple[bool, str]:
    spec = tmp / "grid.yaml"
    base = {"task": {"name": "addition", "train_size": 300, "test_size": 50},
            "model": {"n_layers": 1, "n_heads": 1, "d_model": 8},
            "train": {"steps": 100000, "batch_size": 8, "log_interval": 50}}
    spec.write_text(json.dumps({"name": "k", "base": base,
                                "grid": {"model.pos_encoding": ["learned", "none"]}}))
    sweep = sglab("sweep", str(spec), "--workers", "2", "--no-ensemble", "--out",
                  str(tmp / "out"), runs=tmp / "runs")
    seen = set()
    for line in sweep.stdout:
        if " step 50/" in line:
            seen.add(line.split("]")[0])
        if len(seen) == 2:
            break
    workers = children(sweep.pid)
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.monotonic() + 20
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [p for p in workers if alive(p)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    return not survivors and len(workers) >= 2, f"{len(workers)} workers, {len(survivors)} survived"


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def nan_loss(tmp: Path) -> tuple[bool, str]:
    code, out = finish(sglab("train", runs=tmp, extra=[
        "train.steps=200", "train.lr=10000", "train.grad_clip=null", "train.warmup_steps=0",
        "train.lr_schedule=constant"]))
    run_dir = next(p for p in tmp.iterdir() if p.is_dir())
    strict = True
    for path in (run_dir / "metrics.jsonl", run_dir / "summary.json"):
        text = path.read_text()
        try:
            for part in (text.splitlines() if path.suffix == ".jsonl" else [text]):
                json.loads(part, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
        except ValueError:
            strict = False
    status = json.loads((run_dir / "summary.json").read_text())["status"]
    return (code == 2 and status == "failed" and strict,
            f"exit {code}, status {status}, strict JSON {strict}")


def ctrl_c(tmp: Path) -> tuple[bool, str]:
    proc = sglab("train", runs=tmp, extra=["train.steps=100000", "train.log_interval=10"])
    for line in proc.stdout:
        if " step 20/" in line:
            proc.send_signal(signal.SIGINT)
            break
    code, out = finish(proc)
    return code == 130 and "resume with: sglab train --resume" in out, f"exit {code}: {last_line(out)}"


def empty_sweep_file(tmp: Path) -> tuple[bool, str]:
    (tmp / "empty.yaml").write_text("")
    code, out = finish(sglab("sweep", str(tmp / "empty.yaml"), runs=tmp / "runs"))
    return code == 2 and not (tmp / "runs").exists(), f"exit {code}: {last_line(out)}"


def damaged_summary(tmp: Path) -> tuple[bool, str]:
    code, out = finish(sglab("train", runs=tmp, extra=["train.steps=10"]))
    run_dir = tmp / run_id_of(out)
    (run_dir / "summary.json").write_text('{"run_id": "trunc')
    code, out = finish(sglab("train", "--resume", run_dir.name, runs=tmp))
    reindex_code, reindex = finish(sglab("runs", "--reindex", runs=tmp))
    named = f"skipped {run_dir.name}" in reindex
    return (code == 2 and "damaged" in out and named,
            f"exit {code}: {last_line(out)}; reindex names it: {named}")


def runs_dir_is_a_file(tmp: Path) -> tuple[bool, str]:
    (tmp / "file").write_text("x")
    code, out = finish(sglab("runs", runs=tmp / "file"))
    return code == 2 and "Traceback" not in out, f"exit {code}: {last_line(out)}"


def unknown_where_key(tmp: Path) -> tuple[bool, str]:
    finish(sglab("train", runs=tmp, extra=["train.steps=10"]))
    code, out = finish(sglab("runs", "--where", "model.pos_encodng=none", runs=tmp))
    return code == 2, f"exit {code}: {last_line(out)}"


def member_and_lone_run(tmp: Path) -> tuple[bool, str]:
    spec = tmp / "grid.yaml"
    base = {"task": {"name": "addition", "train_size": 300, "test_size": 50},
            "model": {"n_layers": 1, "n_heads": 1, "d_model": 8},
            "train": {"steps": 20, "batch_size": 8, "eval_interval": 10, "warmup_steps": 2}}
    spec.write_text(json.dumps({"name": "m", "base": base, "seeds": 2}))
    finish(sglab("sweep", str(spec), "--workers", "1", "--out", str(tmp / "out"), runs=tmp))
    (tmp / "base.yaml").write_text(json.dumps(base))
    code, out = finish(subprocess.Popen(
        [sys.executable, "-m", "sglab.cli", "train", "--runs-dir", str(tmp), "--config",
         str(tmp / "base.yaml")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=ENV))
    executions = sorted(json.loads(p.read_text())["execution"]
                        for p in tmp.glob("*/summary.json"))
    retrained = "already finished" not in out
    return (code == 0 and retrained and executions == ["alone", "ensemble", "ensemble"],
            f"lone run trained: {retrained}; executions {executions}")


def ctrl_c_pool_sweep(tmp: Path) -> tuple[bool, str]:
    spec = tmp / "grid.yaml"
    base = {"task": {"name": "addition", "train_size": 300, "test_size": 50},
            "model": {"n_layers": 1, "n_heads": 1, "d_model": 8},
            "train": {"steps": 100000, "batch_size": 8, "log_interval": 50,
                      "eval_interval": 100000, "checkpoint_interval": 100000}}
    spec.write_text(json.dumps({"name": "c", "base": base,
                                "grid": {"model.pos_encoding": ["learned", "none"]}}))
    sweep = sglab("sweep", str(spec), "--workers", "2", "--no-ensemble", "--out",
                  str(tmp / "out"), runs=tmp / "runs", start_new_session=True)
    seen = set()
    for line in sweep.stdout:
        if " step 50/" in line:
            seen.add(line.split("]")[0])
        if len(seen) == 2:
            break
    os.killpg(sweep.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches every process
    try:
        code, out = finish(sweep)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    statuses = sorted(json.loads(p.read_text())["status"] for p in tmp.glob("runs/*/summary.json"))
    ok = (code == 130 and "resume with: the same command" in out and "Traceback" not in out
          and statuses == ["interrupted", "interrupted"])
    return ok, f"exit {code}: {last_line(out)}; statuses {statuses}"


def empty_run_id(tmp: Path) -> tuple[bool, str]:
    code, out = finish(sglab("train", "--resume", "", runs=tmp / "runs"))
    code2, out2 = finish(sglab("train", "--extend", "", "--steps", "10", runs=tmp / "runs"))
    return (code == 2 and code2 == 2 and "empty run id" in out + out2
            and not (tmp / "runs").exists(), f"exit {code}/{code2}: {last_line(out)}")


def _tiny_config(extra: list[str]):
    from sglab.config import build_run_config

    return build_run_config({}, [*TINY, *extra])


def cache_pickle(tmp: Path) -> tuple[bool, str]:
    import gzip
    import io

    import torch

    from sglab.tasks import cache

    class Planted:
        def __reduce__(self):
            return open, (str(tmp / "pwned"), "w")

    config = _tiny_config(["train.steps=5"])
    path = cache.cache_path(config.task, tmp / "cache")
    buffer = io.BytesIO()
    torch.save({"format": cache.FORMAT, "config": config.task.model_dump_json(),
                "state": Planted(), "tensors": []}, buffer)
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(buffer.getvalue()))
    code, out = finish(sglab("train", runs=tmp / "runs", extra=["train.steps=5"],
                             env={**ENV, "SGLAB_DATA_CACHE": str(tmp / "cache")}))
    ran = (tmp / "pwned").exists()
    warned = "cannot read" in out
    return (code == 0 and not ran and warned,
            f"exit {code}; code ran: {ran}; rebuilt with a warning: {warned}")


def lock_symlink(tmp: Path) -> tuple[bool, str]:
    config = _tiny_config(["train.steps=5"])
    target = tmp / "precious.txt"
    target.write_text("keep me")
    run_dir = tmp / "runs" / config.run_id()
    run_dir.mkdir(parents=True)
    (run_dir / ".lock").symlink_to(target)
    code, out = finish(sglab("train", runs=tmp / "runs", extra=["train.steps=5"]))
    kept = target.read_text() == "keep me"
    return code == 2 and kept, f"exit {code}: {last_line(out)}; target kept: {kept}"


def corrupt_index(tmp: Path) -> tuple[bool, str]:
    finish(sglab("train", runs=tmp, extra=["train.steps=5"]))
    for name in ("runs.db-wal", "runs.db-shm"):
        (tmp / name).unlink(missing_ok=True)
    (tmp / "runs.db").write_bytes(b"not a database " * 100)
    code, out = finish(sglab("runs", runs=tmp))
    reindex_code, reindex = finish(sglab("runs", "--reindex", runs=tmp))
    rebuilt = "indexed 1 runs" in reindex and "1 run(s)" in reindex
    return (code == 2 and "--reindex" in out and reindex_code == 0 and rebuilt,
            f"exit {code}: {last_line(out)}; reindex exit {reindex_code}, rebuilt: {rebuilt}")


FAULTS: list[tuple[str, str, Callable[[Path], tuple[bool, str]]]] = [
    ("64 bytes of last.pt XOR-ed", "resume refused, exit 2, file named", bit_flip),
    ("same config launched twice", "second exits 2 naming the holder", concurrent_launch),
    ("kill -9 of sweep --workers 2", "no worker survives", sigkill_pool_parent),
    ("lr 1e4 without clipping", "status failed, exit 2, strict JSON", nan_loss),
    ("Ctrl-C during training", "exit 130, says how to resume", ctrl_c),
    ("empty sweep file", "exit 2, nothing written", empty_sweep_file),
    ("damaged summary.json", "exit 2; reindex names the run", damaged_summary),
    ("--runs-dir names a file", "exit 2, no traceback", runs_dir_is_a_file),
    ("runs --where with a typo", "exit 2", unknown_where_key),
    ("config as member, then alone", "two runs, execution recorded", member_and_lone_run),
    ("Ctrl-C of sweep --workers 2", "exit 130, runs interrupted, resumable", ctrl_c_pool_sweep),
    ("--resume '' / --extend ''", "exit 2, nothing trained", empty_run_id),
    ("code-running pickle in data cache", "no code runs; rebuilt with a warning", cache_pickle),
    ("run's .lock is a symlink", "exit 2, link target untouched", lock_symlink),
    ("runs.db overwritten with garbage", "exit 2 naming --reindex; reindex rebuilds", corrupt_index),
]


QUICK = ("bit_flip", "empty_sweep_file", "runs_dir_is_a_file", "unknown_where_key",
         "empty_run_id", "cache_pickle", "lock_symlink")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=[f[2].__name__ for f in FAULTS],
                        help="inject only this fault (repeatable)")
    args = parse_with_quick(parser, {"only": list(QUICK)}, argv)
    rows, failures = [], 0
    for fault, expected, inject in FAULTS:
        if args.only and inject.__name__ not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            try:
                ok, observed = inject(Path(tmp))
            except Exception as exc:  # the injection itself broke: report it as observed
                ok, observed = False, f"{type(exc).__name__}: {exc}"
            rows.append((fault, expected, observed, ok, time.perf_counter() - started))
            failures += not ok
            print(f"{'ok ' if ok else 'BAD'} {fault}: {observed}", file=sys.stderr, flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"| {'fault':{widths[0]}} | {'expected':{widths[1]}} | {'observed':{widths[2]}} | ok | s |")
    print(f"|{'-' * (widths[0] + 2)}|{'-' * (widths[1] + 2)}|{'-' * (widths[2] + 2)}|----|---|")
    for fault, expected, observed, ok, seconds in rows:
        print(f"| {fault:{widths[0]}} | {expected:{widths[1]}} | {observed:{widths[2]}} | "
              f"{'yes' if ok else 'NO'} | {seconds:.0f} |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

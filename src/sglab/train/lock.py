"""One process per run directory: a lock file holding the PID and host of its trainer.

The lock is an exclusive ``flock`` on ``<run_dir>/.lock``. The kernel releases it when
the process ends in any way (SIGKILL included), so a lock file left behind by a dead
process is stale by construction and the next trainer takes it over; a live holder makes
the second process stop with a :class:`RunBusyError` that names it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from sglab.errors import RunBusyError

LOCK_NAME = ".lock"


class RunLock:
    """``with RunLock(run_dir):`` -- hold the run directory for this process."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None
        self._created_dir = False

    def holder(self) -> dict:
        """What the lock file says about its holder (empty if unreadable)."""
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def acquire(self) -> None:
        self._created_dir = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunBusyError(self._busy_message()) from None
            try:  # the holder before us may have removed the file it locked: lock the new one
                same_file = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode())
        self._fd = fd

    def _busy_message(self) -> str:
        holder = self.holder()
        who = (f"process {holder.get('pid', '?')} on {holder.get('host', '?')} "
               f"(since {holder.get('since', '?')})" if holder else "another process")
        return (f"run {self.run_dir.name} is being trained by {who}; wait for it to end, or "
                f"stop that process. (The lock is {str(self.path)!r}; it frees itself when its "
                "holder exits.)")

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None
        if self._created_dir:
            try:
                self.run_dir.rmdir()  # only if nothing was written (e.g. the task failed to build)
            except OSError:
                pass

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


__all__ = ["LOCK_NAME", "RunLock"]

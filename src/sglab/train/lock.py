"""One process per run directory: a lock file holding the PID and host of its trainer.

The lock is an exclusive ``flock`` on ``<run_dir>/.lock``. The kernel releases it when
the process ends in any way (SIGKILL included), so a lock file left behind by a dead
process is stale by construction and the next trainer takes it over; a live holder makes
the second process stop with a :class:`RunBusyError` that names it.

The lock file is opened without following a symbolic link (``O_NOFOLLOW``) and made with
``O_CREAT | O_EXCL``: a link planted at ``.lock`` is an error, never a file overwritten
elsewhere.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path

from sglab.errors import RunBusyError, SglabError
from sglab.store import LOCK_FILE

LOCK_NAME = LOCK_FILE


class RunLock:
    """``with RunLock(run_dir):`` -- hold the run directory for this process."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None
        self._created_dir = False

    def holder(self) -> dict:
        """What the lock file says about its holder (empty if unreadable or a link)."""
        if self.path.is_symlink():
            return {}
        try:
            holder = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return holder if isinstance(holder, dict) else {}

    def _open(self) -> int:
        """The lock file, opened read-write: made (``O_EXCL``) or, left by an earlier holder,
        opened as it is; never through a symbolic link, and only a regular file."""
        flags = os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        while True:
            try:
                try:
                    fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    fd = os.open(self.path, flags | os.O_NONBLOCK)
            except FileNotFoundError:  # removed between the two opens: make it again
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP or self.path.is_symlink():
                    raise SglabError(
                        f"the lock file {str(self.path)!r} is a symbolic link (to "
                        f"{os.readlink(self.path)!r}); a run's lock is a plain file, and sglab "
                        "does not write through a link it did not make. Remove the link and "
                        "rerun (and find out who planted it)") from None
                raise
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
            raise SglabError(f"the lock file {str(self.path)!r} is not a regular file; remove "
                             "it and rerun")

    def acquire(self) -> None:
        if self.run_dir.is_symlink() and not self.run_dir.exists():
            raise SglabError(f"run directory {str(self.run_dir)!r} is a symbolic link to "
                             f"{os.readlink(self.run_dir)!r}, which does not exist; restore "
                             "its target or remove the link, then rerun")
        self._created_dir = not self.run_dir.exists()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise SglabError(f"cannot make the run directory {str(self.run_dir)!r}: a file is in "
                             "the way; move it and rerun") from None
        while True:
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunBusyError(self._busy_message()) from None
            try:  # the holder before us may have removed the file it locked: lock the new one
                same_file = os.lstat(self.path).st_ino == os.fstat(fd).st_ino
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

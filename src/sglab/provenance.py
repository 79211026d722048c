"""What code produced a result: sglab's version, a hash of its source and the git commit.

Run summaries and experiment results record :func:`provenance`, so that a result can be
traced to the code that trained it and a run trained under other code is never taken for
one of this code's (see ``sglab.sweep``: reuse across a source change is announced).
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent


def fingerprint(paths: Iterable[Path], root: Path) -> str:
    """SHA-256 over the files' names (relative to ``root``) and contents, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def source_hash() -> str:
    """The first 16 hex digits of the fingerprint of every module of the sglab package."""
    return fingerprint(PACKAGE_DIR.rglob("*.py"), PACKAGE_DIR)[:16]


@lru_cache(maxsize=1)
def git_commit() -> dict[str, Any] | None:
    """``{"commit": SHA, "dirty": bool}`` of the checkout sglab is installed from (dirty: its
    source differs from the commit), or None outside a git checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=PACKAGE_DIR, capture_output=True,
                                  text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return {"commit": commit, "dirty": bool(status)}


def version() -> str:
    from sglab import __version__

    return __version__


def provenance() -> dict[str, Any]:
    """``{"version", "source_hash", "commit", "dirty"}`` (commit and dirty None outside git)."""
    commit = git_commit() or {}
    return {"version": version(), "source_hash": source_hash(),
            "commit": commit.get("commit"), "dirty": commit.get("dirty")}


def describe(record: dict[str, Any] | None) -> str:
    """``0.1.0 (source 1a2b3c4d5e6f7a8b, commit 1234567, modified)`` or ``unrecorded``."""
    if not record:
        return "unrecorded (trained before sglab recorded its source)"
    parts = [f"source {record.get('source_hash')}"]
    if record.get("commit"):
        parts.append(f"commit {record['commit'][:7]}" + (", modified" if record.get("dirty") else ""))
    return f"{record.get('version')} ({', '.join(parts)})"

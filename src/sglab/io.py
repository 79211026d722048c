"""File writing that never leaves a half-written file, and checksummed payloads.

This module sits below every other part of sglab (it imports only the standard
library and :mod:`sglab.errors`), so tasks, training, analysis and reports can all use it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(file)`` on a temp file beside ``path``, fsync it and rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, lambda f: f.write(text.encode()))


def finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float (nan, inf) replaced by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def json_line(data: Any) -> str:
    """One line of strict JSON (non-finite floats become null, never a bare ``NaN``)."""
    return json.dumps(finite_or_none(data), allow_nan=False)


def atomic_write_json(path: Path, data: Any) -> None:
    text = json.dumps(finite_or_none(data), indent=2, sort_keys=True, allow_nan=False)
    atomic_write_text(path, text + "\n")


def sha256_hex(*parts: bytes) -> str:
    """SHA-256 (hex) of the concatenated ``parts``."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def print_line(line: str) -> None:
    """Print ``line`` and its newline in one write and flush: processes printing to one pipe
    (a sweep's workers) then interleave whole lines, never a line and another's newline."""
    print(line + "\n", end="", flush=True)


__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "finite_or_none",
           "json_line", "print_line", "sha256_hex"]

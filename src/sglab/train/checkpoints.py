"""Atomic checkpoint files: written to a temporary file, fsynced, then renamed."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from sglab.errors import SglabError

FORMAT_VERSION = 1
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: Path, write) -> None:
    """Call ``write(file)`` on a temp file beside ``path`` and rename it into place."""
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


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    state = {"format_version": FORMAT_VERSION, **state}
    atomic_write_bytes(path, lambda f: torch.save(state, f))


def load_checkpoint(path: Path, expected_hash: str | None = None,
                    required: tuple[str, ...] = ("step", "model")) -> dict[str, Any]:
    """Load and check a checkpoint; any damage is a clear SglabError, never a silent restart."""
    what_to_do = (f"Delete {str(path.parent.parent)!r} to train this run again from scratch, "
                  "or restore the file from a backup.")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise SglabError(f"checkpoint {str(path)!r} does not exist") from None
    except Exception as exc:  # truncated zip, bad pickle, wrong file type, ...
        raise SglabError(
            f"checkpoint {str(path)!r} is corrupt or truncated ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}). {what_to_do}"
        ) from None
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise SglabError(f"checkpoint {str(path)!r} is not an sglab checkpoint. {what_to_do}")
    missing = [k for k in required if k not in state]
    if missing:
        raise SglabError(f"checkpoint {str(path)!r} lacks {missing}. {what_to_do}")
    if expected_hash is not None and state.get("config_hash") != expected_hash:
        raise SglabError(
            f"checkpoint {str(path)!r} belongs to a different config than this run's config.yaml. "
            f"{what_to_do}"
        )
    return state

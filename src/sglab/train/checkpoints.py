"""Checkpoints: written atomically, with a SHA-256 of their contents that is checked on load.

A checkpoint is an ordinary ``torch.save`` archive (``torch.load`` reads it) holding one
more entry, ``sglab_sha256``: the SHA-256 over the name and bytes of every other entry.
:func:`load_checkpoint` recomputes it, so a flipped bit anywhere in the data is an error,
never a silent resume. Files written before checksums existed (format 1) still load.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import torch

from sglab.errors import SglabError
from sglab.io import (  # re-exported: older code imports the atomic writers from here
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    sha256_hex,
)

FORMAT_VERSION = 2
_UNCHECKED_VERSIONS = (1,)  # written before checksums
CHECKSUM_ENTRY = "sglab_sha256"


def _contents_digest(archive: zipfile.ZipFile, prefix: str) -> str:
    parts: list[bytes] = []
    for name in sorted(archive.namelist()):
        if name == f"{prefix}/{CHECKSUM_ENTRY}":
            continue
        content = archive.read(name)
        parts += [name.encode(), len(content).to_bytes(8, "little"), content]
    return sha256_hex(*parts)


def _prefix(archive: zipfile.ZipFile) -> str:
    return archive.namelist()[0].split("/", 1)[0]


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **state}, buffer)
    with zipfile.ZipFile(buffer, "a") as archive:
        prefix = _prefix(archive)
        archive.writestr(f"{prefix}/{CHECKSUM_ENTRY}", _contents_digest(archive, prefix))
    atomic_write_bytes(path, lambda f: f.write(buffer.getvalue()))


def _stored_checksum(data: bytes) -> tuple[str | None, str | None]:
    """(checksum written in the file, checksum of its contents); (None, None) without one."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        prefix = _prefix(archive)
        name = f"{prefix}/{CHECKSUM_ENTRY}"
        if name not in archive.namelist():
            return None, None
        return archive.read(name).decode("ascii", errors="replace"), _contents_digest(archive, prefix)


def load_checkpoint(path: Path, expected_hash: str | None = None,
                    required: tuple[str, ...] = ("step", "model")) -> dict[str, Any]:
    """Load and check a checkpoint; any damage is a clear SglabError, never a silent restart."""
    path = Path(path)
    what_to_do = (f"Delete {str(path.parent.parent)!r} to train this run again from scratch, "
                  "or restore the file from a backup.")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SglabError(f"checkpoint {str(path)!r} does not exist") from None
    except OSError as exc:
        raise SglabError(f"cannot read checkpoint {str(path)!r}: {exc.strerror}") from None
    try:
        written, actual = _stored_checksum(data)
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, bad CRC, bad pickle, wrong file type, ...
        raise SglabError(
            f"checkpoint {str(path)!r} is corrupt or truncated ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}). {what_to_do}"
        ) from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise SglabError(f"checkpoint {str(path)!r} is not an sglab checkpoint. {what_to_do}")
    if state["format_version"] not in _UNCHECKED_VERSIONS:
        if state["format_version"] != FORMAT_VERSION or written is None:
            raise SglabError(f"checkpoint {str(path)!r} is not an sglab checkpoint of format "
                             f"{FORMAT_VERSION} (or lost its checksum). {what_to_do}")
        if written != actual:
            raise SglabError(
                f"checkpoint {str(path)!r} is damaged: the SHA-256 of its contents "
                f"({actual[:12]}...) differs from the one written with it ({written[:12]}...). "
                f"{what_to_do}")
    missing = [k for k in required if k not in state]
    if missing:
        raise SglabError(f"checkpoint {str(path)!r} lacks {missing}. {what_to_do}")
    if expected_hash is not None and state.get("config_hash") != expected_hash:
        raise SglabError(
            f"checkpoint {str(path)!r} belongs to a different config than this run's config.yaml. "
            f"{what_to_do}"
        )
    return state


__all__ = ["FORMAT_VERSION", "atomic_write_bytes", "atomic_write_json", "atomic_write_text",
           "load_checkpoint", "save_checkpoint"]


def _is_state_mismatch(exc: BaseException) -> bool:
    """torch's error for a state dict (model or optimizer) that does not fit its module."""
    text = str(exc)
    return "Error(s) in loading state_dict" in text or "loaded state dict" in text


def load_state(target: Any, state: dict[str, Any], path: Path) -> None:
    """``target.load_state_dict(state)`` for a model or optimizer; a state that does not fit
    it (a parameter renamed or reshaped since ``path`` was written) is one SglabError naming
    the checkpoint, not torch's traceback."""
    try:
        target.load_state_dict(state)
    except (RuntimeError, ValueError) as exc:
        if not _is_state_mismatch(exc):
            raise
        text = " ".join(str(exc).split())
        raise SglabError(
            f"checkpoint {str(path)!r} does not fit the model of the run's config "
            f"({text[:297] + '...' if len(text) > 300 else text}): it was written by other "
            "code (a parameter renamed or reshaped since). Train it with the sglab that wrote "
            f"it, or delete {str(path.parent.parent)!r} to train the run again") from None

"""A disk cache of generated task data.

Every :class:`~sglab.tasks.base.GeneratedSplitsTask` builds its vocabulary and splits
from its task config alone, by rules and a seeded generator. Small builds take a second;
big ones take minutes (a million ListOps lists). A build that takes at least
:data:`MIN_SECONDS` is saved (the vocabulary, the splits and every attribute the build
sets on the task), and any later build of the same config, in any process (the next arm
of a sweep, a resumed run, an analysis), loads it instead.

The key is a hash of the task config and of the source of the ``sglab.tasks`` package,
so editing a generator never serves data it would no longer make. Files are written
atomically; an unreadable file is rebuilt and replaced. Integer tensors are stored in the
narrowest integer type that holds their values, the file is gzip-compressed (a million
ListOps lists: 17 MB), and the tensors come back as ``int64``, equal to the built ones
element for element.

A cache file is data only: ``torch.load(..., weights_only=True)`` reads it, so a planted or
damaged file can never run code. It holds the task's tensors (and numpy arrays, as
tensors) and a JSON description of how the task's attributes hold them (lists, dicts,
tuples, sets, numbers, strings, and instances of sglab's task classes, which are rebuilt
attribute by attribute without calling any of their code). A file that does not load that
way (one written by an older sglab included) is rebuilt, with a warning.

One process builds a given config at a time: a build holds a lock file next to the data
file, and another process that needs the same config (the second worker of a sweep starting
on the same data) waits for it and then loads the file instead of building it again.

``SGLAB_DATA_CACHE`` sets the directory (default: ``$XDG_CACHE_HOME/sglab/data``, or
``~/.cache/sglab/data``); ``off`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import gzip
import hashlib
import importlib
import io
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock

from sglab.errors import SglabError
from sglab.io import atomic_write_bytes
from sglab.provenance import fingerprint

ENV = "SGLAB_DATA_CACHE"
MIN_SECONDS = 5.0  # builds faster than this are not worth a file
FORMAT = 3  # 3: data only (weights_only); 2 was a pickle of the task's objects
DATA_PATTERN, LOCK_SUFFIX = "*.pt.gz", ".lock"


def cache_dir() -> Path | None:
    """The cache directory, or None when ``SGLAB_DATA_CACHE=off``."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in ("off", "0", "false", "no"):
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sglab" / "data"


@lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """Hash of every module of ``sglab.tasks``: the code that generates the data."""
    package = Path(__file__).parent
    return fingerprint(package.glob("*.py"), package)


def cache_path(config, directory: Path) -> Path:
    """Where the data of task ``config`` (a pydantic ``TaskConfig``) is cached."""
    digest = hashlib.sha256()
    digest.update(config.model_dump_json().encode())
    digest.update(source_fingerprint().encode())
    return directory / f"{config.name}-{digest.hexdigest()[:20]}.pt.gz"


@dataclasses.dataclass
class _Narrowed:
    """An int64 tensor stored in a narrower integer type."""

    tensor: torch.Tensor


def _narrow(value: Any) -> Any:
    """``value`` with every int64 tensor inside (dataclass fields, dicts, lists, tuples)
    replaced by a :class:`_Narrowed` in the narrowest type that holds its values."""
    if isinstance(value, torch.Tensor):
        if value.dtype != torch.int64 or value.numel() == 0:
            return value
        low, high = int(value.min()), int(value.max())
        for dtype in (torch.int8, torch.int16, torch.int32):
            info = torch.iinfo(dtype)
            if info.min <= low and high <= info.max:
                return _Narrowed(value.to(dtype))
        return value
    return _map(value, _narrow)


def _widen(value: Any) -> Any:
    """Inverse of :func:`_narrow`."""
    if isinstance(value, _Narrowed):
        return value.tensor.to(torch.int64)
    if isinstance(value, torch.Tensor):
        return value
    return _map(value, _widen)


def _map(value: Any, function: Callable[[Any], Any]) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        mapped = copy.copy(value)
        for item in dataclasses.fields(value):
            object.__setattr__(mapped, item.name, function(getattr(value, item.name)))
        return mapped
    if isinstance(value, dict):
        return {key: function(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(function(item) for item in value)
    return value


_KIND = "$"  # the key that marks an encoded value in the JSON description


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _sglab_class(path: Any) -> type:
    """The class ``module:qualname`` of a cache file, which must be one of sglab's own."""
    if not isinstance(path, str) or ":" not in path:
        raise ValueError(f"not a class path: {path!r}")
    module, qualname = path.split(":", 1)
    if not (module == "sglab" or module.startswith("sglab.")):
        raise ValueError(f"class {path} is not one of sglab's")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not isinstance(found, type):
        raise ValueError(f"{path} is not a class")
    return found


def _encode(value: Any, tensors: list[torch.Tensor]) -> Any:
    """``value`` as JSON-able data, its tensors (narrowed, :func:`_narrow`) and numpy arrays
    appended to ``tensors`` and referred to by index. Raises TypeError for what a cache file
    cannot hold as data."""
    import numpy as np
    from pydantic import BaseModel

    if value is None or isinstance(value, (bool, int, float, str)) and type(value) in (
            bool, int, float, str):
        return value
    if isinstance(value, torch.Tensor):
        narrowed = _narrow(value.detach().cpu())
        wide = isinstance(narrowed, _Narrowed)
        tensors.append(narrowed.tensor if wide else narrowed)
        return {_KIND: "tensor", "i": len(tensors) - 1, "wide": wide}
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf" and value.dtype.str.lstrip("<>|=") not in ("u2", "u4", "u8"):
            native = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("="))
            encoded = _encode(torch.from_numpy(native).clone(), tensors)
            return {_KIND: "ndarray", "dtype": value.dtype.str, "tensor": encoded}
        if value.dtype.kind == "O":
            raise TypeError("numpy arrays of objects")
        return {_KIND: "ndarray_list", "dtype": value.dtype.str, "shape": list(value.shape),
                "v": _encode(value.ravel().tolist(), tensors)}
    if isinstance(value, np.generic):
        return {_KIND: "npscalar", "dtype": value.dtype.str, "v": value.item()}
    if isinstance(value, bytes):
        return {_KIND: "bytes", "v": value.hex()}
    if type(value) is list:
        return [_encode(item, tensors) for item in value]
    if type(value) in (tuple, set, frozenset):
        return {_KIND: type(value).__name__, "v": [_encode(item, tensors) for item in value]}
    if type(value) is dict:
        return {_KIND: "dict", "v": [[_encode(k, tensors), _encode(v, tensors)]
                                     for k, v in value.items()]}
    cls = type(value)
    if not cls.__module__.startswith("sglab."):
        raise TypeError(f"a {cls.__module__}.{cls.__qualname__}")
    if isinstance(value, BaseModel):
        return {_KIND: "model", "class": _class_path(cls), "v": value.model_dump_json()}
    if isinstance(value, enum.Enum):
        return {_KIND: "enum", "class": _class_path(cls), "v": _encode(value.value, tensors)}
    if isinstance(value, tuple):  # a named tuple
        return {_KIND: "namedtuple", "class": _class_path(cls),
                "v": [_encode(item, tensors) for item in value]}
    if hasattr(value, "__dict__"):
        attributes = dict(vars(value))
    elif dataclasses.is_dataclass(value):
        attributes = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    else:
        raise TypeError(f"a {cls.__module__}.{cls.__qualname__} without attributes")
    return {_KIND: "object", "class": _class_path(cls),
            "v": {name: _encode(item, tensors) for name, item in attributes.items()}}


def _decode(data: Any, tensors: list) -> Any:
    """Inverse of :func:`_encode`. Builds data only: instances of sglab's classes get their
    attributes set without calling the class's code (no ``__init__``, no ``__setstate__``)."""
    import numpy as np

    if isinstance(data, list):
        return [_decode(item, tensors) for item in data]
    if not isinstance(data, dict):
        return data
    kind = data[_KIND]
    if kind == "tensor":
        tensor = tensors[data["i"]]
        if not isinstance(tensor, torch.Tensor):
            raise ValueError("a tensor reference to something else")
        return tensor.to(torch.int64) if data["wide"] else tensor
    if kind == "ndarray":
        return _decode(data["tensor"], tensors).numpy().astype(np.dtype(data["dtype"]), copy=False)
    if kind == "ndarray_list":
        return np.array(_decode(data["v"], tensors), dtype=np.dtype(data["dtype"])).reshape(
            data["shape"])
    if kind == "npscalar":
        return np.dtype(data["dtype"]).type(data["v"])
    if kind == "bytes":
        return bytes.fromhex(data["v"])
    if kind in ("tuple", "set", "frozenset"):
        items = [_decode(item, tensors) for item in data["v"]]
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
    if kind == "dict":
        return {_decode(k, tensors): _decode(v, tensors) for k, v in data["v"]}
    cls = _sglab_class(data["class"])
    if kind == "model":
        return cls.model_validate_json(data["v"])
    if kind == "enum":
        return cls(_decode(data["v"], tensors))
    if kind == "namedtuple":
        if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise ValueError(f"{data['class']} is not a named tuple")
        return cls(*[_decode(item, tensors) for item in data["v"]])
    if kind == "object":
        instance = object.__new__(cls)
        for name, item in data["v"].items():
            object.__setattr__(instance, str(name), _decode(item, tensors))
        return instance
    raise ValueError(f"unknown kind {kind!r}")


def _payload(config, state: dict[str, Any]) -> bytes:
    """The gzip-compressed cache file of ``state`` (raises TypeError for what it cannot hold)."""
    tensors: list[torch.Tensor] = []
    description = json.dumps(_encode(state, tensors))
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "config": config.model_dump_json(), "state": description,
                "tensors": tensors}, buffer)
    return gzip.compress(buffer.getvalue(), 1)


def _read_payload(data: bytes, config) -> dict[str, Any]:
    """The task state in a cache file's bytes, loaded as data only."""
    stored = torch.load(io.BytesIO(gzip.decompress(data)), map_location="cpu", weights_only=True)
    if not isinstance(stored, dict) or stored.get("format") != FORMAT \
            or stored.get("config") != config.model_dump_json():
        raise ValueError("written for another config or format")
    if not isinstance(stored.get("state"), str) or not isinstance(stored.get("tensors"), list):
        raise ValueError("not a cache file of this format")
    state = _decode(json.loads(stored["state"]), stored["tensors"])
    if not isinstance(state, dict) or not all(isinstance(key, str) for key in state):
        raise ValueError("not a cache file of this format")
    return state


def _load(task, path: Path) -> str | None:
    """Set ``task``'s state from the cached file ``path``; None when there is none or it
    cannot be read as data (then it is rebuilt)."""
    if not path.exists():
        return None
    try:
        start = time.perf_counter()
        state = _read_payload(path.read_bytes(), task.config)
        vars(task).update(state)
        return f"task data loaded from {path} in {time.perf_counter() - start:.1f} s"
    except Exception as error:  # noqa: BLE001 - any unreadable file is rebuilt
        warnings.warn(f"data cache: cannot read {path} ({error}); building the data again",
                      stacklevel=3)
        return None


def _stamp(path: Path) -> tuple[int, int] | None:
    """(modification time, size) of ``path``, None when there is no file: whether another
    process has written it since."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def lock_path(path: Path) -> Path:
    """The lock file a build of the cached file ``path`` holds."""
    return path.with_name(path.name + LOCK_SUFFIX)


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[float]:
    """Hold the lock of ``path``'s build; yields the seconds spent waiting for another
    process's build of it. Where no lock file can be made (an unwritable directory) the
    build goes on without it."""
    start, created = time.perf_counter(), not path.parent.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(lock_path(path))
        lock.acquire()
    except OSError:
        yield 0.0
        return
    try:
        yield time.perf_counter() - start
    finally:
        lock.release()
        if not path.exists():  # a build too quick to keep leaves nothing behind
            lock_path(path).unlink(missing_ok=True)
            if created:
                with contextlib.suppress(OSError):
                    path.parent.rmdir()


def build_with_cache(task) -> str | None:
    """Set ``task.vocab``, ``task.splits`` and every attribute ``task.build()`` sets on the
    task, by building or from the cache. Returns where the data came from when the cache
    was involved (a line for the run's log), else None."""
    config = task.config
    directory = cache_dir()
    if directory is None:
        task.vocab, task.splits = task.build()
        return None
    path = cache_path(config, directory)
    seen = _stamp(path)
    loaded = _load(task, path)
    if loaded:
        return loaded
    with _build_lock(path) as waited:
        if _stamp(path) != seen:  # written by the process that held the lock before us
            loaded = _load(task, path)
            if loaded:
                return f"{loaded}, after {waited:.1f} s waiting for another process's build"
        before = set(vars(task))
        start = time.perf_counter()
        task.vocab, task.splits = task.build()
        seconds = time.perf_counter() - start
        if seconds < MIN_SECONDS:
            return None
        state = {key: value for key, value in vars(task).items() if key not in before}
        try:
            payload = _payload(config, state)
        except TypeError as error:  # the task keeps something that is not data
            warnings.warn(f"data cache: task {config.name} keeps {error}, which a cache file "
                          "does not hold; its data is not cached", stacklevel=2)
            return None
        try:
            atomic_write_bytes(path, lambda handle: handle.write(payload))
        except OSError as error:
            warnings.warn(f"data cache: cannot write {path} ({error}); set {ENV} to a writable "
                          f"directory or to 'off'", stacklevel=2)
            return None
    return f"task data built in {seconds:.1f} s and cached in {path}"


def _build_into_cache(config) -> tuple[str, float, str | None]:
    from sglab.tasks.base import GeneratedSplitsTask, build_task

    start = time.perf_counter()
    task = build_task(config)
    seconds = time.perf_counter() - start
    if not isinstance(task, GeneratedSplitsTask):
        return config.name, seconds, f"built in {seconds:.1f} s (not a cached kind of task)"
    return config.name, seconds, task.data_note


def fill_cache(configs: list, workers: int = 1, printer: Callable[[str], None] = print) -> int:
    """Build the data of every distinct task config in ``configs`` into the cache (``workers``
    processes at a time), so that the runs that need it load it instead of each building
    it. Returns the number of distinct configs."""
    directory = cache_dir()
    if directory is None:
        raise SglabError(f"the data cache is off ({ENV}=off): nothing would be kept; unset "
                         f"{ENV} or point it at a directory")
    distinct = list({config.model_dump_json(): config for config in configs}.values())
    printer(f"data cache {directory}: {len(distinct)} distinct task config(s), "
            f"{workers} at a time")

    def report(name: str, seconds: float, note: str | None) -> None:
        printer(f"  {name}: {note}" if note else
                f"  {name}: built in {seconds:.1f} s (under {MIN_SECONDS:.0f} s: not cached)")

    if workers <= 1 or len(distinct) <= 1:
        for config in distinct:
            report(*_build_into_cache(config))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(workers, len(distinct)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            for result in pool.map(_build_into_cache, distinct):
                report(*result)
    return len(distinct)


def cache_files(directory: Path | None = None, locks: bool = False) -> list[Path]:
    """The cached data files (``directory``: default :func:`cache_dir`), or with ``locks``
    the builds' lock files (also those a killed build left without a data file)."""
    directory = directory or cache_dir()
    pattern = DATA_PATTERN + (LOCK_SUFFIX if locks else "")
    return sorted(directory.glob(pattern)) if directory and directory.is_dir() else []

"""The run store: run directories are the truth, ``runs.db`` (SQLite, WAL) indexes them.

Each run directory holds ``config.yaml``, ``metrics.jsonl``, ``checkpoints/`` and
``summary.json``. The index can always be rebuilt from the directories
(:meth:`RunStore.reindex`).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from sglab.errors import SglabError
from sglab.io import atomic_write_json, json_line

DEFAULT_RUNS_DIR = "runs"
COLUMNS = ("run_id", "config_hash", "task", "model", "seed", "status", "step", "tag",
           "updated", "path")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    config_hash TEXT NOT NULL,
    task TEXT, model TEXT, seed INTEGER, status TEXT, step INTEGER, tag TEXT,
    updated REAL, path TEXT,
    config_json TEXT, summary_json TEXT
)
"""


def read_metrics(run_dir: str | Path, kind: str = "eval",
                 while_training: bool = False) -> list[dict[str, Any]]:
    """Records of a run's ``metrics.jsonl``, oldest first.

    ``kind="eval"``: the evaluations (records without a ``kind`` field); ``"train"``: the
    training-loss records (``{"kind": "train", "step", "train/loss", "lr", "seconds"}``,
    one per ``train.log_interval`` steps); ``"all"``: both, in the order written.

    A record cut short (the file does not end with a whole line) or a line that is not JSON
    is a SglabError naming the file: the run's history lost a record. ``while_training``:
    the reader watches a run being written, whose last line may be half written; it is left
    out.
    """
    if kind not in ("eval", "train", "all"):
        raise ValueError(f"kind must be eval, train or all, not {kind!r}")
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()
    if text and not text.endswith("\n"):
        if not while_training:
            raise SglabError(
                f"{str(path)!r} ends in a record cut short (the file was truncated): the run's "
                "last evaluation is lost. An unfinished run rewrites it when it resumes (sglab "
                "train --resume RUN_ID); retrain a finished one (delete its directory)")
        lines = lines[:-1]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise SglabError(f"{str(path)!r} line {number} is not a JSON record (the file is "
                             "damaged); retrain the run (delete its directory)") from None
    if kind == "all":
        return records
    return [r for r in records if r.get("kind", "eval") == kind]


LABELS_FILE = "labels.json"


def read_labels(run_dir: str | Path) -> dict[str, dict[str, str]]:
    """The roles a run plays in experiments: ``{"<experiment>": {"pe": "none", ...}}``
    (``labels.json`` in the run directory; empty if the run belongs to no experiment)."""
    path = Path(run_dir) / LABELS_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_labels(run_dir: str | Path, experiment: str, labels: dict[str, Any]) -> None:
    """Record (atomically) the labels a run has in ``experiment``, keeping its other
    experiments' labels."""
    data = read_labels(run_dir)
    data[experiment] = {key: str(value) for key, value in labels.items()}
    atomic_write_json(Path(run_dir) / LABELS_FILE, data)


def format_labels(labels: dict[str, dict[str, str]]) -> str:
    """``symmetry: pe=none ablated=0,1`` (experiments separated by ``; ``)."""
    return "; ".join(f"{experiment}: " + " ".join(f"{k}={v}" for k, v in values.items())
                     for experiment, values in sorted(labels.items()))


def runs_dir_from(option: str | None) -> Path:
    """--runs-dir, else $SGLAB_RUNS_DIR, else ./runs (a directory, or a path not yet taken
    whose nearest existing ancestor is a directory)."""
    path = Path(option or os.environ.get("SGLAB_RUNS_DIR") or DEFAULT_RUNS_DIR)
    if path.is_symlink() and not path.exists():
        raise SglabError(f"runs directory {str(path)!r} is a symbolic link to "
                         f"{os.readlink(path)!r}, which does not exist; restore its target or "
                         "pass --runs-dir (or set SGLAB_RUNS_DIR to) another directory")
    if path.exists() and not path.is_dir():
        raise SglabError(f"runs directory {str(path)!r} is a file, not a directory; pass "
                         "--runs-dir (or set SGLAB_RUNS_DIR to) a directory")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise SglabError(f"runs directory {str(path)!r} cannot be made: {str(parent)!r} "
                                 "is a file, not a directory; pass --runs-dir (or set "
                                 "SGLAB_RUNS_DIR to) a directory")
            break
    return path


def run_dir_of(runs_dir: str | Path, run_id: str, option: str = "--resume") -> Path:
    """The directory of run ``run_id`` in the store ``runs_dir``. The id must be a run id
    as `sglab runs` lists it (a plain name: no path, not empty) of a run in this store."""
    runs_dir = Path(runs_dir)
    listing = f"list the runs with `sglab runs --runs-dir {runs_dir}`"
    if not run_id.strip():
        raise SglabError(f"{option} got an empty run id (an unset shell variable?); {listing}")
    if (run_id in (".", "..") or "/" in run_id or (os.sep != "/" and os.sep in run_id)
            or "\0" in run_id):
        raise SglabError(f"{option} takes a run id, not a path: {run_id!r}; a run outside the "
                         f"store {str(runs_dir)!r} cannot be continued in it (pass --runs-dir "
                         f"the store that holds it); {listing}")
    run_dir = runs_dir / run_id
    if run_dir.is_symlink() and not run_dir.exists():
        raise SglabError(f"run directory {str(run_dir)!r} is a symbolic link to "
                         f"{os.readlink(run_dir)!r}, which does not exist; restore its target "
                         "or remove the link")
    if not run_dir.is_dir():
        raise SglabError(f"no run {run_id!r} in {str(runs_dir)!r}; {listing}")
    return run_dir


LOCK_FILE = ".lock"  # held by the process training a run (sglab.train.lock)


def _inode_is_flocked(inode: int) -> bool | None:
    """Whether the kernel lists a flock on a file with this inode number (Linux
    ``/proc/locks``); None where that list cannot be read."""
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in table.splitlines():
        fields = line.split()
        if "FLOCK" in fields and any(f.rsplit(":", 1)[-1] == str(inode) for f in fields
                                     if f.count(":") == 2):
            return True
    return False


def lock_holder_alive(run_dir: str | Path) -> bool | None:
    """Whether a live process holds the run's lock: False when no process does (the lock
    file is gone, or its holder died, e.g. killed), None when this cannot be told from here
    (the holder runs on another host)."""
    path = Path(run_dir) / LOCK_FILE
    try:
        info = os.lstat(path)
        holder = json.loads(path.read_text()) if stat.S_ISREG(info.st_mode) else {}
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return None
    if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int):
        return None
    if holder.get("host") != socket.gethostname():
        return None
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's
    return _inode_is_flocked(info.st_ino) is not False  # a reused pid does not hold the lock


def _metrics_tail_step(run_dir: Path) -> int | None:
    """The step of the last complete record of the run's ``metrics.jsonl`` (its end only
    is read), or None."""
    try:
        with open(run_dir / "metrics.jsonl", "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - 8192, 0))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        if line.endswith("}"):
            try:
                step = json.loads(line).get("step")
            except (ValueError, AttributeError):
                continue
            if isinstance(step, int):
                return step
    return None


_READ_ONLY = ("readonly database", "unable to open database file", "read-only file system",
              "readonly", "permission denied")


def _model_aliases() -> list[str]:
    """Model keys of an older config layout that queries still take (a transformer's flat
    names: ``pos_encoding``)."""
    from sglab import registry

    found = registry.config_class("model", "transformer")
    return found.input_aliases() if found is not None else []


def _dotted_paths(data: Any, prefix: str = "") -> set[str]:
    """Every ``a.b.c`` path of a nested dict (the paths of its dicts included)."""
    paths: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            path = f"{prefix}{key}"
            paths.add(path)
            paths |= _dotted_paths(value, path + ".")
    return paths


class RunStore:
    def __init__(self, runs_dir: str | Path):
        self.runs_dir = Path(runs_dir)
        self.db_path = self.runs_dir / "runs.db"

    @contextmanager
    def _session(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        """A connection to the index for the block. ``write=False``: a store this process
        cannot write (a colleague's, a read-only file system) is opened read-only. Any
        SQLite error becomes a SglabError that says what to do."""
        try:
            conn = self._open(write)
        except sqlite3.DatabaseError as exc:
            raise self._problem(exc, write) from None
        try:
            yield conn
        except sqlite3.DatabaseError as exc:
            raise self._problem(exc, write) from None
        finally:
            conn.close()

    def _open(self, write: bool) -> sqlite3.Connection:
        if not write and not self._may_write():
            return self._connect_read_only()
        try:
            return self._connect()
        except sqlite3.OperationalError as exc:
            if write or not any(word in str(exc).lower() for word in _READ_ONLY):
                raise
        return self._connect_read_only()

    def _may_write(self) -> bool:
        return os.access(self.runs_dir, os.W_OK) and (
            not self.db_path.exists() or os.access(self.db_path, os.W_OK))

    def _connect_read_only(self) -> sqlite3.Connection:
        """The index opened read-only; where even that needs to write (WAL's shared-memory
        file in a directory this process cannot write), as an immutable file."""
        uri = self.db_path.absolute().as_uri()
        for mode in ("mode=ro", "immutable=1"):
            conn = sqlite3.connect(f"{uri}?{mode}", uri=True, timeout=60)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                return conn
            except sqlite3.OperationalError:
                conn.close()
                if mode == "immutable=1":
                    raise
        raise AssertionError("unreachable")

    def _problem(self, exc: sqlite3.DatabaseError, write: bool) -> SglabError:
        text = str(exc)
        if any(word in text.lower() for word in _READ_ONLY):
            return SglabError(
                f"cannot write the run index {str(self.db_path)!r} ({text}): the runs "
                "directory is read-only for this process. `sglab runs` lists it as it is; to "
                "train, pass --runs-dir (or set SGLAB_RUNS_DIR to) a directory you can write")
        if "locked" in text.lower():
            return SglabError(f"the run index {str(self.db_path)!r} stayed locked by another "
                              f"process for a minute ({text}); rerun when it is done")
        return SglabError(f"the run index {str(self.db_path)!r} is damaged ({text}); rebuild it "
                          f"from the run directories with `sglab runs --reindex --runs-dir "
                          f"{self.runs_dir}` (the run directories are the truth)")

    def _connect(self) -> sqlite3.Connection:
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SglabError(f"cannot use {str(self.runs_dir)!r} as the runs directory: "
                             f"{exc.strerror}; pass --runs-dir a writable directory") from None
        if self.db_path.is_dir():
            raise SglabError(f"the run index {str(self.db_path)!r} is a directory; move it away "
                             f"and rebuild the index with `sglab runs --reindex`")
        conn = sqlite3.connect(self.db_path, timeout=60)
        # Switching a new database to WAL takes a lock that the busy timeout does not
        # cover, so concurrent first connections retry. WAL mode persists in the file.
        for attempt in range(50):
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(_SCHEMA)
                return conn
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 49:
                    conn.close()
                    raise
                time.sleep(0.05 * (1 + attempt % 5))
        raise AssertionError("unreachable")

    def ensure(self) -> None:
        """Create the index (call once before starting concurrent writers)."""
        with self._session(write=True) as conn:
            conn.execute("SELECT count(*) FROM runs").fetchone()

    def record(self, run_dir: Path, config, summary: dict, tag: str | None = None) -> None:
        """Insert or update one run's row (the summary with the run's experiment labels,
        :func:`read_labels`, under ``labels``: ``--where labels.symmetry.pe=none``)."""
        data = config.to_dict() if hasattr(config, "to_dict") else config
        labels = read_labels(run_dir)
        if labels:
            summary = {**summary, "labels": labels}
        row = (
            summary.get("run_id", Path(run_dir).name), config.config_hash()
            if hasattr(config, "config_hash") else summary.get("config_hash", ""),
            data["task"]["name"], data["model"]["name"], data.get("seed"),
            summary.get("status"), summary.get("step"), tag, time.time(), str(run_dir),
            json.dumps(data), json_line(summary),
        )
        with self._session(write=True) as conn, conn:
            if tag is None:  # keep an existing tag
                old = conn.execute("SELECT tag FROM runs WHERE run_id=?", (row[0],)).fetchone()
                if old:
                    row = row[:7] + (old[0],) + row[8:]
            conn.execute(f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}, config_json, "
                         f"summary_json) VALUES ({', '.join('?' * 12)})", row)

    def reindex(self, skipped: Callable[[str], None] | None = None,
                note: Callable[[str], None] | None = None) -> int:
        """Rebuild the index from the run directories; returns the number of runs indexed.
        Each run directory that cannot be read is named, with the reason, to ``skipped``;
        runs whose directory is gone leave the index. A damaged index file is moved aside
        (``runs.db.damaged``, said to ``note``) and built anew."""
        from sglab.config import RunConfig, validate

        self._set_aside_if_damaged(note)
        count = 0
        run_dirs = sorted({p.parent for pattern in ("*/summary.json", "*/config.yaml")
                           for p in self.runs_dir.glob(pattern)
                           if not p.parent.name.startswith(".")})  # e.g. a run being copied
        for run_dir in run_dirs:
            try:
                config = validate(RunConfig, yaml.safe_load((run_dir / "config.yaml").read_text()))
                summary = json.loads((run_dir / "summary.json").read_text())
                if not isinstance(summary, dict):
                    raise ValueError("summary.json does not hold a JSON object")
            except (OSError, ValueError, SglabError) as exc:
                if skipped is not None:
                    reason = (f"{exc.strerror}: {Path(exc.filename).name}"
                              if isinstance(exc, OSError) and exc.filename else str(exc))
                    skipped(f"{run_dir.name}: {reason.splitlines()[0]}")
                continue
            self.record(run_dir, config, summary)
            count += 1
        self.ensure()
        with self._session(write=True) as conn, conn:
            gone = [run_id for (run_id,) in conn.execute("SELECT run_id FROM runs")
                    if not (self.runs_dir / run_id).is_dir()]
            conn.executemany("DELETE FROM runs WHERE run_id=?", [(run_id,) for run_id in gone])
        if gone and note is not None:
            note(f"dropped {len(gone)} run(s) whose directory is gone: {', '.join(gone[:5])}"
                 + (" ..." if len(gone) > 5 else ""))
        return count

    def migrate_configs(self, skipped: Callable[[str], None] | None = None) -> list[str]:
        """Rewrite every stored run's config.yaml whose model section is written in an older
        layout (a flat transformer config) in the current one, and return their run ids.

        A run's id is unchanged by construction (``RunConfig.config_hash`` reads the old
        layout from the new one); a config whose id would change, or that does not load,
        is left as it is and named to ``skipped``. Reindex afterwards."""
        from sglab.config import RunConfig, validate
        from sglab.io import atomic_write_text

        migrated = []
        for path in sorted(self.runs_dir.glob("*/config.yaml")):
            run_dir = path.parent
            if run_dir.name.startswith("."):
                continue
            try:
                data = yaml.safe_load(path.read_text())
                config = validate(RunConfig, data)
            except (OSError, ValueError, SglabError) as exc:
                if skipped is not None:
                    skipped(f"{run_dir.name}: {str(exc).splitlines()[0]}")
                continue
            model = config.to_dict()["model"]
            if not isinstance(data, dict) or data.get("model") == model:
                continue
            new_data = {**data, "model": model}
            again = validate(RunConfig, new_data)
            if again.run_id() != config.run_id() or again != config:
                if skipped is not None:
                    skipped(f"{run_dir.name}: its config would change in the current layout")
                continue
            atomic_write_text(path, yaml.safe_dump(new_data, sort_keys=False))
            migrated.append(config.run_id())
        return migrated

    def _set_aside_if_damaged(self, note: Callable[[str], None] | None) -> None:
        if not self.db_path.is_file():
            return
        try:
            conn = self._open(write=True)
            try:
                result = conn.execute("PRAGMA quick_check").fetchone()[0]
            finally:
                conn.close()
            if result == "ok":
                return
            problem = f"SQLite's integrity check: {result}"
        except sqlite3.DatabaseError as exc:
            text = str(exc).lower()
            if "locked" in text or any(word in text for word in _READ_ONLY):
                raise self._problem(exc, write=True) from None
            problem = str(exc)
        aside = self.db_path.with_name(f"{self.db_path.name}.damaged")
        os.replace(self.db_path, aside)
        for suffix in ("-wal", "-shm"):
            side = self.db_path.with_name(self.db_path.name + suffix)
            if side.exists():
                os.replace(side, aside.with_name(aside.name + suffix))
        if note is not None:
            note(f"the index was damaged ({problem}): moved to {aside}; building it anew from "
                 "the run directories (the runs' tags, e.g. sweep/NAME, live only in the index "
                 "and are not restored)")

    def _known_paths(self) -> tuple[set[str], set[str]]:
        """Dotted config paths and summary paths present in at least one indexed run."""
        config_paths: set[str] = set()
        summary_paths: set[str] = set()
        if not self.db_path.exists():
            return config_paths, summary_paths
        with self._session(write=False) as conn:
            for config_json, summary_json in conn.execute(
                    "SELECT config_json, summary_json FROM runs"):
                config_paths |= _dotted_paths(json.loads(config_json))
                summary_paths |= _dotted_paths(json.loads(summary_json))
        return config_paths, summary_paths

    @staticmethod
    def _unknown_key_message(key: str, config_paths: set[str], summary_paths: set[str]) -> str:
        import difflib

        from sglab.config import canonical_setting

        aliases = {old for old in (f"model.{name}" for name in _model_aliases())
                   if canonical_setting(old, "")[0] in config_paths}
        near = difflib.get_close_matches(key, sorted(config_paths | summary_paths | aliases), n=3)
        hint = f" Did you mean {', '.join(near)}?" if near else ""
        return (f"no run in the store has {key!r}.{hint} Filter on a column "
                f"({', '.join(c for c in COLUMNS if c not in ('updated', 'path'))}), a config "
                "path (model.positions.kind, or its old name model.pos_encoding) or a "
                "summary path (final.ood_test/exact_match, "
                "labels.<experiment>.<label>).")

    def query(self, where: list[str] | None = None) -> list[dict[str, Any]]:
        """Rows matching every ``KEY OP VALUE`` filter.

        KEY is a column (task, model, seed, status, tag, ...), a config path
        (``model.positions.kind``; a transformer's old flat names such as
        ``model.pos_encoding`` too) or a summary path (``final.ood_test/exact_match``,
        ``labels.<experiment>.<label>``);
        OP is one of = != < <= > >=.
        """
        from sglab.config import canonical_setting

        clauses, params = [], []
        config_paths, summary_paths = self._known_paths() if where else (set(), set())
        for text in where or []:
            match = re.fullmatch(r"\s*([\w./=-]+?)\s*(<=|>=|!=|=|<|>)\s*(.*?)\s*", text)
            if not match:
                raise SglabError(f"cannot read filter {text!r}; write KEY=VALUE or KEY>VALUE, "
                                 "e.g. status=finished or final.ood_test/exact_match>0.9")
            key, op, raw = match.groups()
            value = yaml.safe_load(raw) if raw else ""
            if isinstance(value, (list, dict)):
                value = json.dumps(value)
            if key in COLUMNS:
                clauses.append(f"{key} {op} ?")
                params.append(value)
                continue
            alternatives = [(key, value)]
            if key not in summary_paths:
                # a setting of an older config layout (model.pos_encoding): runs store the
                # current one (model.positions.kind), runs of other models may store the name
                current, current_value = canonical_setting(key, value)
                if current != key and current in config_paths:
                    alternatives = [*([(key, value)] if key in config_paths else []),
                                    (current, current_value)]
            ors = []
            for name, wanted in alternatives:
                if name in summary_paths:
                    column = "summary_json"
                elif name in config_paths:
                    column = "config_json"
                elif not config_paths:  # nothing indexed: nothing can match
                    column = "config_json"
                else:
                    raise SglabError(self._unknown_key_message(name, config_paths, summary_paths))
                path = "$." + ".".join(f'"{part}"' for part in name.split("."))
                ors.append(f"json_extract({column}, '{path}') {op} ?")
                params.append(wanted)
            clauses.append(ors[0] if len(ors) == 1 else "(" + " OR ".join(ors) + ")")
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(clauses) if clauses else "")
        if not self.db_path.exists():
            return []
        with self._session(write=False) as conn:
            conn.row_factory = sqlite3.Row
            rows = conn.execute(sql + " ORDER BY updated", params).fetchall()
        out = []
        for row in rows:
            item = dict(row)
            item["config"] = json.loads(item.pop("config_json"))
            item["summary"] = json.loads(item.pop("summary_json"))
            out.append(item)
        return out

    def current(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (from :meth:`query`) as the runs stand now: a run indexed as running
        shows the step of its last record (the index learns a step only when its summary is
        written) and, when no live process holds its lock any more (its trainer was killed),
        the status ``interrupted`` (rerun its command, or ``sglab train --resume``, to go
        on); a run whose summary moved on since it was indexed shows that summary's status."""
        out = []
        for row in rows:
            if row.get("status") != "running":
                out.append(row)
                continue
            row = dict(row)
            run_dir = self.runs_dir / row["run_id"]
            try:
                summary = json.loads((run_dir / "summary.json").read_text())
            except (OSError, ValueError):
                summary = {}
            if isinstance(summary, dict) and summary.get("status") not in (None, "running"):
                row["status"], row["step"] = summary["status"], summary.get("step", row["step"])
            else:
                steps = [s for s in (row.get("step"), _metrics_tail_step(run_dir),
                                     summary.get("step") if isinstance(summary, dict) else None)
                         if isinstance(s, int)]
                row["step"] = max(steps) if steps else row.get("step")
                if lock_holder_alive(run_dir) is False:
                    row["status"] = "interrupted"
            out.append(row)
        return out

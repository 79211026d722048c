"""The run store: run directories are the truth, ``runs.db`` (SQLite, WAL) indexes them.

Each run directory holds ``config.yaml``, ``metrics.jsonl``, ``checkpoints/`` and
``summary.json``. The index can always be rebuilt from the directories
(:meth:`RunStore.reindex`).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Callable
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


def read_metrics(run_dir: str | Path, kind: str = "eval") -> list[dict[str, Any]]:
    """Records of a run's ``metrics.jsonl``, oldest first.

    ``kind="eval"``: the evaluations (records without a ``kind`` field); ``"train"``: the
    training-loss records (``{"kind": "train", "step", "train/loss", "lr", "seconds"}``,
    one per ``train.log_interval`` steps); ``"all"``: both, in the order written.
    """
    if kind not in ("eval", "train", "all"):
        raise ValueError(f"kind must be eval, train or all, not {kind!r}")
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
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
    """--runs-dir, else $SGLAB_RUNS_DIR, else ./runs (a directory, or a path not yet taken)."""
    path = Path(option or os.environ.get("SGLAB_RUNS_DIR") or DEFAULT_RUNS_DIR)
    if path.exists() and not path.is_dir():
        raise SglabError(f"runs directory {str(path)!r} is a file, not a directory; pass "
                         "--runs-dir (or set SGLAB_RUNS_DIR to) a directory")
    return path


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

    def _connect(self) -> sqlite3.Connection:
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SglabError(f"cannot use {str(self.runs_dir)!r} as the runs directory: "
                             f"{exc.strerror}; pass --runs-dir a writable directory") from None
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
        self._connect().close()

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
        conn = self._connect()
        try:
            with conn:
                if tag is None:  # keep an existing tag
                    old = conn.execute("SELECT tag FROM runs WHERE run_id=?", (row[0],)).fetchone()
                    if old:
                        row = row[:7] + (old[0],) + row[8:]
                conn.execute(f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}, config_json, "
                             f"summary_json) VALUES ({', '.join('?' * 12)})", row)
        finally:
            conn.close()

    def reindex(self, skipped: Callable[[str], None] | None = None) -> int:
        """Rebuild the index from the run directories; returns the number of runs indexed.
        Each run directory that cannot be read is named, with the reason, to ``skipped``."""
        from sglab.config import RunConfig, validate

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
        return count

    def _known_paths(self) -> tuple[set[str], set[str]]:
        """Dotted config paths and summary paths present in at least one indexed run."""
        config_paths: set[str] = set()
        summary_paths: set[str] = set()
        if not self.db_path.exists():
            return config_paths, summary_paths
        conn = self._connect()
        try:
            for config_json, summary_json in conn.execute(
                    "SELECT config_json, summary_json FROM runs"):
                config_paths |= _dotted_paths(json.loads(config_json))
                summary_paths |= _dotted_paths(json.loads(summary_json))
        finally:
            conn.close()
        return config_paths, summary_paths

    @staticmethod
    def _unknown_key_message(key: str, config_paths: set[str], summary_paths: set[str]) -> str:
        import difflib

        near = difflib.get_close_matches(key, sorted(config_paths | summary_paths), n=3)
        hint = f" Did you mean {', '.join(near)}?" if near else ""
        return (f"no run in the store has {key!r}.{hint} Filter on a column "
                f"({', '.join(c for c in COLUMNS if c not in ('updated', 'path'))}), a config "
                "path (model.pos_encoding) or a summary path (final.ood_test/exact_match, "
                "labels.<experiment>.<label>).")

    def query(self, where: list[str] | None = None) -> list[dict[str, Any]]:
        """Rows matching every ``KEY OP VALUE`` filter.

        KEY is a column (task, model, seed, status, tag, ...), a config path
        (``model.pos_encoding``) or a summary path (``final.ood_test/exact_match``,
        ``labels.<experiment>.<label>``);
        OP is one of = != < <= > >=.
        """
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
            else:
                if key in summary_paths:
                    column = "summary_json"
                elif key in config_paths:
                    column = "config_json"
                elif not config_paths:  # nothing indexed: nothing can match
                    column = "config_json"
                else:
                    raise SglabError(self._unknown_key_message(key, config_paths, summary_paths))
                path = "$." + ".".join(f'"{part}"' for part in key.split("."))
                clauses.append(f"json_extract({column}, '{path}') {op} ?")
            params.append(value)
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(clauses) if clauses else "")
        if not self.db_path.exists():
            return []
        conn = self._connect()
        try:
            conn.row_factory = sqlite3.Row
            rows = conn.execute(sql + " ORDER BY updated", params).fetchall()
        finally:
            conn.close()
        out = []
        for row in rows:
            item = dict(row)
            item["config"] = json.loads(item.pop("config_json"))
            item["summary"] = json.loads(item.pop("summary_json"))
            out.append(item)
        return out

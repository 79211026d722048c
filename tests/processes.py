"""The process table from /proc, for tests that check which processes a run leaves."""

from pathlib import Path


def parent_pids() -> dict[int, int]:
    """pid -> parent pid of every process that can be read now."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, ...
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    return parents

"""CPU time of a process and its descendants from /proc (utime + stime), no psutil needed."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _own_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # Fields after the command name (which may contain spaces) start at field 3.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out.extend(int(c) for c in task.read_text().split())
        except OSError:
            continue
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of pid and every live descendant (crypto forks worker processes)."""
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _own_seconds(p)
        todo.extend(_children(p))
    return total

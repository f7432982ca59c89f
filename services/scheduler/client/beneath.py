"""Files under a directory a task may write to, opened by a root agent without following the
task's symlinks. Below an allocation's dir (root's, 0711) everything belongs to the task's
user, who can swap any name for a symlink to the agent's files (the dev keys, /etc/shadow) at
any moment, also between a check of the path and its use. So every component is opened
relative to its parent's descriptor with O_NOFOLLOW: a symlink anywhere fails the call
(ELOOP or ENOTDIR) instead of leading out, and what is done to a file or dir (write, chmod,
chown) is done through its descriptor."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parts_of(rel: str) -> list[str]:
    """The components of a relative path; ValueError for '..' (nothing here may climb)."""
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"path {rel!r} climbs out with '..'")
    return parts


def open_dir(root: str, parts: Sequence[str], *, create: bool = False, mode: int = 0o700) -> int:
    """A descriptor of root/parts (the caller closes it). `root` is trusted (the agent's own);
    each part below it is created if asked (with `mode`), and never a symlink."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
            child = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(
    root: str, rel: str, flags: int, mode: int = 0o600, *, create_dirs: bool = False
) -> int:
    """A descriptor of the file root/rel, opened with `flags` and never through a symlink."""
    *dirs, name = parts_of(rel) or ["."]
    parent = open_dir(root, dirs, create=create_dirs)
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
    finally:
        os.close(parent)


def write_file(
    root: str, rel: str, data: bytes, mode: int, uid: int | None, gid: int | None
) -> None:
    """Write root/rel whole, 0`mode` and owned by uid:gid from before the data is in it, beside
    and renamed into place (a reader never sees half a file); missing dirs are made 0700."""
    *dirs, name = parts_of(rel)
    parent = open_dir(root, dirs, create=True)
    tmp = f".{name}.tmp{os.getpid()}"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=parent)  # a leftover, or a planted symlink: never written
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, mode & 0o600, dir_fd=parent)
        try:
            if uid is not None:
                os.fchown(fd, uid, gid if gid is not None else -1)
            os.fchmod(fd, mode)
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    finally:
        os.close(parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]

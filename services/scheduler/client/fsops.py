"""An allocation's directory as /v1/client/fs/* shows it: paths confined to the alloc dir (no
`..`, no symlink leading out), listings and stats in Nomad's AllocFileInfo shape, reads at an
offset, and a task's logs across its rotated files. Blocking file I/O: callers run it in a
thread.

The task owns what lies below its alloc dir and may swap a checked name for a symlink before
the read (to the dev keys): what is read is opened relative to the alloc dir, component by
component, never through a symlink (beneath.py), and only regular files are read (a FIFO
would block the agent)."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import stat as st
from collections.abc import Iterator
from typing import Any

from services.scheduler.client import beneath
from services.scheduler.client.logrotate import log_names, open_regular

LogPos = tuple[int, int]  # (log file number, offset in that file)


class FsError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def confine(alloc_dir: str, rel: str) -> str:
    """The real path of `rel` inside `alloc_dir`, or FsError."""
    parts = [p for p in rel.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise FsError(400, "Path cannot contain '..'")
    root = os.path.realpath(alloc_dir)
    path = os.path.realpath(os.path.join(root, *parts))
    if path != root and not path.startswith(root + os.sep):
        raise FsError(403, "path escapes the allocation directory")
    inside = os.path.relpath(path, root).split(os.sep)
    # A task's secrets/ (its token, rendered secrets) is never served, as in Nomad.
    if len(inside) >= 2 and inside[1].lower() == "secrets" and inside[0] != "alloc":
        raise FsError(403, f"Reading secret file prohibited: {rel}")
    return path


def _info(path: str, name: str, dir_fd: int | None = None) -> dict[str, Any]:
    s = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    mode = st.filemode(s.st_mode)
    return {
        "Name": name,
        "IsDir": st.S_ISDIR(s.st_mode),
        "Size": s.st_size,
        "FileMode": mode,
        "ModTime": dt.datetime.fromtimestamp(s.st_mtime, dt.UTC).isoformat(),
        "ContentType": "" if st.S_ISDIR(s.st_mode) else "application/octet-stream",
    }


def _exists(path: str) -> None:
    if not os.path.lexists(path):
        raise FsError(404, f"stat {os.path.basename(path)}: no such file or directory")


def _inside(alloc_dir: str, path: str) -> tuple[str, list[str]]:
    """The alloc dir's real path and the components of `path` (a confined real path) in it."""
    root = os.path.realpath(alloc_dir)
    return root, beneath.parts_of(os.path.relpath(path, root))


def _swapped(rel: str) -> FsError:
    """What a read answers when a name turned into a symlink after `confine` checked it."""
    return FsError(403, f"path escapes the allocation directory: {rel}")


def _open_file(alloc_dir: str, path: str, rel: str) -> int:
    root, parts = _inside(alloc_dir, path)
    try:
        parent = beneath.open_dir(root, parts[:-1])
        try:
            return open_regular(parts[-1], os.O_RDONLY, parent)
        finally:
            os.close(parent)
    except FileNotFoundError:
        raise FsError(404, f"stat {os.path.basename(path)}: no such file or directory") from None
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise FsError(400, f'file "{rel}" is not a regular file') from None
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _swapped(rel) from None
        raise


def ls(alloc_dir: str, rel: str) -> list[dict[str, Any]]:
    path = confine(alloc_dir, rel)
    _exists(path)
    if not os.path.isdir(path):
        raise FsError(400, "path is not a directory")
    root, parts = _inside(alloc_dir, path)
    try:
        fd = beneath.open_dir(root, parts)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _swapped(rel) from None
        raise
    try:
        return [_info(n, n, fd) for n in sorted(os.listdir(fd))]
    finally:
        os.close(fd)


def stat(alloc_dir: str, rel: str) -> dict[str, Any]:
    path = confine(alloc_dir, rel)
    _exists(path)
    return _info(path, os.path.basename(path) or "/")


def read_at(alloc_dir: str, rel: str, offset: int, limit: int) -> bytes:
    path = confine(alloc_dir, rel)
    _exists(path)
    if os.path.isdir(path):
        raise FsError(400, f'file "{rel}" is a directory')
    with open(_open_file(alloc_dir, path, rel), "rb") as f:
        f.seek(max(0, offset))
        return f.read(limit if limit > 0 else -1)


def read_stream(
    alloc_dir: str, rel: str, origin: str, offset: int, limit: int
) -> tuple[bytes, int]:
    """One read of /v1/client/fs/stream: (data, the file's size when read). The data starts at
    `offset` (origin "start") or `offset` bytes before the end (origin "end"); nothing when the
    file is now shorter than that start, which the caller reports as a truncation."""
    path = confine(alloc_dir, rel)
    _exists(path)
    if os.path.isdir(path):
        raise FsError(400, f'file "{rel}" is a directory')
    with open(_open_file(alloc_dir, path, rel), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = offset if origin == "start" else max(0, size - offset)
        if start > size:
            return b"", size
        f.seek(start)
        return f.read(min(limit, size - start)), size


@contextlib.contextmanager
def _logs_dir(alloc_dir: str) -> Iterator[int | None]:
    """alloc/logs held open, or None when there is none (or the task made it a symlink)."""
    try:
        fd = beneath.open_dir(alloc_dir, ["alloc", "logs"])
    except (FileNotFoundError, NotADirectoryError):
        yield None
        return
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _log_sizes(logs: int | None, task: str, stream: str) -> list[tuple[int, str, int]]:
    """(index, file name, size) of the task's regular log files; anything else is skipped."""
    if logs is None:
        return []
    out = []
    for index, name in log_names(logs, task, stream):
        with contextlib.suppress(FileNotFoundError):  # rotated away meanwhile
            info = os.stat(name, dir_fd=logs, follow_symlinks=False)
            if st.S_ISREG(info.st_mode):
                out.append((index, name, info.st_size))
    return out


def log_position(alloc_dir: str, task: str, stream: str, origin: str, offset: int) -> LogPos:
    """Where a read of a task's logs starts, as (file number, offset in that file): origin
    "start" skips `offset` bytes from the oldest kept byte, "end" keeps the last `offset`."""
    with _logs_dir(alloc_dir) as logs:
        files = _log_sizes(logs, task, stream)
    if not files:
        return (0, 0)
    total = sum(size for _, _, size in files)
    skip = offset if origin == "start" else max(0, total - offset)
    for index, _, size in files:
        if skip < size:
            return (index, skip)
        skip -= size
    return (files[-1][0], files[-1][2])


def read_logs_at(
    alloc_dir: str, task: str, stream: str, at: LogPos, limit: int
) -> tuple[list[tuple[str, int, bytes]], LogPos, int]:
    """(frames, where the next read starts, bytes left after it) across rotated files. A frame
    is (file relative to the alloc dir, offset in it, data). The position names a file, so
    rotation deleting older files does not move it; when its own file was rotated away the read
    goes on from the oldest kept one. What is left is counted after the read: what the task
    wrote meanwhile."""
    with _logs_dir(alloc_dir) as logs:
        return _read_logs_at(logs, task, stream, at, limit)


def _read_logs_at(
    logs: int | None, task: str, stream: str, at: LogPos, limit: int
) -> tuple[list[tuple[str, int, bytes]], LogPos, int]:
    first, skip = at
    files = [f for f in _log_sizes(logs, task, stream) if f[0] >= first]
    if not files or files[0][0] != first:
        skip = 0
    out: list[tuple[str, int, bytes]] = []
    pos = (files[0][0], skip) if files else at
    budget = limit if limit > 0 else sum(size for _, _, size in files)
    for index, name, size in files:
        if budget <= 0 or logs is None:
            break
        try:
            with open(open_regular(name, os.O_RDONLY, logs), "rb") as f:
                f.seek(skip)
                data = f.read(min(max(0, size - skip), budget))
        except OSError:  # rotated away, or swapped for something else meanwhile
            skip = 0
            continue
        if data:
            out.append((f"alloc/logs/{name}", skip, data))
            budget -= len(data)
            pos = (index, skip + len(data))
        skip = 0
    after = [f for f in _log_sizes(logs, task, stream) if f[0] >= pos[0]]
    left = sum(size for _, _, size in after) - (pos[1] if after and after[0][0] == pos[0] else 0)
    return out, pos, max(0, left)


def read_logs(
    alloc_dir: str, task: str, stream: str, origin: str, offset: int, limit: int
) -> list[tuple[str, int, bytes]]:
    """(file relative to the alloc dir, offset in it, data) in order, across rotated files."""
    at = log_position(alloc_dir, task, stream, origin, offset)
    return read_logs_at(alloc_dir, task, stream, at, limit)[0]

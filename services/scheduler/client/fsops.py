"""An allocation's directory as /v1/client/fs/* shows it: paths confined to the alloc dir (no
`..`, no symlink leading out), listings and stats in Nomad's AllocFileInfo shape, reads at an
offset, and a task's logs across its rotated files. Blocking file I/O: callers run it in a
thread."""

from __future__ import annotations

import datetime as dt
import os
import stat as st
from typing import Any

from services.scheduler.client.logrotate import log_files


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


def _info(path: str, name: str) -> dict[str, Any]:
    s = os.lstat(path)
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


def ls(alloc_dir: str, rel: str) -> list[dict[str, Any]]:
    path = confine(alloc_dir, rel)
    _exists(path)
    if not os.path.isdir(path):
        raise FsError(400, "path is not a directory")
    return [_info(os.path.join(path, n), n) for n in sorted(os.listdir(path))]


def stat(alloc_dir: str, rel: str) -> dict[str, Any]:
    path = confine(alloc_dir, rel)
    _exists(path)
    return _info(path, os.path.basename(path) or "/")


def read_at(alloc_dir: str, rel: str, offset: int, limit: int) -> bytes:
    path = confine(alloc_dir, rel)
    _exists(path)
    if os.path.isdir(path):
        raise FsError(400, f'file "{rel}" is a directory')
    with open(path, "rb") as f:
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
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = offset if origin == "start" else max(0, size - offset)
        if start > size:
            return b"", size
        f.seek(start)
        return f.read(min(limit, size - start)), size


def logs_size(alloc_dir: str, task: str, stream: str) -> int:
    log_dir = os.path.join(alloc_dir, "alloc", "logs")
    return sum(os.path.getsize(p) for _, p in log_files(log_dir, task, stream))


def read_logs(
    alloc_dir: str, task: str, stream: str, origin: str, offset: int, limit: int
) -> list[tuple[str, int, bytes]]:
    """(file relative to the alloc dir, offset in it, data) in order, across rotated files.
    origin "start": skip `offset` bytes from the oldest kept byte; "end": the last `offset`
    bytes."""
    log_dir = os.path.join(alloc_dir, "alloc", "logs")
    files = [(p, os.path.getsize(p)) for _, p in log_files(log_dir, task, stream)]
    total = sum(size for _, size in files)
    skip = offset if origin == "start" else max(0, total - offset)
    out: list[tuple[str, int, bytes]] = []
    budget = limit if limit > 0 else total
    for path, size in files:
        if skip >= size:
            skip -= size
            continue
        with open(path, "rb") as f:
            f.seek(skip)
            data = f.read(min(size - skip, budget))
        if data:
            out.append((os.path.relpath(path, alloc_dir), skip, data))
            budget -= len(data)
        skip = 0
        if budget <= 0:
            break
    return out

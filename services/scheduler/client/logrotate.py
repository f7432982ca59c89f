"""A task's stdout/stderr kept as Nomad keeps them: <alloc>/alloc/logs/<task>.<stream>.<n>,
a new file once the current one reaches max_file_size, and only the newest max_files kept.
Files are 0600 from creation: a task's output may hold what it printed of its secrets."""

from __future__ import annotations

import contextlib
import os
import re

MB = 1024 * 1024


def log_files(log_dir: str, task: str, stream: str) -> list[tuple[int, str]]:
    """(index, path) of a task's files for one stream, oldest first."""
    pat = re.compile(rf"^{re.escape(task)}\.{re.escape(stream)}\.(\d+)$")
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), os.path.join(log_dir, n)) for n in names if (m := pat.match(n))]
    return sorted(found)


class RotatingWriter:
    def __init__(self, log_dir: str, task: str, stream: str, max_files: int, max_size: int):
        self.dir = log_dir
        self.task = task
        self.stream = stream
        self.max_files = max(1, max_files)
        self.max_size = max(1, max_size)
        existing = log_files(log_dir, task, stream)
        # A restarted task appends to its newest file, as Nomad's logmon does.
        self.index = existing[-1][0] if existing else 0
        self.fd = self._open()

    def _path(self, index: int) -> str:
        return os.path.join(self.dir, f"{self.task}.{self.stream}.{index}")

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        return os.open(self._path(self.index), flags, 0o600)

    def write(self, data: bytes) -> None:
        while data:
            size = os.fstat(self.fd).st_size
            room = self.max_size - size
            if room <= 0:
                self._rotate()
                continue
            chunk, data = data[:room], data[room:]
            os.write(self.fd, chunk)

    def _rotate(self) -> None:
        os.close(self.fd)
        self.index += 1
        self.fd = self._open()
        for _, path in log_files(self.dir, self.task, self.stream)[: -self.max_files]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

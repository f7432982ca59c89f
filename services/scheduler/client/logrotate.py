"""A task's stdout/stderr kept as Nomad keeps them: <alloc>/alloc/logs/<task>.<stream>.<n>,
a new file once the current one reaches max_file_size, and only the newest max_files kept.
Files are 0600 from creation: a task's output may hold what it printed of its secrets.

The logs dir sits in the task's shared alloc/ dir: the task can swap it, or a file name in
it, for a symlink (to /etc/cron.d, to the dev keys) before the next rotation. So the writer
holds the dir open and creates each file relative to it, never through a symlink, and only a
regular file is written (a FIFO would block the agent)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat

MB = 1024 * 1024


def log_names(log_dir: str | int, task: str, stream: str) -> list[tuple[int, str]]:
    """(index, file name) of a task's files for one stream, oldest first; `log_dir` a path or
    an open descriptor of the dir."""
    pat = re.compile(rf"^{re.escape(task)}\.{re.escape(stream)}\.(\d+)$")
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    return sorted((int(m.group(1)), n) for n in names if (m := pat.match(n)))


def open_regular(name: str, flags: int, dir_fd: int, mode: int = 0o600) -> int:
    """`name` in the dir `dir_fd`, not through a symlink and only if it is a regular file."""
    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", name)
    return fd


class RotatingWriter:
    def __init__(self, log_dir: str, task: str, stream: str, max_files: int, max_size: int):
        self.fd = -1
        self.dir_fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.task = task
        self.stream = stream
        self.max_files = max(1, max_files)
        self.max_size = max(1, max_size)
        existing = log_names(self.dir_fd, task, stream)
        # A restarted task appends to its newest file, as Nomad's logmon does.
        self.index = existing[-1][0] if existing else 0
        try:
            self.fd = self._open()
        except OSError:
            self.close()
            raise

    def _open(self) -> int:
        name = f"{self.task}.{self.stream}.{self.index}"
        return open_regular(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, self.dir_fd)

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
        self.fd = -1  # closed, whether or not the next file opens
        self.index += 1
        self.fd = self._open()
        for _, name in log_names(self.dir_fd, self.task, self.stream)[: -self.max_files]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=self.dir_fd)

    def close(self) -> None:
        for fd in (self.fd, self.dir_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.dir_fd = -1

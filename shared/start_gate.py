"""A start gate: `trellis dev` starts a service process early, so that its imports (most of a
Python service's start-up) overlap with the bootstrap of the secrets service, and lets it go
on once what it needs exists (the root token, the TLS settings). The supervisor hands the child
the read end of a pipe; releasing it writes the extra environment there and closes it. A child
whose supervisor went away before releasing it reads end-of-file and exits without starting.
The variable names the descriptor and the pipe's inode, so that a process started with an
environment copied from a gated one (read from /proc) does not take some other descriptor of
its own for a gate."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys

GATE_ENV = "TRELLIS_START_GATE_FD"


def open_gate() -> tuple[int, int, str]:
    """(read end for the child, write end the supervisor keeps, the child's GATE_ENV value)."""
    read, write = os.pipe()
    os.set_inheritable(read, True)
    return read, write, f"{read}:{os.fstat(read).st_ino}"


def release(write: int, env: dict[str, str]) -> None:
    """Let the child start with `env` added to its environment (it may be gone: no error)."""
    with contextlib.suppress(BrokenPipeError):
        os.write(write, json.dumps(env).encode())
    os.close(write)


def close(write: int) -> None:
    """Never release: the child exits without starting."""
    with contextlib.suppress(OSError):
        os.close(write)


def wait_at_gate() -> None:
    """In the child, after its imports: block until released (environment applied) or exit if
    the supervisor closed the gate; no gate, no wait."""
    value = os.environ.pop(GATE_ENV, "")
    if not value:
        return
    text, _, inode = value.partition(":")
    fd = int(text)
    try:
        st = os.fstat(fd)
    except OSError:
        return  # no such descriptor here: a copied environment, not a gate
    if not stat.S_ISFIFO(st.st_mode) or str(st.st_ino) != inode:
        return
    chunks: list[bytes] = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    if not chunks:
        sys.exit(0)
    os.environ.update(json.loads(b"".join(chunks)))

"""The progress display: one line rewritten in place on a terminal, plain lines (at most one
every few seconds) when stderr is a file or a pipe."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, every: float = 5.0, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self.quiet = quiet
        self._last = 0.0
        self._dirty = False

    def update(self, text: str, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write(f"\r\033[K{text}")
            self._dirty = True
        elif force or now - self._last >= self.every:
            self.stream.write(text + "\n")
            self._last = now
        self.stream.flush()

    def step(self, text: str) -> None:
        """A milestone: always shown, on its own line."""
        self.done()
        if not self.quiet:
            self.stream.write(f"==> {text}\n")
            self.stream.flush()

    def done(self) -> None:
        if self._dirty:
            self.stream.write("\n")
            self.stream.flush()
            self._dirty = False

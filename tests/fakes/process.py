"""Start an emulator in its own process and learn its port: each prints `listening on <port>`
when ready and exits when its stdin closes."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class Fake:
    proc: asyncio.subprocess.Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def start_fake(module: str, *args: str, limit: float = 30.0) -> Fake:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), limit)
    except TimeoutError:
        proc.kill()
        raise
    text = line.decode().strip()
    if not text.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"{module} did not start: {text!r}")
    return Fake(proc, int(text.rsplit(" ", 1)[1]))

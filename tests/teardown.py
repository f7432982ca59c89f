"""Bounded teardown for async fixtures: a stop step that hangs is cut off at its own limit, the
next steps still run, and the fixture then fails naming the step, with every asyncio task's
stack printed, instead of burning the whole test timeout.

    td = Teardown()
    for c in clients:
        await td.step(f"client {c.cfg.name} stop", c.stop())
    ...
    td.finish()
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Awaitable

import pytest

STEP_LIMIT = 30.0


def task_stacks() -> str:
    """Every pending asyncio task of the running loop with its coroutine stack."""
    out = io.StringIO()
    current = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is current or task.done():
            continue
        out.write(f"--- {task.get_name()}: {task.get_coro()!r}\n")
        task.print_stack(file=out)
    return out.getvalue()


class Teardown:
    def __init__(self, limit: float = STEP_LIMIT) -> None:
        self.limit = limit
        self.hung: list[str] = []

    async def step(self, name: str, work: Awaitable[object]) -> None:
        """Await `work` for at most the limit; a hung step is recorded and cancelled."""
        job = asyncio.ensure_future(work)
        done, _ = await asyncio.wait([job], timeout=self.limit)
        if done:
            job.result()  # the step's own error, as raised
            return
        print(f"teardown step {name!r} hung; asyncio tasks:\n{task_stacks()}", file=sys.stderr)
        self.hung.append(name)
        job.cancel()

    def finish(self) -> None:
        if self.hung:
            pytest.fail(
                f"teardown steps did not finish in {self.limit:g}s: {', '.join(self.hung)} "
                "(asyncio task stacks on stderr)"
            )

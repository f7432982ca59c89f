"""shared/eager.py: a coroutine runs at once, a task finishes it only if it waits, and it behaves
as the task it replaces (its own context, results, errors, cancels, no recursion)."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from shared import eager

_where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="outside")


async def test_a_coroutine_that_never_waits_runs_at_once_without_a_task() -> None:
    done: list[str] = []

    async def answer() -> None:
        _where.set("inside")
        done.append(_where.get())

    assert eager.start(answer()) is None
    assert done == ["inside"]
    assert _where.get() == "outside"  # its own context, as a task's


async def test_a_coroutine_that_waits_is_finished_by_a_task_in_the_same_context() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    second: asyncio.Future[int] = loop.create_future()
    seen: list[Any] = []

    async def work() -> int:
        _where.set("inside")
        seen.append(await first)
        try:
            await second
        except ValueError as exc:
            seen.append(str(exc))
        await asyncio.sleep(0)  # a bare yield, as ReadBatch makes
        seen.append(_where.get())
        return 7

    task = eager.start(work())
    assert task is not None and seen == []
    first.set_result(1)
    second.set_exception(ValueError("refused"))
    assert await task == 7
    assert seen == [1, "refused", "inside"]
    assert _where.get() == "outside"


async def test_cancelling_the_task_cancels_the_coroutine() -> None:
    cleaned: list[bool] = []
    blocker: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def work() -> None:
        try:
            await blocker
        finally:
            cleaned.append(True)

    task = eager.start(work())
    assert task is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


async def test_errors_of_the_first_step_go_to_the_loop_not_the_caller() -> None:
    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["exception"]))
    try:

        async def fails() -> None:
            raise RuntimeError("broken handler")

        async def cancelled() -> None:
            raise asyncio.CancelledError

        assert eager.start(fails()) is None
        assert eager.start(cancelled()) is None  # ends as a cancelled task would, silently
    finally:
        loop.set_exception_handler(None)
    assert [str(e) for e in reported] == ["broken handler"]


async def test_a_start_inside_a_first_step_makes_a_task_so_chains_never_recurse() -> None:
    """A finished handler hands its slot to the next queued one from inside its own first
    step; a chain of thousands must not grow the stack."""
    total = 5000
    ran: list[int] = []
    tasks: list[asyncio.Task[Any]] = []

    async def link(n: int) -> None:
        ran.append(n)
        if n < total:
            task = eager.start(link(n + 1))
            if task is not None:
                tasks.append(task)

    assert eager.start(link(1)) is None
    while tasks:
        await tasks.pop()
    assert ran == list(range(1, total + 1))

"""Start a coroutine at once and make a task of it only if it has to wait.

A bus handler that answers from memory (a token lookup, a cached transit key, a planned read)
finishes in its first step; a task for it would cost its creation, a loop turn before it runs,
its done callbacks and a getpid() in C asyncio, and its reply would leave one turn later, in a
smaller reply batch. Python 3.12's eager task factory does this for every task; 3.11 has none.

The first step runs in a context of its own, as a task's would. While it runs, the current task
is the caller's, so such code must not rely on `asyncio.current_task()` or `asyncio.timeout()`
before its first wait (bus handlers do not). A start from inside another first step (a handler
finishing and handing its concurrency slot to the next queued request) makes a task instead, so
a long queue never turns into deep recursion.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any

_local = threading.local()
_FIRST_DONE = object()


class _Rest:
    """The rest of a coroutine whose first step already ran and yielded `pending` (the future
    it waits for, or None for a bare yield), as a coroutine a task can drive: the task's first
    step gets `pending`, every later send or throw (a cancel included, even before that first
    step) goes to the coroutine."""

    __slots__ = ("coro", "pending")

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self.coro = coro
        self.pending = pending

    def send(self, value: Any) -> Any:
        pending = self.pending
        if pending is _FIRST_DONE:
            return self.coro.send(value)
        self.pending = _FIRST_DONE
        return pending

    def throw(self, *exc: Any) -> Any:
        self.pending = _FIRST_DONE
        return self.coro.throw(*exc)

    def close(self) -> None:
        self.coro.close()

    # Awaitable as well (`await` delegates send and throw to this same iterator).
    def __await__(self) -> _Rest:
        return self

    def __next__(self) -> Any:
        return self.send(None)


def start(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
    """Run `coro` up to its first wait; the task that finishes it, or None if it is done. What
    it raises is reported as an unretrieved task exception would be, never to the caller."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    if getattr(_local, "busy", False):
        return loop.create_task(coro, context=context)
    _local.busy = True
    try:
        pending = context.run(coro.send, None)
    except StopIteration:
        return None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # a task would have kept it, not raised it
        if not isinstance(exc, asyncio.CancelledError):
            loop.call_exception_handler(
                {"message": "eagerly started coroutine failed", "exception": exc}
            )
        return None
    finally:
        _local.busy = False
    return loop.create_task(_Rest(coro, pending), context=context)  # type: ignore[arg-type]

"""Query options (index, wait, stale, prefix, per_page, next_token, filter) and blocking queries
over the replicated log.

A blocking query that cannot be answered yet does not wait inside its handler: it returns a
Deferred (shared/deferred.py) parked on a future of the log's index, so it holds no bus slot
while it waits. It is answered when its result's index passes `index`, or when `wait` (plus
Nomad's jitter) runs out, with 200 and the current index either way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.scheduler.api.http import Request, bad, ok
from services.scheduler.bexpr import Filter, FilterSyntaxError, compile_filter
from services.scheduler.durations import DurationError, parse_duration
from shared import longpoll
from shared.deferred import Deferred
from shared.messages import HttpResponse
from shared.replog import ReplicatedLog


@dataclass
class QueryOptions:
    min_index: int = 0
    wait: float = longpoll.DEFAULT_WAIT
    stale: bool = False
    prefix: str = ""
    per_page: int = 0
    next_token: str = ""
    filter: Filter | None = None


def parse_options(req: Request) -> QueryOptions:
    o = QueryOptions()
    if req.has("wait"):
        try:
            o.wait = parse_duration(req.q("wait")) / 1e9
        except DurationError:
            raise bad("Invalid wait time") from None
        o.wait = longpoll.clamp_wait(o.wait)
    if req.has("index"):
        raw = req.q("index")
        if not raw.isdigit():
            raise bad("Invalid index")
        o.min_index = int(raw)
    o.stale = req.has("stale") and req.q("stale") not in ("false", "0")
    o.prefix = req.q("prefix")
    if req.has("per_page"):
        raw = req.q("per_page")
        try:
            o.per_page = int(raw)
        except ValueError:
            raise bad(f"Invalid per_page value: {raw!r}") from None
        if o.per_page < 0:
            raise bad(f"Invalid per_page value: {raw!r}")
    o.next_token = req.q("next_token")
    expr = req.q("filter")
    if expr:
        try:
            o.filter = compile_filter(expr)
        except FilterSyntaxError as exc:
            raise bad(
                f"failed to create result paginator: failed to read filter expression: {exc}"
            ) from None
    return o


Compute = Callable[[], tuple[int, Any]]
# The index `compute` would return, without building the body (a table's index): lets a query
# that must wait skip building a body it would throw away (a list of thousands of jobs).
IndexOf = Callable[[], int]
# Builds the answer from (index, body); may raise HttpError (a 404 once the wait is over).
Answer = Callable[[int, Any], Any]


async def blocking(
    replog: ReplicatedLog,
    opts: QueryOptions,
    compute: Compute,
    answer: Answer,
    *,
    index_of: IndexOf | None = None,
) -> Any:
    """Answer at once without `index` or when the result's index already passed it; otherwise
    return a Deferred answered once it passes or the jittered wait runs out."""
    if not opts.stale:
        await replog.barrier()
    q = _Query(replog, opts, compute, answer, index_of)
    if opts.min_index > 0 and not q.passed():
        loop = asyncio.get_running_loop()
        return q.park(loop.time() + longpoll.jittered(opts.wait))
    return q.answer_now()


class _Query:
    """One blocking query between its arrival and its answer."""

    __slots__ = ("answer", "compute", "index_of", "opts", "replog")

    def __init__(
        self,
        replog: ReplicatedLog,
        opts: QueryOptions,
        compute: Compute,
        answer: Answer,
        index_of: IndexOf | None,
    ) -> None:
        self.replog, self.opts, self.compute = replog, opts, compute
        self.answer, self.index_of = answer, index_of

    def passed(self) -> bool:
        index = self.index_of() if self.index_of is not None else self.compute()[0]
        return index > self.opts.min_index

    def answer_now(self) -> Any:
        return self.answer(*self.compute())

    def park(self, deadline: float) -> Deferred:
        loop = asyncio.get_running_loop()
        # A result's index never exceeds the applied index, so nothing can change before the
        # log passes both: a query for a far-future index sleeps until its deadline, woken by
        # nothing.
        after = max(self.replog.applied_index, self.opts.min_index)
        ready = self.replog.park(after, max(deadline - loop.time(), 0.0))

        async def finish() -> Any:
            reached = not ready.cancelled() and ready.result() is True
            if reached and loop.time() < deadline and not self.passed():
                # The log moved, but not what this query reads: wait on, same deadline.
                return self.park(deadline)
            return self.answer_now()

        return Deferred(ready, finish)


def answer_ok(index: int, body: Any) -> HttpResponse:
    """The usual answer: 200 with the body and the index headers."""
    return ok(body, index=index)

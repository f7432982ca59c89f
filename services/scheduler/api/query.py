"""Query options (index, wait, stale, prefix, per_page, next_token, filter) and the blocking
query loop over the replicated log."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.scheduler.api.http import Request, bad
from services.scheduler.bexpr import Filter, FilterSyntaxError, compile_filter
from services.scheduler.durations import DurationError, parse_duration
from shared.replog import ReplicatedLog

MAX_WAIT = 300.0  # Nomad's MaxBlockingRPCQueryTime and default


@dataclass
class QueryOptions:
    min_index: int = 0
    wait: float = MAX_WAIT
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
        o.wait = min(max(o.wait, 0.0), MAX_WAIT)
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


async def blocking(replog: ReplicatedLog, opts: QueryOptions, compute: Compute) -> tuple[int, Any]:
    """Answer at once without `index`; otherwise wait until the result's index passes it or the
    wait (plus Nomad's jitter of up to wait/16) runs out."""
    if not opts.stale:
        await replog.barrier()
    index, body = compute()
    if opts.min_index <= 0:
        return index, body
    wait = opts.wait + random.random() * opts.wait / 16
    deadline = time.monotonic() + wait
    while index <= opts.min_index:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        await replog.wait_for(replog.applied_index, left)
        index, body = compute()
    return index, body

"""The eval broker (leader only): at-least-once delivery of pending evaluations in priority
order, one evaluation per job in flight, nack timeout with redelivery, a delivery limit, and
delayed evaluations (WaitUntil)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Eval = dict[str, Any]


def job_key(ev: Eval) -> str:
    return f"{ev['Namespace']}\x00{ev['JobID']}"


@dataclass(slots=True)
class _Unacked:
    ev: Eval
    token: str
    timer: asyncio.TimerHandle


class EvalBroker:
    def __init__(
        self,
        *,
        nack_timeout: float = 60.0,
        delivery_limit: int = 3,
        on_failed: Callable[[Eval], None] | None = None,
        on_cancel: Callable[[list[Eval]], None] | None = None,
    ) -> None:
        self.nack_timeout = nack_timeout
        self.delivery_limit = delivery_limit
        self.on_failed = on_failed
        self.on_cancel = on_cancel
        self._ready: list[tuple[int, int, Eval]] = []
        self._seq = itertools.count()
        self._known: set[str] = set()
        self._active_jobs: set[str] = set()
        self._pending: dict[str, list[Eval]] = {}
        self._unacked: dict[str, _Unacked] = {}
        self._deliveries: dict[str, int] = {}
        self._delayed: dict[str, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        self.enabled = True

    # -- intake

    def enqueue(self, ev: Eval) -> None:
        if not self.enabled or ev["ID"] in self._known:
            return
        self._known.add(ev["ID"])
        wait_until = ev.get("WaitUntil")
        if wait_until:
            delay = wait_until / 1e9 - time.time()
            if delay > 0:
                loop = asyncio.get_running_loop()
                self._delayed[ev["ID"]] = loop.call_later(delay, self._release_delayed, ev)
                return
        self._admit(ev)

    def _release_delayed(self, ev: Eval) -> None:
        self._delayed.pop(ev["ID"], None)
        if self.enabled:
            self._admit(ev)

    def _admit(self, ev: Eval) -> None:
        key = job_key(ev)
        if key in self._active_jobs:
            self._pending.setdefault(key, []).append(ev)
            return
        self._active_jobs.add(key)
        self._push(ev)

    def _push(self, ev: Eval) -> None:
        heapq.heappush(self._ready, (-int(ev.get("Priority") or 50), next(self._seq), ev))
        self._wake.set()

    # -- delivery

    async def dequeue(self, types: list[str], wait: float) -> tuple[Eval, str] | None:
        deadline = time.monotonic() + wait
        while self.enabled:
            picked = self._pop(types)
            if picked is not None:
                return picked
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except TimeoutError:
                return None
        return None

    def _pop(self, types: list[str]) -> tuple[Eval, str] | None:
        skipped = []
        found = None
        while self._ready:
            item = heapq.heappop(self._ready)
            if not types or item[2]["Type"] in types:
                found = item[2]
                break
            skipped.append(item)
        for item in skipped:
            heapq.heappush(self._ready, item)
        if found is None:
            return None
        token = uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.nack_timeout, self._expire, found["ID"], token)
        self._unacked[found["ID"]] = _Unacked(found, token, timer)
        self._deliveries[found["ID"]] = self._deliveries.get(found["ID"], 0) + 1
        return found, token

    def _expire(self, eval_id: str, token: str) -> None:
        self.nack(eval_id, token)

    def ack(self, eval_id: str, token: str) -> bool:
        un = self._unacked.get(eval_id)
        if un is None or un.token != token:
            return False
        un.timer.cancel()
        del self._unacked[eval_id]
        self._deliveries.pop(eval_id, None)
        self._known.discard(eval_id)
        self._release_job(un.ev)
        return True

    def nack(self, eval_id: str, token: str) -> bool:
        un = self._unacked.get(eval_id)
        if un is None or un.token != token:
            return False
        un.timer.cancel()
        del self._unacked[eval_id]
        if self._deliveries.get(eval_id, 0) >= self.delivery_limit:
            self._deliveries.pop(eval_id, None)
            self._known.discard(eval_id)
            if self.on_failed is not None:
                self.on_failed(un.ev)
            self._release_job(un.ev)
            return True
        self._push(un.ev)  # redelivered; the job stays in flight
        return True

    def _release_job(self, ev: Eval) -> None:
        key = job_key(ev)
        waiting = self._pending.pop(key, [])
        if not waiting:
            self._active_jobs.discard(key)
            return
        # Only the newest matters: the scheduler always works from the latest job anyway.
        waiting.sort(key=lambda e: (int(e.get("Priority") or 50), e.get("CreateIndex", 0)))
        nxt = waiting.pop()
        self._push(nxt)
        if waiting:
            for e in waiting:
                self._known.discard(e["ID"])
            if self.on_cancel is not None:
                self.on_cancel(waiting)

    # -- lifecycle

    def stats(self) -> dict[str, int]:
        return {
            "ready": len(self._ready),
            "unacked": len(self._unacked),
            "pending": sum(len(v) for v in self._pending.values()),
            "delayed": len(self._delayed),
        }

    def disable(self) -> None:
        self.enabled = False
        for un in self._unacked.values():
            un.timer.cancel()
        for t in self._delayed.values():
            t.cancel()
        self._ready.clear()
        self._unacked.clear()
        self._pending.clear()
        self._delayed.clear()
        self._known.clear()
        self._active_jobs.clear()
        self._wake.set()

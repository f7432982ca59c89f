"""A scheduler worker (one or more on every replica): dequeue an evaluation from the leader's
broker, compute a plan against this replica's state, submit it through the log (where fit is
re-checked), retry on rejection, then record the evaluation's outcome and ack."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from typing import Any

import msgspec
import structlog

from services.scheduler import wire
from services.scheduler.scheduling.generic import GenericScheduler
from services.scheduler.scheduling.plan import Plan
from services.scheduler.scheduling.system import SystemScheduler
from services.scheduler.state.fsm import SchedulerFSM, new_eval
from shared.bus import Bus
from shared.errors import ServiceError
from shared.replog import ApplyError, ReplicatedLog

log = structlog.get_logger("scheduler.worker")

PLAN_CHUNK = 256  # placements per log entry: bounded entries, bounded apply time
MAX_ATTEMPTS = {"service": 5, "batch": 2, "system": 5, "sysbatch": 2}
TYPES = ["service", "batch", "system", "sysbatch"]
RETRY_DELAY_NS = 1_000_000_000


def _encode(obj: Any) -> bytes:
    return msgspec.msgpack.encode(obj)


class Worker:
    def __init__(
        self, bus: Bus, cluster: str, fsm: SchedulerFSM, replog: ReplicatedLog, name: str
    ) -> None:
        self.bus = bus
        self.fsm = fsm
        self.replog = replog
        self.name = name
        self.dequeue_subject = wire.subject(cluster, wire.DEQUEUE)
        self.ack_subject = wire.subject(cluster, wire.ACK)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.processed = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=5)

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stopping:
            try:
                reply = await self.bus.request(
                    self.dequeue_subject,
                    wire.Dequeue(types=TYPES, wait=2.0, worker=self.name),
                    wire.DequeueReply,
                    timeout=5.0,
                )
                backoff = 0.05
            except ServiceError:
                # No leader yet (election in progress): back off briefly and ask again.
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            if reply.eval is None:
                continue
            ok = False
            try:
                await self.process(reply.eval)
                ok = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("evaluation failed", eval_id=reply.eval["ID"])
            with contextlib.suppress(ServiceError):
                await self.bus.request(
                    self.ack_subject,
                    wire.Ack(eval_id=reply.eval["ID"], token=reply.token, ok=ok),
                    wire.Ok,
                    timeout=5.0,
                )

    async def process(self, delivered: dict[str, Any]) -> None:
        await self.replog.wait_for(int(delivered.get("ModifyIndex") or 0) - 1, 10.0)
        ev = self.fsm.t.evals.get(delivered["ID"], delivered)
        if ev["Status"] != "pending":
            return  # already handled (a redelivery after a lost ack)
        attempts = MAX_ATTEMPTS.get(ev["Type"], 2)
        plan: Plan | None = None
        rejected = snapshot = 0
        for _ in range(attempts):
            snapshot = self.replog.applied_index  # the state the plan is computed on
            plan = await self._compute(ev)
            rejected = await self._submit(plan)
            if not rejected:
                break
            # Refresh: the next attempt must see what the log applied meanwhile.
            with contextlib.suppress(ApplyError):
                await self.replog.barrier()
        assert plan is not None
        await self._finish(ev, plan, snapshot, retry=rejected > 0)
        self.processed += 1

    async def _compute(self, ev: dict[str, Any]) -> Plan:
        cls = SystemScheduler if ev["Type"] in ("system", "sysbatch") else GenericScheduler
        sched = cls(
            self.fsm.t,
            ev,
            now=time.time_ns(),
            new_id=lambda: str(uuid.uuid4()),
            rng=random.Random(),
        )
        return await sched.compute()

    async def _submit(self, plan: Plan) -> int:
        if plan.empty():
            return 0
        base = plan.payload()
        chunks = [plan.place[i : i + PLAN_CHUNK] for i in range(0, len(plan.place), PLAN_CHUNK)]
        rejected = 0
        for i, chunk in enumerate(chunks or [[]]):
            body = dict(base, place=chunk)
            if i:
                body.update(stop=[], update=[], deployment=None)
            try:
                _, result = await self.replog.append("plan.apply", _encode(body))
            except ApplyError as exc:
                log.warning("plan rejected", error=exc.message)
                return len(plan.place)
            rejected += len(result.get("rejected") or [])
        return rejected

    async def _finish(
        self, ev: dict[str, Any], plan: Plan, snapshot: int, *, retry: bool = False
    ) -> None:
        updated = dict(ev)
        failed = {k: m.as_dict() for k, m in plan.failed.items()}
        updated["QueuedAllocations"] = plan.queued
        updated["FailedTGAllocs"] = failed or None
        # A blocked eval carries it too: the log re-opens it if capacity changed after it.
        updated["SnapshotIndex"] = snapshot
        out = [*plan.followups]
        if plan.followups:
            updated["NextEval"] = plan.followups[0]["ID"]
        if failed and ev["TriggeredBy"] == "queued-allocs":
            updated["Status"] = "blocked"
            updated["StatusDescription"] = "created due to placement conflicts"
        else:
            updated["Status"] = "complete"
            updated["StatusDescription"] = ""
            if failed:
                job = self.fsm.t.jobs.get(f"{ev['Namespace']}\x00{ev['JobID']}")
                already = any(
                    e["Status"] == "blocked"
                    for e in self.fsm.t.job_evals(ev["Namespace"], ev["JobID"])
                )
                if job is not None and not already:
                    blocked = new_eval(str(uuid.uuid4()), job, "queued-allocs", status="blocked")
                    blocked["PreviousEval"] = ev["ID"]
                    blocked["SnapshotIndex"] = snapshot
                    blocked["StatusDescription"] = "created due to placement conflicts"
                    blocked["FailedTGAllocs"] = failed
                    updated["BlockedEval"] = blocked["ID"]
                    out.append(blocked)
        if retry:
            # Out of plan attempts with placements still rejected: try again shortly, as
            # Nomad does after max-plan-attempts, rather than leave the job short.
            job = self.fsm.t.jobs.get(f"{ev['Namespace']}\x00{ev['JobID']}")
            if job is not None:
                again = new_eval(str(uuid.uuid4()), job, "max-plan-attempts")
                again["PreviousEval"] = ev["ID"]
                again["WaitUntil"] = time.time_ns() + RETRY_DELAY_NS
                updated["NextEval"] = again["ID"]
                out.append(again)
        out.insert(0, updated)
        await self.replog.append("eval.upsert", _encode({"evals": out}))

"""The run executor: on the workspace service's leader, it starts queued runs, submits each
plan and apply as a batch job to Trellis's scheduler over the bus (with the workspace
service's own scheduler credential, never a user's token), watches the job, and errors the run
when the job ends without the task reporting (a lost node, a task that died). Canceled runs
get their job stopped. Everything it decides goes through the log, so a new leader carries on
where the old one stopped."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from services.gateway.secure import Channel, service_channel
from services.workspace import run_job
from services.workspace.blobs import BlobStore
from services.workspace.handlers.runs import plan_file_blob
from services.workspace.runs_model import Run
from services.workspace.state import WorkspaceState
from shared.bus import Bus
from shared.messages import HttpRequest
from shared.replog import ApplyError, ReplicatedLog
from shared.settings import Settings
from shared.subjects import API_SCHEDULER

log = structlog.get_logger("workspace.executor")
_enc = msgspec.msgpack.Encoder()

TICK = 0.25  # seconds between looks at the runs (a leader-only loop, cheap when idle)
WATCH_EVERY = 1.0  # seconds between looks at one job's allocations
LOST_SUBMISSION = 60.0  # seconds a recorded job may be missing from the scheduler


def public_url(settings: Settings) -> str:
    if settings.workspace_public_url:
        return settings.workspace_public_url.rstrip("/")
    scheme = "https" if settings.workspace_tls.cert_file else "http"
    host, _, port = settings.workspace_addr.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"{scheme}://{host}:{port}"


class RunExecutor:
    def __init__(
        self,
        bus: Bus,
        settings: Settings,
        state: WorkspaceState,
        replog: ReplicatedLog,
        is_leader: Callable[[], bool],
        blobs: BlobStore | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings
        self.state = state
        self.replog = replog
        self.is_leader = is_leader
        self.blobs = blobs
        self._task: asyncio.Task[None] | None = None
        self._checked: dict[str, float] = {}  # job id -> when its allocations were last read
        self._live: set[str] = set()  # the live runs of the last look
        self._interrupted: set[str] = set()  # runs whose running job was told to stop
        self._channel: Channel | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="run-executor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                if self.is_leader():
                    await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("run executor tick failed")
            await asyncio.sleep(TICK)

    async def _append(self, op: str, payload: dict[str, Any]) -> Any:
        try:
            return (await self.replog.append(op, _enc.encode(payload)))[1]
        except ApplyError as exc:
            # Someone else moved the run first (a user's cancel, the task's result): fine.
            log.info("run op refused", op=op, run=payload.get("id"), reason=exc.message)
            return None

    async def tick(self) -> None:
        # The leader's state is what it has applied; apply re-checks every decision below.
        live = [self.state.runs[i] for i in list(self.state.live_runs) if i in self.state.runs]
        for ws_id in {r.workspace_id for r in live if r.status == "pending"}:
            nxt = self.state.next_run(ws_id)
            if nxt is not None:
                await self._append("run.start", {"id": nxt.id})
        for run in live:
            running = _PHASE.get(run.status)
            if running and run.cancel_requested and run.id not in self._interrupted:
                # Stopping the job signals the task's process group: terraform stops as on
                # Ctrl-C, saves its state, and the task reports the run canceled.
                self._interrupted.add(run.id)
                await self._stop_job(run_job.job_id(run.id, running))
            if run.status == "plan_queued" and not run.plan.job_id:
                await self._submit(run, "plan")
            elif run.status == "confirmed":
                await self._submit(run, "apply")
            elif run.status in ("plan_queued", "planning"):
                await self._watch(run, "plan")
            elif run.status in ("apply_queued", "applying"):
                await self._watch(run, "apply")
        # Runs that ended since the last look: a canceled one's job is stopped, and the saved
        # plan (variable values in it, sealed) goes.
        for rid in self._live - self.state.live_runs:
            for phase in ("plan", "apply"):
                self._checked.pop(run_job.job_id(rid, phase), None)
            self._interrupted.discard(rid)
            run = self.state.runs.get(rid)
            if run is not None and run.status == "canceled":
                await self._stop_jobs(run)
            if self.blobs is not None:
                await self.blobs.delete(plan_file_blob(rid))
        self._live = {r.id for r in live}

    # --- the scheduler, over the bus ---

    async def _sched(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"content-type": "application/json"}
        if self.settings.runner_scheduler_token:
            headers["x-nomad-token"] = self.settings.runner_scheduler_token
        req = HttpRequest(
            method=method,
            path=path,
            headers=headers,
            body=b"" if body is None else json.dumps(body).encode(),
        )
        if self._channel is None:
            # Sealed end to end like the gateway's (shared/api_session.py): the scheduler's
            # API subject takes nothing else, and the envelope carries a token.
            self._channel = service_channel(self.bus, self.settings, "scheduler", API_SCHEDULER)
        resp = await self._channel.call(req, timeout=15.0)
        try:
            doc = json.loads(resp.body) if resp.body else None
        except ValueError:
            doc = resp.body.decode(errors="replace")[:300]
        return resp.status, doc

    def _ca_pem(self) -> str:
        path = self.settings.runner_ca_file
        if not path:
            return ""
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    async def _submit(self, run: Run, phase: str) -> None:
        jid = run_job.job_id(run.id, phase)
        ticket = secrets.token_urlsafe(32)
        digest = hashlib.sha256(ticket.encode()).hexdigest()
        if (
            await self._append(
                "run.job", {"id": run.id, "phase": phase, "job_id": jid, "ticket_digest": digest}
            )
            is None
        ):
            return
        spec = run_job.job_spec(
            run.id,
            phase,
            api_url=public_url(self.settings),
            ticket=ticket,
            # Resolved by the task on its node (the wheel's bin dir, then a plain PATH).
            terraform=self.settings.runner_terraform,
            datacenter=self.settings.runner_datacenter,
            ca_pem=self._ca_pem(),
        )
        try:
            status, doc = await self._sched("POST", "/v1/jobs", spec)
        except Exception as exc:  # no scheduler answering: the run cannot go on
            status, doc = 503, type(exc).__name__
        if status != 200:
            await self._append(
                "run.error",
                {
                    "id": run.id,
                    "message": f"the scheduler refused the {phase} job ({status}): {doc}",
                },
            )
            return
        self._checked[jid] = time.monotonic()
        log.info("run job submitted", run=run.id, phase=phase, job=jid)

    async def _watch(self, run: Run, phase: str) -> None:
        jid = run_job.job_id(run.id, phase)
        now = time.monotonic()
        if now - self._checked.get(jid, 0.0) < WATCH_EVERY:
            return
        self._checked[jid] = now
        try:
            status, allocs = await self._sched("GET", f"/v1/job/{jid}/allocations")
        except Exception:
            return  # the scheduler is away for now; look again later
        if status != 200 or not isinstance(allocs, list):
            return
        why = run_job.verdict(allocs, phase)
        queued = (run.plan if phase == "plan" else run.apply).status_timestamps.get("queued-at")
        if not allocs and queued is not None and time.time() - queued > LOST_SUBMISSION:
            # A leader that died between recording the job and submitting it: none will come.
            with contextlib.suppress(Exception):
                if (await self._sched("GET", f"/v1/job/{jid}"))[0] == 404:
                    why = f"the {phase} job was never submitted to the scheduler"
        if why is None:
            return
        # The task may have reported just before its job ended: read the run again.
        await self.replog.barrier()
        if self.state.runs.get(run.id) is not run or run.status not in _RUNNING[phase]:
            return
        await self._append("run.error", {"id": run.id, "message": why, "job_id": jid})
        log.warning("run errored", run=run.id, phase=phase, reason=why)

    async def _stop_jobs(self, run: Run) -> None:
        for phase in (run.plan, run.apply):
            if phase.job_id and phase.status == "canceled":
                if "force-canceled-at" in run.status_timestamps:
                    await self._kill_tasks(phase.job_id)
                await self._stop_job(phase.job_id)

    async def _kill_tasks(self, jid: str) -> None:
        """force-cancel: SIGKILL now, not after the graceful stop's kill timeout."""
        with contextlib.suppress(Exception):
            status, allocs = await self._sched("GET", f"/v1/job/{jid}/allocations")
            for a in allocs if status == 200 and isinstance(allocs, list) else []:
                if a.get("ClientStatus") == "running":
                    await self._sched(
                        "POST",
                        f"/v1/client/allocation/{a['ID']}/signal",
                        {"Task": run_job.TASK, "Signal": "SIGKILL"},
                    )

    async def _stop_job(self, jid: str) -> None:
        with contextlib.suppress(Exception):
            await self._sched("DELETE", f"/v1/job/{jid}")


_RUNNING = {"plan": ("plan_queued", "planning"), "apply": ("apply_queued", "applying")}
_PHASE = {"planning": "plan", "applying": "apply"}

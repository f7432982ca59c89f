"""The log operations of remote runs, mixed into the workspace state machine: configuration
versions, runs and their phases. The status rules are run_machine.py's; this adds what depends
on the rest of the state (the workspace's queue, its current run, its lock, run tokens)."""

from __future__ import annotations

from typing import Any

from services.workspace import run_machine as rm
from services.workspace.model import Workspace
from services.workspace.runs_model import ConfigurationVersion, Run
from shared.replog import ApplyError

# A phase's log is capped: the log entries, every replica's memory and the snapshots hold it.
MAX_LOG = 4 * 1024 * 1024
_TRUNCATED = b"\n[log truncated: over 4 MiB]\n"


class RunsState:
    """Mixed into WorkspaceState: its `_op_*` methods become log operations."""

    workspaces: dict[str, Workspace]
    tokens: dict[str, Any]

    def _init_runs(self) -> None:
        self.cvs: dict[str, ConfigurationVersion] = {}
        self.cvs_by_ws: dict[str, list[str]] = {}
        self.runs: dict[str, Run] = {}
        self.runs_by_ws: dict[str, list[str]] = {}  # oldest first
        self.live_runs: set[str] = set()  # not final yet: what the executor looks at

    def _index_cv(self, cv: ConfigurationVersion) -> None:
        self.cvs[cv.id] = cv
        self.cvs_by_ws.setdefault(cv.workspace_id, []).append(cv.id)

    def _index_run(self, run: Run) -> None:
        self.runs[run.id] = run
        self.runs_by_ws.setdefault(run.workspace_id, []).append(run.id)
        if run.status not in rm.FINAL:
            self.live_runs.add(run.id)

    def _drop_runs(self, ws_id: str) -> None:
        for cid in self.cvs_by_ws.pop(ws_id, []):
            self.cvs.pop(cid, None)
        for rid in self.runs_by_ws.pop(ws_id, []):
            self.runs.pop(rid, None)
            self.live_runs.discard(rid)

    def _run(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise ApplyError(404, "run not found")
        return run

    @staticmethod
    def _machine(fn: Any, *args: Any, **kw: Any) -> None:
        try:
            fn(*args, **kw)
        except rm.TransitionError as exc:
            raise ApplyError(exc.code, exc.message) from None

    def _release(self, run: Run) -> None:
        """A run in a final status lets go of its workspace and its run tokens die."""
        run.plan.ticket_digest = run.apply.ticket_digest = ""  # unredeemed tickets die too
        self.live_runs.discard(run.id)
        w = self.workspaces.get(run.workspace_id)
        if w is not None:
            if w.current_run_id == run.id:
                w.current_run_id = None
            if w.locked and w.locked_by == ("runs", run.id):
                w.locked, w.locked_by, w.lock_reason = False, None, ""
        for tok in [k for k in self.tokens.values() if k.kind == "run" and k.description == run.id]:
            self._drop_token(tok.id)  # type: ignore[attr-defined]

    def _after(self, run: Run) -> Any:
        if run.status in rm.FINAL:
            self._release(run)
        return run.status

    # --- configuration versions ---

    def _op_cv__create(self, p: dict[str, Any], t: float) -> str:
        self._ws(p["workspace_id"])  # type: ignore[attr-defined]
        self._check_new_id(self.cvs, p["id"])  # type: ignore[attr-defined]
        cv = ConfigurationVersion(
            id=p["id"],
            workspace_id=p["workspace_id"],
            created_at=t,
            auto_queue_runs=p.get("auto_queue_runs", True),
            speculative=p.get("speculative", False),
            upload_digest=p["upload_digest"],
            status_timestamps={},
        )
        self._index_cv(cv)
        return cv.id

    def _op_cv__upload(self, p: dict[str, Any], t: float) -> str:
        cv = self.cvs.get(p["id"])
        if cv is None:
            raise ApplyError(404, "configuration version not found")
        if cv.status != "pending":
            raise ApplyError(409, f"configuration version is already {cv.status}")
        cv.upload_digest = ""
        cv.size = p.get("size", 0)
        if p.get("error"):
            cv.status, cv.error_message = "errored", p["error"]
        else:
            cv.status = "uploaded"
        cv.status_timestamps[f"{cv.status}-at"] = t
        return cv.status

    # --- runs ---

    def _op_run__create(self, p: dict[str, Any], t: float) -> str:
        w = self._ws(p["workspace_id"])  # type: ignore[attr-defined]
        if w.execution_mode == "local":
            raise ApplyError(
                409, "the workspace's execution mode is local: Terraform runs on your machine"
            )
        cv = self.cvs.get(p["cv_id"])
        if cv is None or cv.workspace_id != w.id:
            raise ApplyError(422, "configuration version not found in this workspace")
        if cv.status != "uploaded":
            raise ApplyError(422, f"configuration version is {cv.status}, not uploaded")
        self._check_new_id(self.runs, p["id"])  # type: ignore[attr-defined]
        seq = len(self.runs_by_ws.get(w.id, []))
        run = Run(
            id=p["id"],
            workspace_id=w.id,
            cv_id=cv.id,
            created_at=t,
            seq=seq,
            message=p.get("message", ""),
            is_destroy=p.get("is_destroy", False),
            plan_only=p.get("plan_only", False) or cv.speculative,
            auto_apply=p.get("auto_apply", w.auto_apply),
            created_by=tuple(p["by"]) if p.get("by") else None,  # type: ignore[arg-type]
            status_timestamps={"pending-at": t},
        )
        self._index_run(run)
        w.latest_run_id = run.id
        return run.id

    def next_run(self, ws_id: str) -> Run | None:
        """The run that may start now in this workspace, if any."""
        w = self.workspaces.get(ws_id)
        if w is None:
            return None
        runs = [self.runs[r] for r in self.runs_by_ws.get(ws_id, [])]
        for r in runs:
            if r.status == "pending" and r.plan_only:
                return r  # speculative plans neither queue nor lock
        if w.current_run_id is not None or w.locked:
            return None
        queued = rm.queue_order(runs)
        return queued[0] if queued else None

    def _op_run__start(self, p: dict[str, Any], t: float) -> str:
        run = self._run(p["id"])
        if self.next_run(run.workspace_id) is not run:
            raise ApplyError(409, "the run is not first in its workspace's queue")
        self._machine(rm.start, run, t)
        if not run.plan_only:
            w = self.workspaces[run.workspace_id]
            w.current_run_id = run.id
            w.locked, w.locked_by, w.lock_reason = True, ("runs", run.id), "Locked by run"
        return run.status

    def _op_run__job(self, p: dict[str, Any], t: float) -> str:
        """The executor is about to submit a phase's job: its id and the ticket's digest."""
        run = self._run(p["id"])
        phase = rm.phase_of(run, p["phase"])
        if p["phase"] == "plan":
            if run.status != "plan_queued" or phase.job_id:
                raise ApplyError(409, f"run is {run.status}; no plan job is due")
        else:
            self._machine(rm.apply_queued, run, t)
        phase.job_id, phase.ticket_digest = p["job_id"], p["ticket_digest"]
        return run.status

    def _op_run__redeem(self, p: dict[str, Any], t: float) -> str:
        """The task's ticket, once: the phase starts."""
        run = self._run(p["id"])
        phase = rm.phase_of(run, p["phase"])
        if not phase.ticket_digest or phase.ticket_digest != p["digest"]:
            raise ApplyError(404, "ticket not found")
        phase.ticket_digest = ""
        self._machine(rm.phase_started, run, p["phase"], t)
        return run.status

    def _op_run__log(self, p: dict[str, Any], t: float) -> None:
        run = self._run(p["id"])
        phase = rm.phase_of(run, p["phase"])
        if phase.status != "running":
            raise ApplyError(409, f"the {p['phase']} is {phase.status}, not running")
        if len(phase.log) >= MAX_LOG:
            return
        data = phase.log + p["data"]
        phase.log = data if len(data) <= MAX_LOG else data[:MAX_LOG] + _TRUNCATED

    def _op_run__result(self, p: dict[str, Any], t: float) -> str:
        run = self._run(p["id"])
        phase = rm.phase_of(run, p["phase"])
        if phase.status != "running":
            raise ApplyError(409, f"the {p['phase']} is {phase.status}, not running")
        if run.cancel_requested and not (p["ok"] and p["phase"] == "apply"):
            # The task stopped on the cancel (an apply that finished first is applied).
            self._machine(rm.canceled, run, t)
        elif not p["ok"]:
            self._machine(rm.errored, run, t, p.get("message") or f"the {p['phase']} failed")
        elif p["phase"] == "plan":
            self._machine(
                rm.plan_finished,
                run,
                t,
                has_changes=p.get("has_changes", False),
                add=p.get("add", 0),
                change=p.get("change", 0),
                destroy=p.get("destroy", 0),
            )
        else:
            run.state_version_id = p.get("state_version_id")
            self._machine(
                rm.apply_finished,
                run,
                t,
                add=p.get("add", 0),
                change=p.get("change", 0),
                destroy=p.get("destroy", 0),
            )
        return self._after(run)

    def _op_run__error(self, p: dict[str, Any], t: float) -> str:
        run = self._run(p["id"])
        if p.get("job_id") and p["job_id"] not in (run.plan.job_id, run.apply.job_id):
            raise ApplyError(409, "the job is not this run's")
        self._machine(rm.errored, run, t, p["message"])
        return self._after(run)

    def _op_run__action(self, p: dict[str, Any], t: float) -> str:
        run = self._run(p["id"])
        action = p["action"]
        if action == "apply":
            self._machine(rm.confirm, run, t)
        elif action == "discard":
            self._machine(rm.discard, run, t)
        elif action == "cancel":
            self._machine(rm.cancel, run, t)
        elif action == "force-cancel":
            self._machine(rm.cancel, run, t, force=True)
        else:
            raise ApplyError(404, f"unknown run action {action}")
        if p.get("comment"):
            run.message = run.message or p["comment"]
        return self._after(run)

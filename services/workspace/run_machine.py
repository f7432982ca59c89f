"""HCP Terraform's run status machine, pure: which status follows which event, the
timestamps each one leaves, the actions a run offers, and the queue order. The state machine
(state_runs.py) calls these while applying log entries; they never do I/O."""

from __future__ import annotations

from services.workspace.runs_model import Phase, Run

FINAL = frozenset({"applied", "planned_and_finished", "discarded", "canceled", "errored"})
# A run that holds its workspace (current run, lock) until it reaches a final status.
ACTIVE = frozenset({"plan_queued", "planning", "planned", "confirmed", "apply_queued", "applying"})
CANCELABLE = frozenset({"pending", "plan_queued", "planning", "apply_queued", "applying"})
RUNNING = frozenset({"planning", "applying"})  # a task runs terraform
DISCARDABLE = frozenset({"pending", "planned"})
PHASE_FINAL = frozenset({"finished", "errored", "canceled", "unreachable"})


class TransitionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _set(run: Run, status: str, t: float) -> None:
    run.status = status
    run.status_timestamps[f"{status.replace('_', '-')}-at"] = t


# The timestamp keys of go-tfe's PlanStatusTimestamps / ApplyStatusTimestamps.
_PHASE_STAMP = {"running": "started-at"}


def _phase(phase: Phase, status: str, t: float) -> None:
    phase.status = status
    phase.status_timestamps[_PHASE_STAMP.get(status, f"{status}-at")] = t


def _need(run: Run, allowed: frozenset[str] | set[str], action: str) -> None:
    if run.status not in allowed:
        raise TransitionError(409, f"run is {run.status}; it cannot be {action}")


def start(run: Run, t: float) -> None:
    """The run leaves the queue: its plan job is about to be submitted."""
    _need(run, {"pending"}, "started")
    _set(run, "plan_queued", t)
    _phase(run.plan, "queued", t)


def phase_started(run: Run, which: str, t: float) -> None:
    """The task of the phase redeemed its ticket: it runs."""
    if which == "plan":
        _need(run, {"plan_queued"}, "planning")
        _set(run, "planning", t)
        _phase(run.plan, "running", t)
    else:
        _need(run, {"apply_queued"}, "applying")
        _set(run, "applying", t)
        _phase(run.apply, "running", t)


def plan_finished(
    run: Run, t: float, *, has_changes: bool, add: int, change: int, destroy: int
) -> None:
    _need(run, {"planning"}, "planned")
    _phase(run.plan, "finished", t)
    run.plan.additions, run.plan.changes, run.plan.destructions = add, change, destroy
    run.has_changes = has_changes
    if run.plan_only or not has_changes:
        _set(run, "planned_and_finished", t)
        _phase(run.apply, "unreachable", t)
        return
    _set(run, "planned", t)
    if run.auto_apply:
        confirm(run, t)


def confirm(run: Run, t: float) -> None:
    """`apply` action (or auto-apply): the apply job may be submitted."""
    if run.plan_only:
        raise TransitionError(409, "a speculative (plan-only) run cannot be applied")
    _need(run, {"planned"}, "applied")
    _set(run, "confirmed", t)


def apply_queued(run: Run, t: float) -> None:
    _need(run, {"confirmed"}, "queued for apply")
    _set(run, "apply_queued", t)
    _phase(run.apply, "queued", t)


def apply_finished(run: Run, t: float, *, add: int, change: int, destroy: int) -> None:
    _need(run, {"applying"}, "applied")
    _phase(run.apply, "finished", t)
    run.apply.additions, run.apply.changes, run.apply.destructions = add, change, destroy
    _set(run, "applied", t)


def errored(run: Run, t: float, message: str) -> None:
    """The run fails where it stands; the running phase errors, the other becomes unreachable."""
    if run.status in FINAL:
        raise TransitionError(409, f"run is already {run.status}")
    run.error_message = message
    for phase in (run.plan, run.apply):
        if phase.status in ("queued", "running"):
            _phase(phase, "errored", t)
        elif phase.status == "pending":
            _phase(phase, "unreachable", t)
    _set(run, "errored", t)


def discard(run: Run, t: float) -> None:
    _need(run, DISCARDABLE, "discarded")
    if run.plan.status == "pending":
        _phase(run.plan, "unreachable", t)
    _phase(run.apply, "unreachable", t)
    _set(run, "discarded", t)


def cancel(run: Run, t: float, *, force: bool = False) -> None:
    """`cancel` of a run whose plan or apply is running asks its task to stop, as Ctrl-C
    does: terraform finishes what it is doing and saves the state, and the run becomes
    `canceled` when the task reports (canceled()). A run with no task running, and
    `force-cancel`, end at once."""
    _need(run, CANCELABLE, "force-canceled" if force else "canceled")
    if not force and run.status in RUNNING:
        if run.cancel_requested:
            raise TransitionError(409, "a cancel is already requested; force-cancel ends the run")
        run.cancel_requested = True
        return
    canceled(run, t, force=force)


def canceled(run: Run, t: float, *, force: bool = False) -> None:
    """The run ends canceled: a queued or running phase is canceled, a pending one unreachable."""
    run.cancel_requested = True
    for phase in (run.plan, run.apply):
        if phase.status in ("queued", "running"):
            _phase(phase, "canceled", t)
        elif phase.status == "pending":
            _phase(phase, "unreachable", t)
    if force:
        run.status_timestamps["force-canceled-at"] = t
    _set(run, "canceled", t)


def actions(run: Run) -> dict[str, bool]:
    return {
        "is-cancelable": run.status in CANCELABLE and not run.cancel_requested,
        "is-confirmable": run.status == "planned" and not run.plan_only,
        "is-discardable": run.status in DISCARDABLE,
        "is-force-cancelable": run.status in CANCELABLE and run.status != "pending",
    }


def phase_of(run: Run, which: str) -> Phase:
    if which not in ("plan", "apply"):
        raise TransitionError(422, "phase must be plan or apply")
    return run.plan if which == "plan" else run.apply


def queue_order(runs: list[Run]) -> list[Run]:
    """Runs still waiting for their workspace, oldest first (speculative plans do not wait)."""
    return sorted(
        (r for r in runs if r.status == "pending" and not r.plan_only), key=lambda r: r.seq
    )

"""Remote runs, pure parts: the run status machine (run_machine.py), the run's state ops with
the workspace's queue and lock (state_runs.py through WorkspaceState), the job spec and the
verdict on a job that ended without a report (run_job.py), and the runner's helpers."""

from __future__ import annotations

import io
import re
import stat
import sys
import tarfile
from pathlib import Path
from typing import Any

import msgspec
import pytest

from services.scheduler.client.taskenv import interpolate
from services.workspace import run_job
from services.workspace import run_machine as rm
from services.workspace.handlers.runs import check_archive
from services.workspace.runner_task import (
    RunnerError,
    apply_counts,
    cli_config,
    extract,
    find_terraform,
    hcl_value,
    plan_counts,
)
from services.workspace.runs_model import Run
from services.workspace.state import WorkspaceState
from shared.replog import ApplyError, LogEntry
from shared.task_python import world_executable

_enc = msgspec.msgpack.Encoder()


def new_run(**kw: Any) -> Run:
    return Run(id="run-1", workspace_id="ws-1", cv_id="cv-1", created_at=0.0, seq=0, **kw)


def test_the_whole_way_to_applied_with_timestamps() -> None:
    r = new_run()
    rm.start(r, 1.0)
    rm.phase_started(r, "plan", 2.0)
    rm.plan_finished(r, 3.0, has_changes=True, add=2, change=1, destroy=0)
    assert r.status == "planned" and rm.actions(r)["is-confirmable"]
    rm.confirm(r, 4.0)
    rm.apply_queued(r, 5.0)
    rm.phase_started(r, "apply", 6.0)
    rm.apply_finished(r, 7.0, add=2, change=1, destroy=0)
    assert r.status == "applied"
    assert r.status_timestamps == {
        "plan-queued-at": 1.0,
        "planning-at": 2.0,
        "planned-at": 3.0,
        "confirmed-at": 4.0,
        "apply-queued-at": 5.0,
        "applying-at": 6.0,
        "applied-at": 7.0,
    }
    assert r.plan.status_timestamps == {"queued-at": 1.0, "started-at": 2.0, "finished-at": 3.0}
    assert (r.plan.additions, r.apply.changes) == (2, 1)
    assert not any(rm.actions(r).values())


@pytest.mark.parametrize(
    ("kw", "changes", "status"),
    [
        ({}, False, "planned_and_finished"),
        ({"plan_only": True}, True, "planned_and_finished"),
        ({"auto_apply": True}, True, "confirmed"),
    ],
)
def test_plan_outcomes(kw: dict[str, Any], changes: bool, status: str) -> None:
    r = new_run(**kw)
    rm.start(r, 1.0)
    rm.phase_started(r, "plan", 2.0)
    rm.plan_finished(r, 3.0, has_changes=changes, add=0, change=0, destroy=0)
    assert r.status == status
    if status == "planned_and_finished":
        assert r.apply.status == "unreachable"


def test_refused_transitions_say_why() -> None:
    r = new_run()
    with pytest.raises(rm.TransitionError, match="pending; it cannot be applied"):
        rm.confirm(r, 1.0)
    rm.start(r, 1.0)
    with pytest.raises(rm.TransitionError):
        rm.start(r, 2.0)
    with pytest.raises(rm.TransitionError):
        rm.discard(r, 2.0)  # a queued plan is canceled, not discarded
    spec = new_run(plan_only=True)
    rm.start(spec, 1.0)
    rm.phase_started(spec, "plan", 1.0)
    rm.plan_finished(spec, 1.0, has_changes=True, add=1, change=0, destroy=0)
    with pytest.raises(rm.TransitionError):
        rm.confirm(spec, 2.0)


def test_errors_and_cancels_mark_the_phases() -> None:
    r = new_run()
    rm.start(r, 1.0)
    rm.phase_started(r, "plan", 2.0)
    rm.errored(r, 3.0, "the plan task died")
    assert (r.status, r.plan.status, r.apply.status) == ("errored", "errored", "unreachable")
    assert r.error_message == "the plan task died"
    with pytest.raises(rm.TransitionError):
        rm.errored(r, 4.0, "again")
    c = new_run()
    rm.start(c, 1.0)
    assert rm.actions(c)["is-cancelable"]
    rm.cancel(c, 2.0, force=True)
    assert c.status == "canceled" and c.plan.status == "canceled"
    assert c.status_timestamps["force-canceled-at"] == 2.0
    with pytest.raises(rm.TransitionError):
        rm.cancel(c, 3.0)


def test_counts_from_terraform_output() -> None:
    assert plan_counts("x\nPlan: 3 to add, 1 to change, 2 to destroy.\n") == (3, 1, 2)
    assert plan_counts("No changes. Your infrastructure matches") == (0, 0, 0)
    assert apply_counts("Apply complete! Resources: 1 added, 0 changed, 4 destroyed.") == (
        1,
        0,
        4,
    )
    assert apply_counts("Destroy complete! Resources: 5 destroyed.") == (0, 0, 5)


def test_queue_order_is_creation_order_and_skips_speculative_plans() -> None:
    runs = [
        Run(id=f"run-{i}", workspace_id="w", cv_id="c", created_at=0.0, seq=i) for i in (2, 0, 1)
    ]
    runs[1].plan_only = True
    assert [r.id for r in rm.queue_order(runs)] == ["run-1", "run-2"]


# --- the state ops: queue, lock and current run follow the run ---


def apply(state: WorkspaceState, op: str, payload: dict[str, Any], t: float = 1.0) -> Any:
    state.index += 1
    return state.apply(
        state.index, LogEntry(type=op, payload=_enc.encode(payload), time=t, id=str(state.index))
    )


def workspace_state() -> WorkspaceState:
    s = WorkspaceState()
    apply(
        s,
        "org.create",
        {
            "id": "org-1",
            "name": "acme",
            "email": "a@b.c",
            "owners_team_id": "team-o",
            "default_project_id": "prj-1",
        },
    )
    apply(s, "ws.create", {"fields": {"id": "ws-1", "org_id": "org-1", "name": "app"}})
    apply(s, "cv.create", {"id": "cv-1", "workspace_id": "ws-1", "upload_digest": "d"})
    apply(s, "cv.upload", {"id": "cv-1", "size": 10, "error": ""})
    return s


def test_one_run_at_a_time_and_the_lock_follows() -> None:
    s = workspace_state()
    for i in (1, 2):
        apply(s, "run.create", {"id": f"run-{i}", "workspace_id": "ws-1", "cv_id": "cv-1"})
    assert s.next_run("ws-1").id == "run-1"
    with pytest.raises(ApplyError, match="not first"):
        apply(s, "run.start", {"id": "run-2"})
    apply(s, "run.start", {"id": "run-1"})
    ws = s.workspaces["ws-1"]
    assert ws.locked and ws.locked_by == ("runs", "run-1") and ws.current_run_id == "run-1"
    assert s.next_run("ws-1") is None
    apply(
        s,
        "token.create",
        {"id": "at-1", "kind": "run", "owner_id": "ws-1", "digest": "x", "description": "run-1"},
    )
    apply(s, "run.action", {"id": "run-1", "action": "cancel"})
    assert not ws.locked and ws.current_run_id is None
    assert "at-1" not in s.tokens  # the run token died with its run
    assert s.live_runs == {"run-2"}  # what the executor looks at
    assert s.next_run("ws-1").id == "run-2"
    # Snapshots keep runs and configuration versions.
    again = WorkspaceState()
    again.restore(s.snapshot(), s.index)
    assert again.runs["run-1"].status == "canceled" and again.cvs["cv-1"].status == "uploaded"
    assert again.next_run("ws-1").id == "run-2"
    assert again.live_runs == {"run-2"}


def test_a_manual_lock_holds_the_queue_and_tickets_work_once() -> None:
    s = workspace_state()
    apply(s, "ws.lock", {"id": "ws-1", "by": ["users", "u-1"]})
    apply(s, "run.create", {"id": "run-1", "workspace_id": "ws-1", "cv_id": "cv-1"})
    assert s.next_run("ws-1") is None
    apply(s, "ws.unlock", {"id": "ws-1", "by": ["users", "u-1"]})
    apply(s, "run.start", {"id": "run-1"})
    apply(s, "run.job", {"id": "run-1", "phase": "plan", "job_id": "j", "ticket_digest": "t"})
    with pytest.raises(ApplyError):
        apply(s, "run.redeem", {"id": "run-1", "phase": "plan", "digest": "other"})
    apply(s, "run.redeem", {"id": "run-1", "phase": "plan", "digest": "t"})
    with pytest.raises(ApplyError):
        apply(s, "run.redeem", {"id": "run-1", "phase": "plan", "digest": "t"})
    apply(s, "run.log", {"id": "run-1", "phase": "plan", "data": b"hello\n"})
    assert s.runs["run-1"].plan.log == b"hello\n"
    with pytest.raises(ApplyError, match="not this run"):
        apply(s, "run.error", {"id": "run-1", "message": "x", "job_id": "other-job"})


def running(s: WorkspaceState, run_id: str, phase: str = "plan") -> None:
    """`run_id` started, its plan job submitted and the task running."""
    apply(s, "run.create", {"id": run_id, "workspace_id": "ws-1", "cv_id": "cv-1"})
    apply(s, "run.start", {"id": run_id})
    apply(s, "run.job", {"id": run_id, "phase": "plan", "job_id": "j", "ticket_digest": "t"})
    apply(s, "run.redeem", {"id": run_id, "phase": "plan", "digest": "t"})


@pytest.mark.parametrize(
    ("result", "status"),
    [
        ({"phase": "plan", "ok": False, "message": "the plan was canceled"}, "canceled"),
        ({"phase": "plan", "ok": True, "has_changes": True}, "canceled"),
    ],
)
def test_cancel_of_a_running_plan_waits_for_its_task(result: dict[str, Any], status: str) -> None:
    """Cancel interrupts the running task (terraform saves its state); the run holds the
    workspace until the task reports, and only then is canceled."""
    s = workspace_state()
    running(s, "run-1")
    apply(s, "run.action", {"id": "run-1", "action": "cancel"})
    r = s.runs["run-1"]
    assert r.status == "planning" and r.cancel_requested
    assert s.workspaces["ws-1"].locked_by == ("runs", "run-1")
    assert not rm.actions(r)["is-cancelable"] and rm.actions(r)["is-force-cancelable"]
    with pytest.raises(ApplyError, match="already requested"):
        apply(s, "run.action", {"id": "run-1", "action": "cancel"})
    apply(s, "run.result", {"id": "run-1", **result})
    assert r.status == status and r.plan.status == "canceled"
    assert r.apply.status == "unreachable" and "force-canceled-at" not in r.status_timestamps
    assert not s.workspaces["ws-1"].locked and s.live_runs == set()


def test_an_apply_that_finished_before_the_interrupt_is_applied() -> None:
    s = workspace_state()
    running(s, "run-1")
    apply(s, "run.result", {"id": "run-1", "phase": "plan", "ok": True, "has_changes": True})
    apply(s, "run.action", {"id": "run-1", "action": "apply"})
    apply(s, "run.job", {"id": "run-1", "phase": "apply", "job_id": "k", "ticket_digest": "u"})
    apply(s, "run.redeem", {"id": "run-1", "phase": "apply", "digest": "u"})
    apply(s, "run.action", {"id": "run-1", "action": "cancel"})
    apply(s, "run.result", {"id": "run-1", "phase": "apply", "ok": True})
    assert s.runs["run-1"].status == "applied"


def test_force_cancel_ends_a_running_run_at_once() -> None:
    s = workspace_state()
    running(s, "run-1")
    apply(s, "run.action", {"id": "run-1", "action": "cancel"})
    apply(s, "run.action", {"id": "run-1", "action": "force-cancel"})
    r = s.runs["run-1"]
    assert r.status == "canceled" and "force-canceled-at" in r.status_timestamps
    assert not s.workspaces["ws-1"].locked
    with pytest.raises(ApplyError):
        apply(s, "run.result", {"id": "run-1", "phase": "plan", "ok": False})


def test_runs_need_remote_execution_and_an_uploaded_configuration() -> None:
    s = workspace_state()
    apply(s, "cv.create", {"id": "cv-2", "workspace_id": "ws-1", "upload_digest": "d"})
    with pytest.raises(ApplyError, match="pending, not uploaded"):
        apply(s, "run.create", {"id": "run-1", "workspace_id": "ws-1", "cv_id": "cv-2"})
    apply(s, "ws.update", {"id": "ws-1", "changes": {"execution_mode": "local"}})
    with pytest.raises(ApplyError, match="local"):
        apply(s, "run.create", {"id": "run-1", "workspace_id": "ws-1", "cv_id": "cv-1"})


# --- the job ---


def test_job_spec_names_the_run_and_holds_no_secret() -> None:
    spec = run_job.job_spec(
        "run-abc", "apply", api_url="https://x:1", ticket="T", terraform="/t", datacenter="dc1"
    )["Job"]
    assert spec["ID"] == "trellis-run-abc-apply" and spec["Type"] == "batch"
    tg = spec["TaskGroups"][0]
    assert tg["RestartPolicy"]["Attempts"] == 0 and tg["ReschedulePolicy"]["Attempts"] == 0
    assert tg["Tasks"][0]["KillSignal"] == "SIGINT"  # Ctrl-C: terraform stops gracefully
    env = tg["Tasks"][0]["Env"]
    assert env["TRELLIS_RUN_TICKET"] == "T"
    assert not any("TOKEN" in k for k in env)


def test_job_ships_the_runner_so_the_task_user_needs_no_repo() -> None:
    task = run_job.job_spec(
        "run-abc", "plan", api_url="https://x:1", ticket="T", terraform="/t", datacenter="dc1"
    )["Job"]["TaskGroups"][0]["Tasks"][0]
    config = task["Config"]
    assert world_executable(config["command"]) or config["command"] == sys.executable
    assert config["args"][0] == "-c" and "def main()" in config["args"][1]
    assert "PYTHONPATH" not in task["Env"]
    # The client's ${...} interpolation leaves the script as it is.
    env = {"NOMAD_TASK_DIR": "/x", "TRELLIS_RUN_ID": "run-abc"}
    assert interpolate(config, env, {}) == config
    # The script needs nothing of this repo: it runs on its own, with the standard library.
    imports = re.findall(r"^\s*(?:from|import) (\S+)", config["args"][1], re.MULTILINE)
    assert not [m for m in imports if m.split(".")[0] not in sys.stdlib_module_names], imports


def test_verdict_on_a_job_that_ended_without_a_report() -> None:
    assert run_job.verdict([], "plan") is None
    assert run_job.verdict([{"ClientStatus": "running"}], "plan") is None
    lost = run_job.verdict([{"ClientStatus": "lost", "NodeName": "n1"}], "apply")
    assert lost == "the client node n1 running the apply was lost; the apply did not finish"
    failed = {
        "ClientStatus": "failed",
        "NodeName": "n1",
        "TaskStates": {"terraform": {"Events": [{"Type": "Terminated", "ExitCode": 137}]}},
    }
    msg = run_job.verdict([failed], "apply")
    assert msg is not None and "died" in msg and "exit code 137" in msg
    assert "without reporting" in (run_job.verdict([{"ClientStatus": "complete"}], "plan") or "")


# --- the runner's helpers ---


def test_tfvars_values_and_cli_config() -> None:
    assert hcl_value('a"b${x}', False) == '"a\\"b$${x}"'
    assert hcl_value("[1, 2]", True) == "[1, 2]"
    cfg = cli_config("https://127.0.0.1:8443", "tok")
    assert 'credentials "127.0.0.1:8443"' in cfg and 'credentials "localhost:8443"' in cfg


def test_terraform_is_found_next_to_python_or_on_a_plain_path(tmp_path: Any) -> None:
    assert find_terraform("sh") == "/usr/bin/sh" or find_terraform("sh") == "/bin/sh"
    assert find_terraform("no-such-terraform") is None
    exe = tmp_path / "tf"
    exe.write_text("#!/bin/sh\n")
    assert find_terraform(str(exe)) is None  # not executable
    exe.chmod(0o755)
    assert find_terraform(str(exe)) == str(exe)


def _tgz(name: str, kind: bytes = tarfile.REGTYPE) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.type = kind
        if kind == tarfile.SYMTYPE:
            info.linkname = "/etc/passwd"
        tar.addfile(info, io.BytesIO(b""))
    return buf.getvalue()


def test_configuration_archives_are_checked() -> None:
    assert check_archive(_tgz("main.tf")) is None
    assert "not a .tar.gz" in (check_archive(b"junk") or "")
    assert "unsafe path" in (check_archive(_tgz("../x.tf")) or "")
    assert "unsafe path" in (check_archive(_tgz("/abs.tf")) or "")
    assert "only files" in (check_archive(_tgz("link", tarfile.SYMTYPE)) or "")


def test_archives_that_unpack_too_large_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.workspace.handlers import runs

    monkeypatch.setattr(runs, "MAX_UNPACKED", 1000)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(2):
            info = tarfile.TarInfo(f"f{i}.tf")
            info.size = 600
            tar.addfile(info, io.BytesIO(b"#" * 600))
    assert "unpacks to more than" in (runs.check_archive(buf.getvalue()) or "")


def _archive(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


def _file(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


@pytest.mark.parametrize("filters", [True, False])
def test_extract_with_and_without_extraction_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filters: bool
) -> None:
    # The task's Python may predate tarfile's filters (3.11.4): the same archives, same verdict.
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    extract(_archive(_file("main.tf", b"# ok\n", 0o4777)), tmp_path / "ok")
    made = tmp_path / "ok" / "main.tf"
    assert made.read_bytes() == b"# ok\n"
    assert not made.stat().st_mode & (stat.S_ISUID | stat.S_IWOTH)
    link = tarfile.TarInfo("evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    for bad in (_archive(_file("../x.tf", b"x")), _archive((link, b""))):
        with pytest.raises((RunnerError, tarfile.TarError)):
            extract(bad, tmp_path / "bad")
        assert not (tmp_path / "x.tf").exists()

"""Remote runs over the API: configuration versions (create, upload, show, list, download),
runs (create, show, list, actions), plans and applies (show, logs), the organization's run
queue and capacity, and the three calls the runner task makes (redeem its ticket, stream its
log, report its result). The executor (executor.py) moves runs between jobs."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import secrets
import tarfile
import time
from typing import Any

from services.workspace import render_runs
from services.workspace import run_machine as rm
from services.workspace.capability import UPLOAD_PARAM, new_capability, require_upload
from services.workspace.context import Req
from services.workspace.handlers.accounts import digest
from services.workspace.jsonapi import (
    ApiError,
    Attrs,
    data_object,
    decode_body,
    not_found,
    present,
    relationship_ids,
    respond,
)
from services.workspace.model import Workspace
from services.workspace.render import API
from services.workspace.runs_model import ConfigurationVersion, Run
from services.workspace.sealing import STATE_KEY, VARIABLES_KEY, seal, unseal
from services.workspace.validate import new_id
from shared.messages import HttpResponse

MAX_CONFIG = 10 * 1024 * 1024  # a configuration's .tar.gz (HCP Terraform's limit is larger)
MAX_UNPACKED = 100 * 1024 * 1024
MAX_MEMBERS = 20_000
MAX_LOG_CHUNK = 256 * 1024
MAX_PLAN_FILE = 10 * 1024 * 1024  # a saved plan travels like a configuration
RUN_TOKEN_TTL = 2 * 3600.0


def public_base(r: Req) -> str:
    """The address clients reach this API at: log-read-url must be absolute."""
    return str(r.extra.get("public_url", "")).rstrip("/")


def _config_blob(cv_id: str) -> str:
    return f"{cv_id}.tar.gz"


def _config_aad(cv_id: str) -> str:
    return f"config:{cv_id}"


def plan_file_blob(run_id: str) -> str:
    return f"{run_id}.tfplan"


def _plan_file_aad(run_id: str) -> str:
    return f"planfile:{run_id}"


async def log_capability(r: Req, phase_id: str) -> str:
    """The credential in a log-read-url's path (go-tfe rewrites its query and sends no token):
    an HMAC of the phase id under a key derived from the state data key."""
    key = await r.key_store.get(STATE_KEY)
    sub = hmac.new(key, b"trellis run log urls", hashlib.sha256).digest()
    return hmac.new(sub, phase_id.encode(), hashlib.sha256).hexdigest()


async def _log_url(r: Req, phase_id: str, kind: str) -> str:
    return f"{public_base(r)}{API}/{kind}/{phase_id}/logs/{await log_capability(r, phase_id)}"


# --- configuration versions ---


def _scoped(r: Req, ws_id: str, need: str, what: str) -> tuple[Workspace, frozenset[str]]:
    """The workspace of a `what` the caller asks for, with `need`; a run's token sees only its
    own workspace. Anything else is a 404 for the `what`."""
    try:
        ws, caps = r.workspace(ws_id, need)
    except ApiError:
        raise not_found(what) from None
    if r.who.kind == "run" and r.who.workspace_id != ws.id:
        raise not_found(what)
    return ws, caps


def _cv(r: Req, cv_id: str, need: str = "read-runs") -> tuple[ConfigurationVersion, Workspace]:
    cv = r.state.cvs.get(cv_id)
    if cv is None:
        raise not_found("configuration version")
    ws, _ = _scoped(r, cv.workspace_id, need, "configuration version")
    return cv, ws


async def cv_create(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "queue-plan")
    data = data_object(
        r.http.body or b'{"data":{"type":"configuration-versions"}}', "configuration-versions"
    )
    a = Attrs(data["attributes"])
    auto = a.bool("auto-queue-runs")
    spec = a.bool("speculative")
    capability, upload_digest = new_capability()
    cv_id = new_id("cv")
    await r.write(
        "cv.create",
        {
            "id": cv_id,
            "workspace_id": ws.id,
            "auto_queue_runs": auto if present(auto) else True,
            "speculative": spec if present(spec) else False,
            "upload_digest": upload_digest,
        },
    )
    url = f"{public_base(r)}{API}/configuration-versions/{cv_id}/upload?{UPLOAD_PARAM}={capability}"
    return respond(
        201, {"data": render_runs.configuration_version(r.state.cvs[cv_id], upload_url=url)}
    )


def check_archive(raw: bytes) -> str | None:
    """Why a configuration archive is unusable, or None: a .tar.gz of regular files and
    directories with relative paths that stay inside, of a bounded unpacked size (a small
    upload must not unpack into gigabytes)."""
    total = count = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
            for m in tar:
                name = m.name
                if name.startswith("/") or ".." in name.split("/"):
                    return f"unsafe path in the archive: {name!r}"
                if not (m.isfile() or m.isdir()):
                    return f"only files and directories are accepted: {name!r}"
                total += m.size
                count += 1
                if total > MAX_UNPACKED or count > MAX_MEMBERS:
                    return "the configuration unpacks to more than 100 MiB or 20,000 files"
    except (tarfile.TarError, OSError, EOFError):
        return "the upload is not a .tar.gz archive"
    return None


async def cv_upload(r: Req) -> HttpResponse:
    await r.log.barrier()  # a public route: the service did not wait for the log
    cv = require_upload(r.query, r.state.cvs.get(r.params["id"]))
    raw = r.http.body
    problem = "the configuration is larger than 10 MiB" if len(raw) > MAX_CONFIG else None
    problem = problem or check_archive(raw)
    if problem is None:
        key = await r.key_store.get(STATE_KEY)
        await r.blob_store.put(_config_blob(cv.id), seal(key, raw, _config_aad(cv.id)))
    await r.write("cv.upload", {"id": cv.id, "size": len(raw), "error": problem or ""})
    if problem:
        raise ApiError(422, problem)
    ws = r.state.workspaces.get(cv.workspace_id)
    if cv.auto_queue_runs and ws is not None and ws.execution_mode != "local":
        # HCP Terraform's default: the upload queues a run (the CLI asks for none).
        await r.write(
            "run.create",
            {
                "id": new_id("run"),
                "workspace_id": ws.id,
                "cv_id": cv.id,
                "message": "Queued by a configuration version upload",
                "by": [],
            },
        )
    return respond(200)


async def cv_show(r: Req) -> HttpResponse:
    cv, _ = _cv(r, r.params["id"])
    return respond(200, {"data": render_runs.configuration_version(cv)})


async def cv_list(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"])
    items = [r.state.cvs[i] for i in reversed(r.state.cvs_by_ws.get(ws.id, []))]
    return respond(200, r.list_doc(items, render_runs.configuration_version))


async def cv_download(r: Req) -> HttpResponse:
    cv, _ = _cv(r, r.params["id"], "read-vars")
    if cv.status != "uploaded":
        raise not_found("configuration")
    raw = await r.open_blob(_config_blob(cv.id), _config_aad(cv.id), "configuration")
    return HttpResponse(status=200, headers={"content-type": "application/octet-stream"}, body=raw)


# --- runs ---


def _run(r: Req, run_id: str, need: str = "read-runs") -> tuple[Run, frozenset[str]]:
    run = r.state.runs.get(run_id)
    if run is None:
        raise not_found("run")
    _, caps = _scoped(r, run.workspace_id, need, "run")
    return run, caps


def queue_position(r: Req, run: Run) -> int:
    if run.status != "pending" or run.plan_only:
        return 0
    queued = rm.queue_order([r.state.runs[i] for i in r.state.runs_by_ws.get(run.workspace_id, [])])
    return next((i + 1 for i, x in enumerate(queued) if x.id == run.id), 0)


async def run_create(r: Req) -> HttpResponse:
    data = data_object(r.http.body, "runs")
    a = Attrs(data["attributes"])
    rels = data["relationships"]
    ws_id = relationship_ids(rels, "workspace", "workspaces", many=False)
    if not isinstance(ws_id, str):
        raise ApiError(422, "relationships.workspace is required", "/data/relationships/workspace")
    ws, caps = r.workspace(ws_id, "queue-plan")
    flags: dict[str, bool] = {}
    for attr, field in (
        ("is-destroy", "is_destroy"),
        ("plan-only", "plan_only"),
        ("auto-apply", "auto_apply"),
    ):
        v = a.bool(attr)
        if present(v):
            flags[field] = v
    if flags.get("is_destroy") and "queue-destroy" not in caps:
        raise ApiError(404, "workspace not found")
    if flags.get("auto_apply") and "queue-apply" not in caps:
        # Plan access queues plans; applying without a confirmation needs apply access.
        raise ApiError(404, "workspace not found")
    message = a.str("message", nullable=True)
    if present(message) and message and len(message) > 10_000:
        raise ApiError(422, "message is limited to 10,000 characters", a.pointer("message"))
    cv_id = relationship_ids(rels, "configuration-version", "configuration-versions", many=False)
    if not isinstance(cv_id, str):
        # No configuration named: the workspace's newest uploaded one, as HCP Terraform does.
        ids = [
            i
            for i in reversed(r.state.cvs_by_ws.get(ws.id, []))
            if r.state.cvs[i].status == "uploaded"
        ]
        if not ids:
            raise ApiError(422, "the workspace has no uploaded configuration version")
        cv_id = ids[0]
    run_id = new_id("run")
    await r.write(
        "run.create",
        {
            "id": run_id,
            "workspace_id": ws.id,
            "cv_id": cv_id,
            "message": message if present(message) and message else "Queued manually via the API",
            "by": list(r.who.lock_holder),
            **flags,
        },
    )
    run = r.state.runs[run_id]
    return respond(201, {"data": render_runs.run(run, caps, queue_position(r, run))})


async def run_show(r: Req) -> HttpResponse:
    run, caps = _run(r, r.params["id"])
    return respond(200, {"data": render_runs.run(run, caps, queue_position(r, run))})


async def run_list(r: Req) -> HttpResponse:
    ws, caps = r.workspace(r.params["id"])
    items = [r.state.runs[i] for i in reversed(r.state.runs_by_ws.get(ws.id, []))]
    return respond(200, r.list_doc(items, lambda x: render_runs.run(x, caps, queue_position(r, x))))


ACTIONS = {
    "apply": "queue-apply",
    "discard": "queue-apply",
    "cancel": "queue-apply",
    "force-cancel": "queue-apply",
}


async def run_action(r: Req) -> HttpResponse:
    action = r.params["action"]
    if action not in ACTIONS:
        raise ApiError(404, f"unknown run action {action!r}; valid: {', '.join(ACTIONS)}")
    run, caps = _run(r, r.params["id"])
    if ACTIONS[action] not in caps:
        raise not_found("run")
    comment = ""
    if r.http.body.strip() and r.http.body.strip() != b"null":
        doc = decode_body(r.http.body)
        if not isinstance(doc, dict):
            raise ApiError(422, "the body must be an object with an optional comment")
        c = doc.get("comment")
        if c is not None and not isinstance(c, str):
            raise ApiError(422, "comment must be a string", "/comment")
        comment = c or ""
    await r.write("run.action", {"id": run.id, "action": action, "comment": comment})
    return respond(202)


# --- plans and applies ---


def _phase_run(r: Req, phase_id: str, kind: str) -> tuple[Run, str]:
    found = render_runs.run_of_phase(phase_id)
    if found is None or found[1] != kind:
        raise not_found(kind)
    run, _ = _run(r, found[0])
    return run, found[1]


async def plan_show(r: Req) -> HttpResponse:
    run, _ = _phase_run(r, r.params["id"], "plan")
    url = await _log_url(r, render_runs.plan_id(run.id), "plans")
    return respond(200, {"data": render_runs.plan(run, url)})


async def apply_show(r: Req) -> HttpResponse:
    run, _ = _phase_run(r, r.params["id"], "apply")
    url = await _log_url(r, render_runs.apply_id(run.id), "applies")
    return respond(200, {"data": render_runs.apply(run, url)})


def _int_param(r: Req, name: str, default: int) -> int:
    raw = r.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer") from None
    if v < 0:
        raise ApiError(400, f"{name} must not be negative")
    return v


async def logs(r: Req) -> HttpResponse:
    """A phase's log from `offset`, at most `limit` bytes: STX, the text, and ETX once the
    phase is over, so go-tfe's LogReader knows when to stop polling."""
    await r.log.barrier()  # a public route
    found = render_runs.run_of_phase(r.params["id"])
    run = r.state.runs.get(found[0]) if found else None
    given = r.params["cap"]
    if found is None or run is None:
        raise not_found("log")
    want = await log_capability(r, r.params["id"])
    if not hmac.compare_digest(given.encode(), want.encode()):
        raise not_found("log")
    phase = run.plan if found[1] == "plan" else run.apply
    text = b"\x02" + phase.log + (b"\x03" if phase.status in rm.PHASE_FINAL else b"")
    offset = _int_param(r, "offset", 0)
    limit = _int_param(r, "limit", len(text))
    body = text[offset : offset + limit]
    return HttpResponse(status=200, headers={"content-type": "text/plain"}, body=body)


# --- the organization's queue (the remote backend shows its position while it waits) ---


async def org_queue(r: Req) -> HttpResponse:
    org, _ = r.org(r.params["org"])
    items: list[dict[str, Any]] = []
    for ws in r.state.org_workspaces(org.id):
        caps = r.ws_caps(ws)
        if "read-runs" not in caps:
            continue
        for rid in r.state.runs_by_ws.get(ws.id, []):
            run = r.state.runs[rid]
            if run.status in ("pending", "plan_queued", "apply_queued"):
                items.append(render_runs.run(run, caps, queue_position(r, run)))
    return respond(200, r.list_doc(items, lambda d: d))


async def org_capacity(r: Req) -> HttpResponse:
    org, _ = r.org(r.params["org"])
    pending = running = 0
    for ws in r.state.org_workspaces(org.id):
        for rid in r.state.runs_by_ws.get(ws.id, []):
            st = r.state.runs[rid].status
            pending += st in ("pending", "plan_queued", "apply_queued")
            running += st in ("planning", "applying")
    return respond(
        200,
        {
            "data": {
                "id": org.name,
                "type": "organization-capacity",
                "attributes": {"pending": pending, "running": running},
            }
        },
    )


# --- the runner task's calls ---


def _json_obj(r: Req) -> dict[str, Any]:
    doc = decode_body(r.http.body)
    if not isinstance(doc, dict):
        raise ApiError(422, "the body must be a JSON object")
    return doc


def _phase_name(doc: dict[str, Any]) -> str:
    phase = doc.get("phase")
    if phase not in ("plan", "apply"):
        raise ApiError(422, "phase must be plan or apply", "/phase")
    return phase


async def _variables(r: Req, ws: Workspace) -> list[dict[str, Any]]:
    """The run's variables with their values: variable sets, then the workspace's own (which
    win), then priority variable sets (which win over everything)."""
    sets = r.state.varsets_for(ws)
    layers = [
        [v for s in sets if not s.priority for v in r.state.vars_by_set.get(s.id, [])],
        list(r.state.vars_by_ws.get(ws.id, [])),
        [v for s in sets if s.priority for v in r.state.vars_by_set.get(s.id, [])],
    ]
    key = await r.key_store.get(VARIABLES_KEY)
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for layer in layers:
        for vid in layer:
            v = r.state.variables.get(vid)
            if v is None:
                continue
            try:
                value = (
                    unseal(key, v.sealed_value, f"var:{v.id}").decode() if v.sealed_value else ""
                )
            except (ValueError, UnicodeDecodeError):
                raise ApiError(500, "a stored variable does not authenticate") from None
            merged[(v.category, v.key)] = {
                "key": v.key,
                "value": value,
                "category": v.category,
                "hcl": v.hcl,
                "sensitive": v.sensitive,
            }
    return list(merged.values())


async def runner_redeem(r: Req) -> HttpResponse:
    """The task trades its one-time ticket for a run token scoped to the workspace and the
    variables. A ticket works once: a copy read from the job spec later is worthless."""
    await r.log.barrier()  # a public route
    doc = _json_obj(r)
    which = _phase_name(doc)
    ticket = doc.get("ticket")
    run = r.state.runs.get(r.params["id"])
    if run is None or not isinstance(ticket, str) or not ticket:
        raise not_found("ticket")
    phase = rm.phase_of(run, which)
    given = hashlib.sha256(ticket.encode()).hexdigest()
    if not phase.ticket_digest or not hmac.compare_digest(
        given.encode(), phase.ticket_digest.encode()
    ):
        raise not_found("ticket")
    ws = r.state.workspaces[run.workspace_id]
    org = r.state.orgs[ws.org_id]
    await r.write("run.redeem", {"id": run.id, "phase": which, "digest": given})
    token = secrets.token_urlsafe(32) + ".runtoken"
    exp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + RUN_TOKEN_TTL))
    await r.write(
        "token.create",
        {
            "id": new_id("at"),
            "kind": "run",
            "owner_id": ws.id,
            "digest": digest(token),
            "description": run.id,
            "expired_at": exp,
        },
    )
    body = {
        "token": token,
        "run_id": run.id,
        "organization": org.name,
        "workspace": ws.name,
        "workspace_id": ws.id,
        "configuration_version_id": run.cv_id,
        "is_destroy": run.is_destroy,
        "plan_only": run.plan_only,
        "variables": await _variables(r, ws),
    }
    return HttpResponse(
        status=200, headers={"content-type": "application/json"}, body=json.dumps(body).encode()
    )


def _own_run(r: Req) -> Run:
    run = r.state.runs.get(r.params["id"])
    if run is None or r.who.kind != "run" or r.who.run_id != run.id:
        raise not_found("run")
    return run


async def runner_log(r: Req) -> HttpResponse:
    run = _own_run(r)
    which = r.query.get("phase", "")
    if which not in ("plan", "apply"):
        raise ApiError(422, "phase must be plan or apply")
    data = r.http.body
    if len(data) > MAX_LOG_CHUNK:
        raise ApiError(413, "a log chunk is limited to 256 KiB")
    if data:
        await r.write("run.log", {"id": run.id, "phase": which, "data": data})
    return respond(204)


async def runner_plan_put(r: Req) -> HttpResponse:
    """The plan task saves its plan file: the apply applies exactly what was planned and
    confirmed, never a new plan (variables or state may have changed in between). The file
    holds variable values in clear, so it is sealed like states."""
    run = _own_run(r)
    if run.plan_only or run.plan.status != "running":
        raise ApiError(409, f"the plan is {run.plan.status}; no plan file is due")
    raw = r.http.body
    if not raw or len(raw) > MAX_PLAN_FILE:
        raise ApiError(413, "a plan file must be 1 byte to 10 MiB")
    key = await r.key_store.get(STATE_KEY)
    await r.blob_store.put(plan_file_blob(run.id), seal(key, raw, _plan_file_aad(run.id)))
    return respond(204)


async def runner_plan_get(r: Req) -> HttpResponse:
    """The apply task reads the plan file its run's plan saved."""
    run = _own_run(r)
    if run.apply.status != "running":
        raise not_found("plan file")
    raw = await r.open_blob(plan_file_blob(run.id), _plan_file_aad(run.id), "plan file")
    return HttpResponse(status=200, headers={"content-type": "application/octet-stream"}, body=raw)


async def runner_result(r: Req) -> HttpResponse:
    run = _own_run(r)
    doc = _json_obj(r)
    which = _phase_name(doc)
    ok = doc.get("ok")
    if not isinstance(ok, bool):
        raise ApiError(422, "ok must be a boolean", "/ok")
    counts = doc.get("counts", [0, 0, 0])
    if not (
        isinstance(counts, list)
        and len(counts) == 3
        and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
    ):
        raise ApiError(422, "counts must be three non-negative integers", "/counts")
    message = doc.get("message", "")
    if not isinstance(message, str):
        raise ApiError(422, "message must be a string", "/message")
    has_changes = doc.get("has_changes", False)
    sv_id = doc.get("state_version_id")
    if sv_id is not None and not (isinstance(sv_id, str) and sv_id in r.state.state_versions):
        raise ApiError(422, "state_version_id names no state version", "/state_version_id")
    status = await r.write(
        "run.result",
        {
            "id": run.id,
            "phase": which,
            "ok": ok,
            "message": message[:2000],
            "has_changes": has_changes is True,
            "add": counts[0],
            "change": counts[1],
            "destroy": counts[2],
            "state_version_id": sv_id,
        },
    )
    return HttpResponse(
        status=200,
        headers={"content-type": "application/json"},
        body=json.dumps({"status": status}).encode(),
    )

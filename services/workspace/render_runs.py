"""Configuration versions, runs, plans and applies as JSON:API resources. URLs that clients
fetch without the API client (log-read-url) are absolute: go-tfe reads them with a bare HTTP
client."""

from __future__ import annotations

from typing import Any

from services.workspace import run_machine as rm
from services.workspace.jsonapi import iso
from services.workspace.render import API, ref
from services.workspace.runs_model import ConfigurationVersion, Phase, Run


def plan_id(run_id: str) -> str:
    return "plan-" + run_id.removeprefix("run-")


def apply_id(run_id: str) -> str:
    return "apply-" + run_id.removeprefix("run-")


def run_of_phase(phase_id: str) -> tuple[str, str] | None:
    """(run id, "plan" | "apply") of a plan or apply id."""
    for prefix, which in (("plan-", "plan"), ("apply-", "apply")):
        if phase_id.startswith(prefix):
            return "run-" + phase_id[len(prefix) :], which
    return None


def _stamps(stamps: dict[str, float]) -> dict[str, str | None]:
    return {k: iso(v) for k, v in stamps.items()}


def configuration_version(
    cv: ConfigurationVersion, upload_url: str | None = None
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "auto-queue-runs": cv.auto_queue_runs,
        "changed-files": [],
        "error": "upload failed" if cv.status == "errored" else None,
        "error-message": cv.error_message or None,
        "provisional": False,
        "source": cv.source,
        "speculative": cv.speculative,
        "status": cv.status,
        "status-timestamps": _stamps(cv.status_timestamps),
    }
    if upload_url is not None:
        attrs["upload-url"] = upload_url
    return {
        "id": cv.id,
        "type": "configuration-versions",
        "attributes": attrs,
        "relationships": {"ingress-attributes": {"data": None}},
        "links": {
            "self": f"{API}/configuration-versions/{cv.id}",
            "download": f"{API}/configuration-versions/{cv.id}/download",
        },
    }


def run(r: Run, caps: frozenset[str], position: int | None = None) -> dict[str, Any]:
    acts = rm.actions(r)
    can_apply = "queue-apply" in caps
    return {
        "id": r.id,
        "type": "runs",
        "attributes": {
            "actions": acts,
            "allow-config-generation": False,
            "allow-empty-apply": False,
            "auto-apply": r.auto_apply,
            "canceled-at": iso(r.status_timestamps.get("canceled-at")),
            "created-at": iso(r.created_at),
            "error-message": r.error_message or None,
            "has-changes": r.has_changes,
            "is-destroy": r.is_destroy,
            "message": r.message,
            "plan-only": r.plan_only,
            "position-in-queue": position or 0,
            "refresh": True,
            "refresh-only": False,
            "replace-addrs": [],
            "save-plan": False,
            "source": r.source,
            "status": r.status,
            "status-timestamps": _stamps(r.status_timestamps),
            "target-addrs": None,
            "terraform-version": "",
            "trigger-reason": "manual",
            "variables": [],
            "permissions": {
                "can-apply": can_apply,
                "can-cancel": can_apply,
                "can-comment": "queue-plan" in caps,
                "can-discard": can_apply,
                "can-force-execute": can_apply,
                "can-force-cancel": can_apply,
                "can-override-policy-check": False,
            },
        },
        "relationships": {
            "workspace": ref("workspaces", r.workspace_id),
            "configuration-version": ref("configuration-versions", r.cv_id),
            "plan": ref("plans", plan_id(r.id)),
            "apply": ref("applies", apply_id(r.id)),
            # go-tfe decodes created-by as a user only (teams and org tokens: none).
            "created-by": ref("users", r.created_by[1])
            if r.created_by and r.created_by[0] == "users"
            else {"data": None},
            "cost-estimate": {"data": None},
            "policy-checks": {"data": []},
            "run-events": {"data": []},
            "task-stages": {"data": []},
            "comments": {"data": []},
        },
        "links": {"self": f"{API}/runs/{r.id}"},
    }


def _phase(
    kind: str, pid: str, r: Run, p: Phase, log_url: str, extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": pid,
        "type": kind,
        "attributes": {
            "log-read-url": log_url,
            "resource-additions": p.additions,
            "resource-changes": p.changes,
            "resource-destructions": p.destructions,
            "resource-imports": 0,
            "status": p.status,
            "status-timestamps": _stamps(p.status_timestamps),
            **extra,
        },
        "relationships": {"run": ref("runs", r.id)},
        "links": {"self": f"{API}/{kind}/{pid}"},
    }


def plan(r: Run, log_url: str) -> dict[str, Any]:
    extra = {"has-changes": r.has_changes, "execution-details": {"mode": "remote"}}
    return _phase("plans", plan_id(r.id), r, r.plan, log_url, extra)


def apply(r: Run, log_url: str) -> dict[str, Any]:
    extra = {"execution-details": {"mode": "remote"}}
    return _phase("applies", apply_id(r.id), r, r.apply, log_url, extra)

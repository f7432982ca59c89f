"""Resources as JSON:API resource objects: one function per type, reading the state."""

from __future__ import annotations

from typing import Any

from services.workspace.jsonapi import iso
from services.workspace.model import (
    CUSTOM_ACCESS,
    Organization,
    Policy,
    PolicySet,
    PolicySetVersion,
    Project,
    Tag,
    Team,
    TeamAccess,
    Token,
    User,
    VcsInstallation,
    VcsRepo,
    Workspace,
)
from services.workspace.permissions import OrgAccess, permissions_object
from services.workspace.state import WorkspaceState

API = "/api/v2"


def ref(type_: str, id_: str | None) -> dict[str, Any]:
    return {"data": {"id": id_, "type": type_} if id_ else None}


def refs(type_: str, ids: list[str]) -> dict[str, Any]:
    return {"data": [{"id": i, "type": type_} for i in ids]}


def _ws_vcs(repo: VcsRepo | None, ws_id: str) -> dict[str, Any] | None:
    if repo is None:
        return None
    return {
        "branch": repo.branch,
        "display-identifier": repo.identifier,
        "identifier": repo.identifier,
        "ingress-submodules": repo.ingress_submodules,
        "oauth-token-id": repo.oauth_token_id,
        "repository-http-url": f"https://github.com/{repo.identifier}",
        "service-provider": "github",
        "webhook-url": f"{API}/webhooks/vcs/{ws_id}",
    }


def _current_state(state: WorkspaceState, ws: Workspace) -> dict[str, Any]:
    sv_id = ws.current_state_version_id
    if sv_id is None:
        return {"data": None}
    return {
        "data": {"id": sv_id, "type": "state-versions"},
        "links": {"related": f"{API}/workspaces/{ws.id}/current-state-version"},
    }


def _current_outputs(state: WorkspaceState, ws: Workspace, caps: frozenset[str]) -> dict[str, Any]:
    sv = state.state_versions.get(ws.current_state_version_id or "")
    if sv is None or "read-state-outputs" not in caps:
        return {"data": []}
    return {"data": [{"id": o.id, "type": "workspace-outputs"} for o in sv.outputs]}


def _resource_count(state: WorkspaceState, ws: Workspace) -> int:
    sv = state.state_versions.get(ws.current_state_version_id or "")
    return sv.resource_count if sv else 0


def workspace(state: WorkspaceState, ws: Workspace, caps: frozenset[str]) -> dict[str, Any]:
    org = state.orgs[ws.org_id]
    tag_names = [state.tags[t].name for t in ws.tag_ids if t in state.tags]
    attrs = {
        "actions": {"is-destroyable": "admin" in caps},
        "allow-destroy-plan": ws.allow_destroy_plan,
        "apply-duration-average": None,
        "auto-apply": ws.auto_apply,
        "auto-destroy-at": ws.auto_destroy_at,
        "created-at": iso(ws.created_at),
        "description": ws.description,
        "environment": "default",
        "execution-mode": ws.execution_mode,
        "file-triggers-enabled": ws.file_triggers_enabled,
        "global-remote-state": ws.global_remote_state,
        "latest-change-at": iso(ws.latest_change_at),
        "locked": ws.locked,
        "locked-reason": ws.lock_reason,
        "name": ws.name,
        "operations": ws.execution_mode != "local",
        "permissions": permissions_object(caps),
        "plan-duration-average": None,
        "policy-check-failures": None,
        "queue-all-runs": ws.queue_all_runs,
        "resource-count": _resource_count(state, ws),
        "run-failures": None,
        "source": ws.source,
        "source-name": ws.source_name,
        "source-url": ws.source_url,
        "speculative-enabled": ws.speculative_enabled,
        "structured-run-output-enabled": ws.structured_run_output_enabled,
        "tag-names": tag_names,
        # The seed says tool-version; every real client reads terraform-version.
        "tool-version": ws.tool_version,
        "terraform-version": ws.tool_version,
        "trigger-prefixes": list(ws.trigger_prefixes),
        "trigger-patterns": [],
        "updated-at": iso(ws.updated_at),
        "vcs-repo": _ws_vcs(ws.vcs_repo, ws.id),
        "vcs-repo-identifier": ws.vcs_repo.identifier if ws.vcs_repo else None,
        "working-directory": ws.working_directory,
        "workspace-kpis-runs-count": None,
    }
    rels = {
        "agent-pool": ref("agent-pools", ws.agent_pool_id),
        "current-configuration-version": ref(
            "configuration-versions", next(iter(reversed(state.cvs_by_ws.get(ws.id, []))), None)
        ),
        "current-run": ref("runs", ws.current_run_id),
        "current-state-version": _current_state(state, ws),
        "latest-run": ref("runs", ws.latest_run_id),
        "locked-by": ref(ws.locked_by[0], ws.locked_by[1]) if ws.locked_by else {"data": None},
        "organization": ref("organizations", org.name),
        "outputs": _current_outputs(state, ws, caps),
        "project": ref("projects", ws.project_id),
        "readme": {"data": None},
        "remote-state-consumers": {
            "links": {"related": f"{API}/workspaces/{ws.id}/relationships/remote-state-consumers"}
        },
        "tags": {"links": {"related": f"{API}/workspaces/{ws.id}/relationships/tags"}},
    }
    return {
        "id": ws.id,
        "type": "workspaces",
        "attributes": attrs,
        "relationships": rels,
        "links": {
            "self": f"{API}/organizations/{org.name}/workspaces/{ws.name}",
            "self-html": f"/app/{org.name}/workspaces/{ws.name}",
        },
    }


def organization(state: WorkspaceState, org: Organization, acc: OrgAccess) -> dict[str, Any]:
    owner = acc.owner and not acc.org_token
    passing = org.send_passing_statuses_for_untriggered_speculative_plans
    return {
        "id": org.name,
        "type": "organizations",
        "attributes": {
            "name": org.name,
            "email": org.email,
            "external-id": org.id,
            "created-at": iso(org.created_at),
            "session-timeout": org.session_timeout,
            "session-remember": org.session_remember,
            "collaborator-auth-policy": org.collaborator_auth_policy,
            "cost-estimation-enabled": org.cost_estimation_enabled,
            "send-passing-statuses-for-untriggered-speculative-plans": passing,
            "allow-force-delete-workspaces": org.allow_force_delete_workspaces,
            "default-execution-mode": org.default_execution_mode,
            "assessments-enforced": org.assessments_enforced,
            "owners-team-saml-role-id": None,
            "saml-enabled": False,
            "two-factor-conformant": True,
            "plan-expired": False,
            "fair-run-queuing-enabled": True,
            "permissions": {
                "can-create-workspace": acc.can("manage-workspaces"),
                "can-update": owner,
                "can-destroy": owner,
                "can-create-team": acc.can("manage-teams"),
                "can-manage-users": acc.can("manage-membership"),
                "can-manage-subscription": owner,
                "can-update-oauth": acc.can("manage-vcs-settings"),
                "can-update-sentinel": acc.can("manage-policies"),
                "can-update-api-token": owner,
                "can-traverse": acc.member,
                "can-create-project": acc.can("manage-projects"),
                "can-manage-tags": acc.can("manage-workspaces"),
            },
        },
        "relationships": {
            "default-project": ref("projects", org.default_project_id),
            "entitlement-set": ref("entitlement-sets", org.id),
            "authentication-token": {
                "links": {"related": f"{API}/organizations/{org.name}/authentication-token"}
            },
        },
        "links": {"self": f"{API}/organizations/{org.name}"},
    }


ENTITLEMENTS = (
    "agents",
    "audit-logging",
    "configuration-designer",
    "cost-estimation",
    "global-run-tasks",
    "module-tests-generation",
    "operations",
    "private-module-registry",
    "policy-enforcement",
    "private-policy-agents",
    "run-tasks",
    "self-serve-billing",
    "sentinel",
    "sso",
    "state-storage",
    "teams",
    "vcs-integrations",
    "waypoint-actions",
)


def entitlement_set(org: Organization) -> dict[str, Any]:
    attrs: dict[str, Any] = {k: True for k in ENTITLEMENTS}
    attrs["run-task-limit"] = None
    attrs["policy-limit"] = None
    attrs["policy-set-limit"] = None
    return {
        "id": org.id,
        "type": "entitlement-sets",
        "attributes": attrs,
        "links": {"self": f"{API}/entitlement-sets/{org.id}"},
    }


def project(state: WorkspaceState, prj: Project) -> dict[str, Any]:
    org = state.orgs[prj.org_id]
    return {
        "id": prj.id,
        "type": "projects",
        "attributes": {
            "name": prj.name,
            "description": prj.description,
            "created-at": iso(prj.created_at),
            "workspace-count": sum(
                1 for w in state.org_workspaces(org.id) if w.project_id == prj.id
            ),
        },
        "relationships": {"organization": ref("organizations", org.name)},
        "links": {"self": f"{API}/projects/{prj.id}"},
    }


def tag(state: WorkspaceState, t: Tag) -> dict[str, Any]:
    return {
        "id": t.id,
        "type": "tags",
        "attributes": {
            "name": t.name,
            "created-at": iso(t.created_at),
            "instance-count": state.tag_count.get(t.id, 0),
        },
        "relationships": {"organization": ref("organizations", state.orgs[t.org_id].name)},
    }


def policy(state: WorkspaceState, p: Policy) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "name": p.name,
        "description": p.description,
        "kind": p.kind,
        "enforcement-level": p.enforcement_level,
        "enforce": [
            {
                "path": f"{p.name}.{'rego' if p.kind == 'opa' else 'sentinel'}",
                "mode": p.enforcement_level,
            }
        ],
        "policy-set-count": len(p.policy_set_ids),
        "created-at": iso(p.created_at),
        "updated-at": iso(p.updated_at),
    }
    if p.kind == "opa":
        attrs["query"] = p.query
    return {
        "id": p.id,
        "type": "policies",
        "attributes": attrs,
        "relationships": {
            "organization": ref("organizations", state.orgs[p.org_id].name),
            "policy-sets": refs("policy-sets", p.policy_set_ids),
        },
        "links": {
            "self": f"{API}/policies/{p.id}",
            "upload": f"{API}/policies/{p.id}/upload",
            "download": f"{API}/policies/{p.id}/download",
        },
    }


def policy_set(state: WorkspaceState, ps: PolicySet) -> dict[str, Any]:
    vcs = None
    if ps.vcs_repo is not None:
        vcs = {
            "branch": ps.vcs_repo.branch,
            "identifier": ps.vcs_repo.identifier,
            "ingress-submodules": ps.vcs_repo.ingress_submodules,
            "oauth-token-id": ps.vcs_repo.oauth_token_id,
            "vcs-app-installation-id": ps.vcs_repo.vcs_app_installation_id,
        }
    attrs = {
        "name": ps.name,
        "description": ps.description,
        "global": ps.is_global,
        "kind": ps.kind,
        "overridable": ps.overridable if ps.kind == "opa" else None,
        "agent-enabled": ps.agent_enabled,
        "policy-tool-version": ps.policy_tool_version,
        "workspace-count": len(ps.workspace_ids),
        "project-count": len(ps.project_ids),
        "policy-count": len(ps.policy_ids),
        "policies-path": ps.policies_path,
        "versioned": ps.vcs_repo is not None or bool(ps.version_ids),
        "vcs-repo": vcs,
        "created-at": iso(ps.created_at),
        "updated-at": iso(ps.updated_at),
    }
    rels: dict[str, Any] = {
        "organization": ref("organizations", state.orgs[ps.org_id].name),
        "policies": refs("policies", ps.policy_ids),
        "workspace-exclusions": {"data": []},
        "current-version": ref("policy-set-versions", ps.current_version_id),
        "newest-version": ref("policy-set-versions", ps.newest_version_id),
    }
    if not ps.is_global:
        rels["projects"] = refs("projects", ps.project_ids)
        rels["workspaces"] = refs("workspaces", ps.workspace_ids)
    return {
        "id": ps.id,
        "type": "policy-sets",
        "attributes": attrs,
        "relationships": rels,
        "links": {"self": f"{API}/policy-sets/{ps.id}"},
    }


def policy_set_version(v: PolicySetVersion) -> dict[str, Any]:
    links = {"self": f"{API}/policy-set-versions/{v.id}"}
    if v.status == "pending" and v.source == "tfe-api":
        links["upload"] = f"{API}/policy-set-versions/{v.id}/upload"
    return {
        "id": v.id,
        "type": "policy-set-versions",
        "attributes": {
            "source": v.source,
            "status": v.status,
            "status-timestamps": {k: iso(t) for k, t in v.status_timestamps.items()},
            "error": v.error,
            "ingress-attributes": v.ingress_attributes,
            "created-at": iso(v.created_at),
            "updated-at": iso(v.updated_at),
        },
        "relationships": {"policy-set": ref("policy-sets", v.policy_set_id)},
        "links": links,
    }


def team(state: WorkspaceState, t: Team, acc: OrgAccess) -> dict[str, Any]:
    org_access = {
        k: bool(t.organization_access.get(k))
        for k in (
            "manage-policies",
            "manage-policy-overrides",
            "manage-run-tasks",
            "manage-workspaces",
            "manage-vcs-settings",
            "manage-agent-pools",
            "manage-providers",
            "manage-modules",
            "manage-projects",
            "read-projects",
            "read-workspaces",
            "manage-membership",
            "manage-teams",
            "manage-organization-access",
        )
    }
    if t.name == "owners":
        org_access = dict.fromkeys(org_access, True)
    return {
        "id": t.id,
        "type": "teams",
        "attributes": {
            "name": t.name,
            "visibility": t.visibility,
            "sso-team-id": t.sso_team_id,
            "users-count": len(t.user_ids),
            "organization-access": org_access,
            "permissions": {
                "can-update-membership": acc.can("manage-membership"),
                "can-destroy": acc.can("manage-teams") and t.name != "owners",
                "can-update-organization-access": acc.can("manage-organization-access")
                and t.name != "owners",
                "can-update-api-token": acc.can("manage-teams"),
                "can-update-visibility": acc.can("manage-teams"),
            },
            "created-at": iso(t.created_at),
        },
        "relationships": {
            "organization": ref("organizations", state.orgs[t.org_id].name),
            "users": refs("users", list(t.user_ids)),
            "authentication-token": {"meta": {}},
        },
        "links": {"self": f"{API}/teams/{t.id}"},
    }


def team_access(a: TeamAccess) -> dict[str, Any]:
    custom = {k: a.custom.get(k, v[0]) for k, v in CUSTOM_ACCESS.items()}
    return {
        "id": a.id,
        "type": "team-workspaces",
        "attributes": {"access": a.access, **custom},
        "relationships": {
            "team": ref("teams", a.team_id),
            "workspace": ref("workspaces", a.workspace_id),
        },
        "links": {"self": f"{API}/team-workspaces/{a.id}"},
    }


def token(tok: Token, secret: str | None = None) -> dict[str, Any]:
    return {
        "id": tok.id,
        "type": "authentication-tokens",
        "attributes": {
            "created-at": iso(tok.created_at),
            "last-used-at": None,
            "description": tok.description,
            "token": secret,
            "expired-at": tok.expired_at,
        },
        "relationships": {"created-by": ref("users", tok.created_by)},
        "links": {"self": f"{API}/authentication-tokens/{tok.id}"},
    }


def user(u: User, *, site_admin: bool = False) -> dict[str, Any]:
    return {
        "id": u.id,
        "type": "users",
        "attributes": {
            "username": u.username,
            "email": u.email,
            "is-service-account": False,
            "is-site-admin": site_admin,
            "two-factor": {"enabled": False},
            "avatar-url": "",
            "v2-only": True,
            "permissions": {
                "can-create-organizations": True,
                "can-change-email": True,
                "can-change-username": True,
            },
        },
        "relationships": {
            "authentication-tokens": {
                "links": {"related": f"{API}/users/{u.id}/authentication-tokens"}
            }
        },
        "links": {"self": f"{API}/users/{u.id}"},
    }


def vcs_installation(v: VcsInstallation) -> dict[str, Any]:
    return {
        "id": v.id,
        "type": "vcs-app-installations",
        "attributes": {
            "name": v.name,
            "installation-id": v.installation_id,
            "icon-url": v.icon_url,
            "installation-type": v.installation_type,
            "installation-url": v.installation_url,
        },
        "links": {"self": f"{API}/github-app/installation/{v.id}"},
    }

"""The routing table of the workspace API: (method, path pattern, handler). Paths are relative
to /api/v2 unless they start with /.well-known; `{name}` matches one path segment."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from urllib.parse import unquote

from services.workspace import openapi
from services.workspace.context import Req
from services.workspace.handlers import (
    accounts,
    consumers,
    meta,
    orgs,
    policies,
    runs,
    state_versions,
    tags,
    teams,
    variables,
    varsets,
    workspaces,
)
from shared.messages import HttpResponse

Handler = Callable[[Req], Awaitable[HttpResponse]]

RSC = "/workspaces/{id}/relationships/{rsc:remote[-_]state[-_]consumers}"

# (method, pattern, handler, needs a token)
TABLE: list[tuple[str, str, Handler, bool]] = [
    ("GET", "/.well-known/terraform.json", meta.discovery, False),
    ("GET", "/ping", meta.ping, False),
    ("GET", "/openapi.json", openapi.serve, False),
    # users, tokens, VCS installations, site admin
    ("GET", "/account/details", accounts.account_details, True),
    ("POST", "/admin/users", accounts.create_user, True),
    ("GET", "/admin/users", accounts.list_users, True),
    ("GET", "/users/{id}", accounts.show_user, True),
    ("POST", "/users/{id}/authentication-tokens", accounts.create_user_token, True),
    ("GET", "/users/{id}/authentication-tokens", accounts.list_user_tokens, True),
    ("GET", "/authentication-tokens/{id}", accounts.show_token, True),
    ("DELETE", "/authentication-tokens/{id}", accounts.delete_token, True),
    ("POST", "/admin/vcs-app-installations", accounts.create_installation, True),
    ("GET", "/admin/vcs-app-installations", accounts.list_installations, True),
    ("DELETE", "/admin/vcs-app-installations/{id}", accounts.delete_installation, True),
    ("GET", "/github-app/installations", accounts.list_installations, True),
    ("GET", "/github-app/installation/{id}", accounts.show_installation, True),
    ("GET", "/vcs-app/installations", accounts.list_installations, True),
    ("GET", "/vcs-app/installation/{id}", accounts.show_installation, True),
    # organizations
    ("GET", "/organizations", orgs.list_, True),
    ("POST", "/organizations", orgs.create, True),
    ("GET", "/organizations/{org}", orgs.show, True),
    ("PATCH", "/organizations/{org}", orgs.update, True),
    ("DELETE", "/organizations/{org}", orgs.delete, True),
    ("GET", "/organizations/{org}/entitlement-set", orgs.entitlements, True),
    ("POST", "/organizations/{org}/authentication-token", accounts.create_org_token, True),
    ("GET", "/organizations/{org}/authentication-token", accounts.show_org_token, True),
    ("DELETE", "/organizations/{org}/authentication-token", accounts.delete_org_token, True),
    # projects
    ("GET", "/organizations/{org}/projects", orgs.list_projects, True),
    ("POST", "/organizations/{org}/projects", orgs.create_project, True),
    ("GET", "/projects/{id}", orgs.show_project, True),
    ("PATCH", "/projects/{id}", orgs.update_project, True),
    ("DELETE", "/projects/{id}", orgs.delete_project, True),
    # workspaces
    ("GET", "/organizations/{org}/workspaces", workspaces.list_, True),
    ("POST", "/organizations/{org}/workspaces", workspaces.create, True),
    ("GET", "/organizations/{org}/workspaces/{name}", workspaces.show, True),
    ("PATCH", "/organizations/{org}/workspaces/{name}", workspaces.update, True),
    ("DELETE", "/organizations/{org}/workspaces/{name}", workspaces.delete, True),
    (
        "POST",
        "/organizations/{org}/workspaces/{name}/actions/safe-delete",
        workspaces.safe_delete,
        True,
    ),
    ("GET", "/workspaces/{id}", workspaces.show, True),
    ("PATCH", "/workspaces/{id}", workspaces.update, True),
    ("DELETE", "/workspaces/{id}", workspaces.delete, True),
    ("POST", "/workspaces/{id}/actions/safe-delete", workspaces.safe_delete, True),
    ("POST", "/workspaces/{id}/actions/lock", workspaces.lock, True),
    ("POST", "/workspaces/{id}/actions/unlock", workspaces.unlock, True),
    ("POST", "/workspaces/{id}/actions/force-unlock", workspaces.force_unlock, True),
    # state versions and their outputs
    ("POST", "/workspaces/{id}/state-versions", state_versions.create, True),
    ("GET", "/workspaces/{id}/current-state-version", state_versions.current, True),
    (
        "GET",
        "/workspaces/{id}/current-state-version-outputs",
        state_versions.current_outputs,
        True,
    ),
    ("GET", "/state-versions", state_versions.list_, True),
    ("GET", "/state-versions/{id}", state_versions.show, True),
    ("GET", "/state-versions/{id}/download", state_versions.download, True),
    # The upload URL carries its own one-time credential, like HCP Terraform's signed URLs.
    ("PUT", "/state-versions/{id}/content", state_versions.upload, False),
    ("GET", "/state-versions/{id}/outputs", state_versions.list_outputs, True),
    ("GET", "/state-version-outputs/{id}", state_versions.show_output, True),
    # remote runs: configuration versions, runs, plans, applies (handlers/runs.py)
    ("POST", "/workspaces/{id}/configuration-versions", runs.cv_create, True),
    ("GET", "/workspaces/{id}/configuration-versions", runs.cv_list, True),
    ("GET", "/configuration-versions/{id}", runs.cv_show, True),
    ("GET", "/configuration-versions/{id}/download", runs.cv_download, True),
    # Upload and log URLs carry their own credential, like HCP Terraform's signed URLs.
    ("PUT", "/configuration-versions/{id}/upload", runs.cv_upload, False),
    ("POST", "/runs", runs.run_create, True),
    ("GET", "/runs/{id}", runs.run_show, True),
    ("GET", "/workspaces/{id}/runs", runs.run_list, True),
    ("POST", "/runs/{id}/actions/{action}", runs.run_action, True),
    ("GET", "/plans/{id}", runs.plan_show, True),
    ("GET", "/applies/{id}", runs.apply_show, True),
    ("GET", "/plans/{id}/logs/{cap}", runs.logs, False),
    ("GET", "/applies/{id}/logs/{cap}", runs.logs, False),
    ("GET", "/organizations/{org}/runs/queue", runs.org_queue, True),
    ("GET", "/organizations/{org}/capacity", runs.org_capacity, True),
    # the runner task (runner_task.py): its one-time ticket, then its run token
    ("POST", "/runs/{id}/runner/redeem", runs.runner_redeem, False),
    ("POST", "/runs/{id}/runner/logs", runs.runner_log, True),
    ("PUT", "/runs/{id}/runner/plan-file", runs.runner_plan_put, True),
    ("GET", "/runs/{id}/runner/plan-file", runs.runner_plan_get, True),
    ("POST", "/runs/{id}/runner/result", runs.runner_result, True),
    # variables
    ("GET", "/workspaces/{id}/vars", variables.ws_list, True),
    ("POST", "/workspaces/{id}/vars", variables.ws_create, True),
    ("PATCH", "/workspaces/{id}/vars/{var}", variables.ws_update, True),
    ("DELETE", "/workspaces/{id}/vars/{var}", variables.ws_delete, True),
    ("GET", "/vars", variables.list_, True),
    ("POST", "/vars", variables.create, True),
    ("PATCH", "/vars/{id}", variables.update, True),
    ("DELETE", "/vars/{id}", variables.delete, True),
    # variable sets
    ("GET", "/organizations/{org}/varsets", varsets.list_, True),
    ("POST", "/organizations/{org}/varsets", varsets.create, True),
    ("GET", "/varsets/{id}", varsets.show, True),
    ("PATCH", "/varsets/{id}", varsets.update, True),
    ("PUT", "/varsets/{id}", varsets.update, True),
    ("DELETE", "/varsets/{id}", varsets.delete, True),
    ("POST", "/varsets/{id}/relationships/workspaces", varsets.add_workspaces, True),
    ("DELETE", "/varsets/{id}/relationships/workspaces", varsets.remove_workspaces, True),
    ("POST", "/varsets/{id}/relationships/projects", varsets.add_projects, True),
    ("DELETE", "/varsets/{id}/relationships/projects", varsets.remove_projects, True),
    ("GET", "/varsets/{id}/relationships/vars", varsets.list_vars, True),
    ("POST", "/varsets/{id}/relationships/vars", varsets.create_var, True),
    ("PATCH", "/varsets/{id}/relationships/vars/{var}", varsets.update_var, True),
    ("DELETE", "/varsets/{id}/relationships/vars/{var}", varsets.delete_var, True),
    ("GET", "/workspaces/{id}/varsets", varsets.for_workspace, True),
    ("GET", RSC, consumers.list_, True),
    ("PATCH", RSC, consumers.replace, True),
    ("POST", RSC, consumers.add, True),
    ("DELETE", RSC, consumers.remove, True),
    ("GET", "/workspaces/{id}/relationships/tags", tags.list_for_workspace, True),
    ("POST", "/workspaces/{id}/relationships/tags", tags.add, True),
    ("DELETE", "/workspaces/{id}/relationships/tags", tags.remove, True),
    ("GET", "/organizations/{org}/tags", tags.list_for_org, True),
    ("DELETE", "/organizations/{org}/tags", tags.delete_for_org, True),
    ("POST", "/tags/{id}/relationships/workspaces", tags.add_workspaces, True),
    # teams and access
    ("GET", "/organizations/{org}/teams", teams.list_, True),
    ("POST", "/organizations/{org}/teams", teams.create, True),
    ("GET", "/teams/{id}", teams.show, True),
    ("PATCH", "/teams/{id}", teams.update, True),
    ("DELETE", "/teams/{id}", teams.delete, True),
    ("POST", "/teams/{id}/relationships/users", teams.add_members, True),
    ("DELETE", "/teams/{id}/relationships/users", teams.remove_members, True),
    ("POST", "/teams/{id}/authentication-token", accounts.create_team_token, True),
    ("GET", "/teams/{id}/authentication-token", accounts.show_team_token, True),
    ("DELETE", "/teams/{id}/authentication-token", accounts.delete_team_token, True),
    ("POST", "/teams/{id}/authentication-tokens", accounts.create_team_token_v2, True),
    ("GET", "/teams/{id}/authentication-tokens", accounts.list_team_tokens, True),
    ("GET", "/team-workspaces", teams.list_access, True),
    ("POST", "/team-workspaces", teams.create_access, True),
    ("GET", "/team-workspaces/{id}", teams.show_access, True),
    ("PATCH", "/team-workspaces/{id}", teams.update_access, True),
    ("DELETE", "/team-workspaces/{id}", teams.delete_access, True),
    # policies and policy sets
    ("GET", "/organizations/{org}/policies", policies.list_policies, True),
    ("POST", "/organizations/{org}/policies", policies.create_policy, True),
    ("GET", "/policies/{id}", policies.show_policy, True),
    ("PATCH", "/policies/{id}", policies.update_policy, True),
    ("DELETE", "/policies/{id}", policies.delete_policy, True),
    ("PUT", "/policies/{id}/upload", policies.upload_policy, True),
    ("GET", "/policies/{id}/download", policies.download_policy, True),
    ("GET", "/organizations/{org}/policy-sets", policies.list_sets, True),
    ("POST", "/organizations/{org}/policy-sets", policies.create_set, True),
    ("GET", "/policy-sets/{id}", policies.show_set, True),
    ("PATCH", "/policy-sets/{id}", policies.update_set, True),
    ("DELETE", "/policy-sets/{id}", policies.delete_set, True),
    ("POST", "/policy-sets/{id}/relationships/policies", policies.add_policies, True),
    ("DELETE", "/policy-sets/{id}/relationships/policies", policies.remove_policies, True),
    ("POST", "/policy-sets/{id}/relationships/projects", policies.add_projects, True),
    ("DELETE", "/policy-sets/{id}/relationships/projects", policies.remove_projects, True),
    ("POST", "/policy-sets/{id}/relationships/workspaces", policies.add_workspaces, True),
    ("DELETE", "/policy-sets/{id}/relationships/workspaces", policies.remove_workspaces, True),
    ("POST", "/policy-sets/{id}/versions", policies.create_version, True),
    ("GET", "/policy-set-versions/{id}", policies.show_version, True),
    ("PUT", "/policy-set-versions/{id}/upload", policies.upload_version, True),
]

API_PREFIX = "/api/v2"


def _compile(pattern: str) -> re.Pattern[str]:
    def group(m: re.Match[str]) -> str:
        name, _, rx = m.group(1).partition(":")
        return f"(?P<{name}>{rx or '[^/]+'})"

    full = pattern if pattern.startswith("/.well-known") else API_PREFIX + pattern
    return re.compile("^" + re.sub(r"\{([^}]+)\}", group, full) + "/?$")


class Router:
    def __init__(self) -> None:
        self.routes = [(m, _compile(p), h, auth) for m, p, h, auth in TABLE]

    def match(
        self, method: str, path: str
    ) -> tuple[Handler, dict[str, str], bool] | tuple[None, None, list[str]]:
        """(handler, params, needs-auth), or (None, None, allowed methods) when nothing
        matches this method (an empty list: the path is unknown)."""
        allowed: list[str] = []
        for m, rx, h, auth in self.routes:
            found = rx.match(path)
            if found is None:
                continue
            if m != method:
                allowed.append(m)
                continue
            return h, {k: unquote(v) for k, v in found.groupdict().items()}, auth
        return None, None, allowed

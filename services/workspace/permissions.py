"""HCP Terraform's permission model as pure functions of (state, caller).

Access is team based and additive: the owners team can do everything; organization access
(manage-workspaces, manage-policies, ...) applies across the organization; team workspace
access (read / plan / write / admin / custom) applies to one workspace. An organization token
acts as an owner for management but cannot run, lock or write state; a team token has its
team's access; a user token its teams' access. A site admin (the bootstrap token) sees all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.workspace.model import ORG_ACCESS_KEYS, Organization, TeamAccess, Workspace
from services.workspace.state import WorkspaceState


@dataclass(frozen=True, slots=True)
class Caller:
    kind: str  # admin | user | team | organization
    user_id: str | None = None
    team_id: str | None = None
    org_id: str | None = None
    token_id: str | None = None
    # A run token (kind "run"): scoped to the one workspace its run belongs to.
    workspace_id: str | None = None
    run_id: str | None = None

    @property
    def lock_holder(self) -> tuple[str, str]:
        """What `locked-by` names when this caller locks a workspace."""
        if self.kind == "run" and self.run_id:
            return ("runs", self.run_id)
        if self.kind == "team" and self.team_id:
            return ("teams", self.team_id)
        if self.kind == "organization" and self.org_id:
            return ("organizations", self.org_id)
        return ("users", self.user_id or "user-siteadmin")


ADMIN_USER_ID = "user-siteadmin"


@dataclass(frozen=True, slots=True)
class OrgAccess:
    member: bool = False
    owner: bool = False
    org_token: bool = False
    flags: frozenset[str] = frozenset()

    def can(self, flag: str) -> bool:
        return self.owner or flag in self.flags


def caller_teams(state: WorkspaceState, caller: Caller, org_id: str) -> list[str]:
    if caller.kind == "team":
        team = state.teams.get(caller.team_id or "")
        return [team.id] if team and team.org_id == org_id else []
    if caller.kind == "user":
        return [
            t.id
            for t in state.teams.values()
            if t.org_id == org_id and caller.user_id in t.user_ids
        ]
    return []


def org_access(state: WorkspaceState, caller: Caller, org: Organization) -> OrgAccess:
    if caller.kind == "run":
        # Sees its organization (to find workspaces by name), manages nothing in it.
        return OrgAccess(member=caller.org_id == org.id)
    if caller.kind == "admin":
        return OrgAccess(member=True, owner=True, flags=frozenset(ORG_ACCESS_KEYS))
    if caller.kind == "organization":
        if caller.org_id != org.id:
            return OrgAccess()
        # Implicit management of workspaces, teams, access and policies; never runs or state.
        return OrgAccess(member=True, owner=True, org_token=True, flags=frozenset(ORG_ACCESS_KEYS))
    teams = caller_teams(state, caller, org.id)
    if not teams:
        return OrgAccess()
    if org.owners_team_id in teams:
        return OrgAccess(member=True, owner=True, flags=frozenset(ORG_ACCESS_KEYS))
    flags = {k for tid in teams for k, v in state.teams[tid].organization_access.items() if v}
    if "manage-workspaces" in flags:
        flags.add("read-workspaces")
    if "manage-projects" in flags:
        flags.add("read-projects")
    return OrgAccess(member=True, flags=frozenset(flags))


# Workspace capabilities; the permission keys and the checks of handlers are built on these.
READ = frozenset({"read-runs", "read-vars", "read-state-outputs", "read-state", "read-settings"})
PLAN = READ | {"queue-plan"}
WRITE = PLAN | {"queue-apply", "write-vars", "write-state", "lock", "read-mocks"}
ADMIN = WRITE | {"admin", "queue-destroy", "manage-run-tasks", "manage-tags", "force-unlock"}
LEVELS = {"read": READ, "plan": PLAN, "write": WRITE, "admin": ADMIN}
# An organization token manages but never runs, locks or writes state.
ORG_TOKEN = ADMIN - {
    "queue-plan",
    "queue-apply",
    "queue-destroy",
    "write-state",
    "lock",
    "force-unlock",
}


def custom_caps(access: TeamAccess) -> frozenset[str]:
    c = access.custom
    caps = {"read-runs", "read-settings"}
    runs = c.get("runs", "read")
    if runs in ("plan", "apply"):
        caps.add("queue-plan")
    if runs == "apply":
        caps.add("queue-apply")
    variables = c.get("variables", "none")
    if variables in ("read", "write"):
        caps.add("read-vars")
    if variables == "write":
        caps.add("write-vars")
    states = c.get("state-versions", "none")
    if states in ("read-outputs", "read", "write"):
        caps.add("read-state-outputs")
    if states in ("read", "write"):
        caps.add("read-state")
    if states == "write":
        caps.add("write-state")
    if c.get("sentinel-mocks") == "read":
        caps.add("read-mocks")
    if c.get("workspace-locking"):
        caps.add("lock")
    if c.get("run-tasks"):
        caps.add("manage-run-tasks")
    return frozenset(caps)


# A run token on its own workspace: what a run needs (read variables, lock, read and write
# state). On another workspace that shares its state with it (global-remote-state, or the run's
# workspace is one of its remote state consumers): read that state and its outputs, nothing else.
RUN_OWN = frozenset(
    {"read-runs", "read-vars", "read-state-outputs", "read-state", "write-state", "lock"}
)
RUN_REMOTE_STATE = frozenset({"read-runs", "read-state-outputs", "read-state"})


def run_caps(caller: Caller, ws: Workspace) -> frozenset[str]:
    if caller.org_id != ws.org_id or not caller.workspace_id:
        return frozenset()
    if ws.id == caller.workspace_id:
        return RUN_OWN
    if ws.global_remote_state or caller.workspace_id in ws.consumer_ids:
        return RUN_REMOTE_STATE
    return frozenset()


def workspace_caps(state: WorkspaceState, caller: Caller, ws: Workspace) -> frozenset[str]:
    """Everything `caller` may do on `ws`; empty means the workspace is invisible (404)."""
    if caller.kind == "run":
        return run_caps(caller, ws)
    org = state.orgs[ws.org_id]
    acc = org_access(state, caller, org)
    if not acc.member:
        return frozenset()
    if acc.org_token:
        return ORG_TOKEN
    if acc.owner or acc.can("manage-workspaces"):
        return ADMIN
    caps: set[str] = set()
    if acc.can("read-workspaces") or acc.can("manage-policies"):
        caps |= READ  # manage-policies implies reading runs everywhere
    for tid in caller_teams(state, caller, org.id):
        a = state.access_for(tid, ws.id)
        if a is not None:
            caps |= custom_caps(a) if a.access == "custom" else LEVELS.get(a.access, READ)
    return frozenset(caps)


def permissions_object(caps: frozenset[str]) -> dict[str, bool]:
    """The workspace document's `permissions`, computed for the caller."""
    return {
        "can-create-state-versions": "write-state" in caps,
        "can-destroy": "admin" in caps,
        "can-force-unlock": "force-unlock" in caps,
        "can-lock": "lock" in caps,
        "can-manage-run-tasks": "manage-run-tasks" in caps,
        "can-manage-tags": "manage-tags" in caps,
        "can-queue-apply": "queue-apply" in caps,
        "can-queue-destroy": "queue-destroy" in caps,
        "can-queue-run": "queue-plan" in caps,
        "can-read-settings": "read-settings" in caps,
        "can-read-state-versions": "read-state" in caps,
        "can-read-variable": "read-vars" in caps,
        "can-unlock": "lock" in caps,
        "can-update": "admin" in caps,
        "can-update-variable": "write-vars" in caps,
    }


def caps_function(
    state: WorkspaceState, caller: Caller, org: Organization
) -> Callable[[Workspace], frozenset[str]]:
    """`workspace_caps` for many workspaces of one organization (lists over thousands):
    the organization-wide part is worked out once."""
    if caller.kind == "run":
        return lambda ws: run_caps(caller, ws)
    acc = org_access(state, caller, org)
    if not acc.member:
        return lambda ws: frozenset()
    if acc.org_token:
        return lambda ws: ORG_TOKEN
    if acc.owner or acc.can("manage-workspaces"):
        return lambda ws: ADMIN
    base = READ if acc.can("read-workspaces") or acc.can("manage-policies") else frozenset()
    teams = set(caller_teams(state, caller, org.id))
    by_ws: dict[str, set[str]] = {}
    for a in state.team_access.values():
        if a.team_id in teams:
            by_ws.setdefault(a.workspace_id, set()).update(
                custom_caps(a) if a.access == "custom" else LEVELS.get(a.access, READ)
            )
    return lambda ws: base | by_ws.get(ws.id, frozenset())

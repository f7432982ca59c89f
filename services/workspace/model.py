"""The records the workspace state machine holds. Plain mutable structs: only `state.py` changes
them, while applying log entries; everything else reads."""

from __future__ import annotations

import msgspec


class User(msgspec.Struct, kw_only=True):
    id: str
    username: str
    email: str = ""
    created_at: float = 0.0


class Organization(msgspec.Struct, kw_only=True):
    # The API's `id` for an organization is its name; `id` here is the stable external-id.
    id: str
    name: str
    email: str
    created_at: float
    owners_team_id: str
    default_project_id: str
    session_timeout: int | None = None
    session_remember: int | None = None
    collaborator_auth_policy: str = "password"
    cost_estimation_enabled: bool = False
    send_passing_statuses_for_untriggered_speculative_plans: bool = False
    allow_force_delete_workspaces: bool = False
    default_execution_mode: str = "remote"
    assessments_enforced: bool = False


class Project(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    name: str
    description: str = ""
    created_at: float = 0.0


class VcsRepo(msgspec.Struct, kw_only=True):
    identifier: str
    oauth_token_id: str | None = None
    branch: str = ""
    ingress_submodules: bool = False
    vcs_app_installation_id: str | None = None


class Workspace(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    project_id: str
    name: str
    created_at: float
    updated_at: float
    latest_change_at: float
    description: str | None = None
    allow_destroy_plan: bool = True
    auto_apply: bool = False
    auto_destroy_at: str | None = None
    execution_mode: str = "remote"
    agent_pool_id: str | None = None
    file_triggers_enabled: bool = True
    global_remote_state: bool = False
    queue_all_runs: bool = False
    source: str = "tfe-api"
    source_name: str | None = None
    source_url: str | None = None
    speculative_enabled: bool = True
    structured_run_output_enabled: bool = True
    tool_version: str = ""
    trigger_prefixes: list[str] = []
    vcs_repo: VcsRepo | None = None
    working_directory: str | None = None
    locked: bool = False
    # ("users" | "teams" | "organizations", id) of whoever holds the lock.
    locked_by: tuple[str, str] | None = None
    lock_reason: str = ""
    tag_ids: list[str] = []  # insertion order, as clients expect
    consumer_ids: list[str] = []
    current_state_version_id: str | None = None
    # Remote runs: the run holding the workspace now, and the newest run.
    current_run_id: str | None = None
    latest_run_id: str | None = None


class Tag(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    name: str
    created_at: float


class Policy(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    name: str
    kind: str
    enforcement_level: str
    created_at: float
    updated_at: float
    description: str | None = None
    query: str | None = None
    content: bytes | None = None
    policy_set_ids: list[str] = []


class PolicySet(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    name: str
    kind: str
    created_at: float
    updated_at: float
    description: str | None = None
    is_global: bool = False
    overridable: bool = False
    vcs_repo: VcsRepo | None = None
    policies_path: str | None = None
    policy_ids: list[str] = []
    project_ids: list[str] = []
    workspace_ids: list[str] = []
    version_ids: list[str] = []
    current_version_id: str | None = None
    newest_version_id: str | None = None
    agent_enabled: bool = True
    policy_tool_version: str = "latest"


class PolicySetVersion(msgspec.Struct, kw_only=True):
    id: str
    policy_set_id: str
    source: str
    status: str
    created_at: float
    updated_at: float
    status_timestamps: dict[str, float] = {}
    error: str | None = None
    ingress_attributes: dict[str, str | None] | None = None


# The organization-access keys a team can hold, as the API names them.
ORG_ACCESS_KEYS = (
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


class Team(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    name: str
    created_at: float
    visibility: str = "secret"
    sso_team_id: str | None = None
    organization_access: dict[str, bool] = {}
    user_ids: list[str] = []


# Custom workspace access categories and their allowed values (first = lowest).
CUSTOM_ACCESS = {
    "runs": ("read", "plan", "apply"),
    "variables": ("none", "read", "write"),
    "state-versions": ("none", "read-outputs", "read", "write"),
    "sentinel-mocks": ("none", "read"),
    "workspace-locking": (False, True),
    "run-tasks": (False, True),
}


class TeamAccess(msgspec.Struct, kw_only=True):
    id: str
    team_id: str
    workspace_id: str
    access: str  # read | plan | write | admin | custom
    custom: dict[str, str | bool] = {}
    created_at: float = 0.0


class Token(msgspec.Struct, kw_only=True):
    id: str
    kind: str  # user | team | organization | run (owner: the run's workspace; description: run id)
    owner_id: str  # user, team or organization (external) id
    digest: str  # SHA-256 of the secret: the secret itself never enters the log
    created_at: float
    description: str | None = None
    expired_at: str | None = None
    created_by: str | None = None


class VcsInstallation(msgspec.Struct, kw_only=True):
    id: str
    name: str
    installation_id: int
    icon_url: str = ""
    installation_type: str = "User"
    installation_url: str = ""


class StateOutput(msgspec.Struct, kw_only=True):
    """One output of a state version. The value itself is sealed with the state's data key
    (`StateVersion.sealed_values`); only the name, type and sensitivity are kept in clear."""

    id: str
    name: str
    sensitive: bool = False
    type_json: bytes = b'"string"'  # the output's type as Terraform writes it (JSON)


class StateVersion(msgspec.Struct, kw_only=True):
    id: str
    workspace_id: str
    created_at: float
    serial: int
    lineage: str
    md5: str
    status: str  # pending (waiting for the upload) | finalized
    # SHA-256 of the capability in the upload URL; cleared once the state is uploaded.
    upload_digest: str = ""
    size: int = 0
    state_format: int = 4  # the state file's "version"
    terraform_version: str = ""
    resources_processed: bool = True
    resource_count: int = 0
    outputs: list[StateOutput] = []
    resources_json: bytes = b"[]"  # the per-resource summary (names and counts, no values)
    sealed_values: bytes = b""  # AES-GCM: msgpack {output id: JSON value}
    # Large output values live in the blob store (`<id>.outputs`), not in the log.
    values_in_blob: bool = False
    created_by: tuple[str, str] | None = None
    run_id: str | None = None


class Variable(msgspec.Struct, kw_only=True):
    id: str
    key: str
    category: str  # terraform | env
    created_at: float
    # Exactly one owner: a workspace or a variable set.
    workspace_id: str | None = None
    varset_id: str | None = None
    description: str | None = None
    hcl: bool = False
    sensitive: bool = False
    # Values are sealed with the variables' data key: sensitive ones are never shown again,
    # and none sits in the log or a snapshot in clear.
    sealed_value: bytes = b""
    version_id: str = ""


class VariableSet(msgspec.Struct, kw_only=True):
    id: str
    org_id: str
    name: str
    created_at: float
    updated_at: float
    description: str | None = None
    is_global: bool = False
    priority: bool = False
    workspace_ids: list[str] = []
    project_ids: list[str] = []

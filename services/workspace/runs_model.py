"""The records of remote runs: configuration versions (the uploaded .tar.gz of a
configuration) and runs with their plan and apply phases. Only the state machine changes them."""

from __future__ import annotations

import msgspec


class ConfigurationVersion(msgspec.Struct, kw_only=True):
    id: str
    workspace_id: str
    created_at: float
    status: str = "pending"  # pending | uploaded | errored
    auto_queue_runs: bool = True
    speculative: bool = False
    source: str = "tfe-api"
    # SHA-256 of the one-time upload capability; empty once the upload arrived.
    upload_digest: str = ""
    error_message: str = ""
    size: int = 0
    status_timestamps: dict[str, float] = {}


class Phase(msgspec.Struct, kw_only=True):
    """A plan or an apply: one scheduler batch job."""

    status: str = (
        "pending"  # pending | queued | running | finished | errored | canceled | unreachable
    )
    status_timestamps: dict[str, float] = {}
    additions: int = 0
    changes: int = 0
    destructions: int = 0
    # The log as the task streamed it (the STX/ETX framing is added when it is read).
    log: bytes = b""
    job_id: str = ""
    # SHA-256 of the one-time ticket the task redeems for its run token and variables.
    ticket_digest: str = ""


class Run(msgspec.Struct, kw_only=True):
    id: str
    workspace_id: str
    cv_id: str
    created_at: float
    seq: int  # creation order within the workspace: the queue order
    message: str = ""
    is_destroy: bool = False
    plan_only: bool = False
    auto_apply: bool = False
    source: str = "tfe-api"
    status: str = "pending"
    status_timestamps: dict[str, float] = {}
    has_changes: bool = False
    error_message: str = ""
    cancel_requested: bool = False
    created_by: tuple[str, str] | None = None
    plan: Phase = msgspec.field(default_factory=Phase)
    apply: Phase = msgspec.field(default_factory=Phase)
    state_version_id: str | None = None

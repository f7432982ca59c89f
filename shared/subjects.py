"""The subject catalogue: every subject on the bus, who serves it, and its request and reply
types. Reading this file should tell you the whole protocol of the mesh."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Subject:
    """A subject relative to the cluster: `on(cluster)` gives the real NATS subject, so two
    clusters (or two tests) can share one NATS without hearing each other."""

    name: str
    queue: str | None  # None: every replica receives it (a broadcast)
    request: str
    reply: str
    doc: str

    def on(self, cluster: str) -> str:
        return f"{cluster}.{self.name}"


# HTTP APIs: the gateway sends HttpRequest, the owning service answers HttpResponse.
API_SECRETS = Subject(
    "api.secrets",
    "secrets",
    "SealedRequest",
    "SealedReply",
    "secrets service HTTP API (/v1/...), envelopes sealed end to end (shared/api_session.py)",
)
API_WORKSPACE = Subject(
    "api.workspace",
    "workspace",
    "SealedRequest",
    "SealedReply",
    "workspace management HTTP API (/api/v2/...), sealed end to end (shared/api_session.py)",
)
API_SCHEDULER = Subject(
    "api.scheduler",
    "scheduler",
    "SealedRequest",
    "SealedReply",
    "job scheduler HTTP API (/v1/jobs, /v1/job/...), sealed end to end (shared/api_session.py)",
)

# The handshake of the gateway's end-to-end encrypted session with the secrets replicas
# (shared/api_session.py): an ephemeral X25519 key each way, the replica's half signed by the
# secrets cluster key; API_SECRETS then carries SealedRequest -> SealedReply.
SECRETS_SESSION = Subject(
    "api.secrets.session",
    "secrets",
    "SessionHello",
    "SessionAccept",
    "a gateway opens an encrypted session with the secrets cluster",
)
# The same handshake with the workspace and scheduler services, each signed by its own
# service key (shared/service_identity.py).
WORKSPACE_SESSION = Subject(
    "api.workspace.session",
    "workspace",
    "SessionHello",
    "SessionAccept",
    "a gateway opens an encrypted session with the workspace service",
)
SCHEDULER_SESSION = Subject(
    "api.scheduler.session",
    "scheduler",
    "SessionHello",
    "SessionAccept",
    "a gateway opens an encrypted session with the scheduler service",
)

# The echo service the benchmarks compare against; served by every secrets replica.
ECHO = Subject(
    "echo", "echo", "HttpRequest", "HttpResponse", "trivial request/reply baseline for benchmarks"
)

# Seal traffic between secrets replicas (broadcast, never queued).
SEAL_SHARE = Subject(
    "secrets.seal.share",
    None,
    "UnsealShare",
    "none",
    "an unseal key share submitted to one replica, shared with all",
)
SEAL_SEALED = Subject(
    "secrets.seal.sealed",
    None,
    "SealNotice",
    "none",
    "the cluster was sealed; every replica drops its keys",
)
SEAL_HANDOFF = Subject(
    "secrets.seal.handoff",
    "seal-handoff",
    "HandoffRequest",
    "HandoffReply",
    "a starting replica asks an unsealed peer for the keyring",
)
SEAL_CHANGED = Subject(
    "secrets.invalidate",
    None,
    "Invalidate",
    "none",
    "cached state (mounts, policies) changed; replicas reload it",
)
SEAL_COUNT = Subject(
    "secrets.count",
    None,
    "CountRequest",
    "CountReply",
    "a replica asks every other for its encryptions under the active key term",
)

# Each secrets replica's public state (seal, init, cluster, DR mode), signed with the cluster
# key; gateways answer sys/health, sys/seal-status and sys/leader from it (a broadcast).
SECRETS_STATE = Subject(
    "secrets.state",
    None,
    "SignedRecord",
    "none",
    "a secrets replica's seal and cluster state, on change and every second",
)

# Every write the secrets bucket stores, republished by the stream itself (headers only, the
# key as the subject's tail): each replica's storage cache drops the key (shared/storage_feed.py).
SECRETS_STORAGE_FEED = Subject(
    "secrets.kvcache",
    None,
    "stored message headers",
    "none",
    "a write stored in the secrets bucket; replicas drop their cached copy of the key",
)

# CPU-heavy asymmetric work, served by crypto workers in one queue group.
CRYPTO = Subject(
    "crypto.cmd",
    "crypto",
    "CryptoCommand",
    "CryptoResult",
    "key generation, X.509 and SSH signing, CSR and CRL work",
)

# Data keys for encryption at rest outside the barrier (workspace states and variables).
DATA_KEY = Subject(
    "secrets.datakey",
    "secrets",
    "DataKeyRequest",
    "DataKeyReply",
    "a named data key from the barrier, sealed to the requester's one-time X25519 key",
)

ALL: tuple[Subject, ...] = (
    API_SECRETS,
    API_WORKSPACE,
    API_SCHEDULER,
    SECRETS_SESSION,
    WORKSPACE_SESSION,
    SCHEDULER_SESSION,
    ECHO,
    SEAL_SHARE,
    SEAL_SEALED,
    SEAL_HANDOFF,
    SEAL_CHANGED,
    SEAL_COUNT,
    SECRETS_STATE,
    CRYPTO,
    DATA_KEY,
)

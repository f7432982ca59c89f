"""Internal subjects and wire types of the scheduler (merge into shared/subjects.py):

{cluster}.sched.broker.dequeue  queue "sched-broker" (leader only)  Dequeue -> DequeueReply
{cluster}.sched.broker.ack      queue "sched-broker" (leader only)  Ack -> Ok
{cluster}.sched.node.register   queue "sched-rpc"                   NodeRegister -> NodeRegistered
{cluster}.sched.node.heartbeat  broadcast (every replica)           Heartbeat (no reply)
{cluster}.sched.node.allocs     queue "sched-rpc"                   NodeAllocs -> NodeAllocsReply
{cluster}.sched.alloc.update    queue "sched-rpc"                   AllocUpdate -> Ok
{cluster}.sched.replica.up      broadcast (every client)            empty (no reply)
"""

from __future__ import annotations

from typing import Any

import msgspec

from shared.service_proof import Proof


def subject(cluster: str, name: str) -> str:
    return f"{cluster}.sched.{name}"


DEQUEUE = "broker.dequeue"
ACK = "broker.ack"
NODE_REGISTER = "node.register"
HEARTBEAT = "node.heartbeat"
NODE_ALLOCS = "node.allocs"
ALLOC_UPDATE = "alloc.update"
# A replica starts serving: clients poll again at once, since a long poll held by a replica
# that died is never answered (NATS does not tell the requester) and would wait out its timeout.
REPLICA_UP = "replica.up"


class Dequeue(msgspec.Struct, kw_only=True):
    types: list[str] = []
    wait: float = 5.0
    worker: str = ""


class DequeueReply(msgspec.Struct, kw_only=True):
    eval: dict[str, Any] | None = None
    token: str = ""


class Ack(msgspec.Struct, kw_only=True):
    eval_id: str
    token: str
    ok: bool = True  # False: nack


class Ok(msgspec.Struct, kw_only=True):
    index: int = 0


# Every client RPC names its nodes with their node secrets (node ID -> SecretID); the scheduler
# refuses a request in which any node's secret is missing or wrong.


class NodeRegister(msgspec.Struct, kw_only=True):
    nodes: list[dict[str, Any]]  # each carries its "SecretID", stored only as a hash


class NodeRegistered(msgspec.Struct, kw_only=True):
    index: int
    heartbeat_ttl: float


class Heartbeat(msgspec.Struct, kw_only=True):
    node_ids: list[str]
    secrets: dict[str, str] = {}


class NodeAllocs(msgspec.Struct, kw_only=True):
    node_ids: list[str]
    index: int = 0
    wait: float = 30.0
    secrets: dict[str, str] = {}


class NodeAllocsReply(msgspec.Struct, kw_only=True):
    index: int
    allocs: list[dict[str, Any]] = []
    # "<ns>\x00<job>\x00<version>\x00<group>" -> task group spec, sent once per reply
    groups: dict[str, dict[str, Any]] = {}


class AllocUpdate(msgspec.Struct, kw_only=True):
    updates: list[dict[str, Any]]
    secrets: dict[str, str] = {}  # the nodes the updated allocations run on


# {cluster}.sched.node.fs.<node_id>: the scheduler asks the node running an allocation for its
# files and logs; the node answers with its secret, which the scheduler checks against the hash
# it keeps, so no other client can answer for it.
NODE_FS = "node.fs"


class FsRequest(msgspec.Struct, kw_only=True):
    op: str  # "ls" | "stat" | "readat" | "stream" | "logs" | "restart" | "signal"
    alloc_id: str
    path: str = "/"
    offset: int = 0
    limit: int = 0
    task: str = ""
    stream: str = "stdout"
    origin: str = "start"
    signal: str = ""  # op "signal"
    # op "logs" resuming a followed read: the log file number `offset` is in (-1: use origin).
    log_file: int = -1
    # The scheduler's proof (shared/service_proof.py): the node obeys only a genuine scheduler
    # replica; and the one-time X25519 key the node seals its whole answer to (sealbox).
    reader_public: bytes = b""
    proof: Proof | None = None


FS_PURPOSE = b"node fs request"


def fs_signed_bytes(node_id: str, req: FsRequest) -> bytes:
    """What the scheduler signs: the request without its proof, bound to the node asked."""
    return (
        node_id.encode()
        + b"\x00"
        + msgspec.msgpack.encode(msgspec.structs.replace(req, proof=None))
    )


class FsReply(msgspec.Struct, kw_only=True):
    node_id: str
    secret: str
    # On the bus only this is set: the whole FsReply, sealed to the request's reader_public.
    sealed: bytes = b""
    code: int = 200
    error: str = ""
    data: bytes = b""
    files: list[dict[str, Any]] = []
    frames: list[tuple[str, int, bytes]] = []
    task_dead: bool = False
    # op "stream": the streamed file's size; op "logs": the bytes left after what was read.
    total: int = 0
    # op "logs": where the next read starts (fsops.read_logs_at), rotation notwithstanding.
    log_file: int = 0
    log_offset: int = 0


# {cluster}.sched.node.secrets (queue "sched-rpc"): a client node asks for a task's secrets
# token and the secrets its templates read; the answer is sealed to `reader_public`.
TASK_SECRETS = "node.secrets"


class TaskSecretsRequest(msgspec.Struct, kw_only=True):
    node_id: str
    secret: str
    alloc_id: str
    task: str
    reader_public: bytes
    paths: list[str] = []


class TaskSecretsReply(msgspec.Struct, kw_only=True):
    sealed: bytes

"""Internal subjects and wire types of the scheduler (merge into shared/subjects.py):

{cluster}.sched.broker.dequeue  queue "sched-broker" (leader only)  Dequeue -> DequeueReply
{cluster}.sched.broker.ack      queue "sched-broker" (leader only)  Ack -> Ok
{cluster}.sched.node.register   queue "sched-rpc"                   NodeRegister -> NodeRegistered
{cluster}.sched.node.heartbeat  broadcast (every replica)           Heartbeat (no reply)
{cluster}.sched.node.allocs     queue "sched-rpc"                   NodeAllocs -> NodeAllocsReply
{cluster}.sched.alloc.update    queue "sched-rpc"                   AllocUpdate -> Ok
"""

from __future__ import annotations

from typing import Any

import msgspec


def subject(cluster: str, name: str) -> str:
    return f"{cluster}.sched.{name}"


DEQUEUE = "broker.dequeue"
ACK = "broker.ack"
NODE_REGISTER = "node.register"
HEARTBEAT = "node.heartbeat"
NODE_ALLOCS = "node.allocs"
ALLOC_UPDATE = "alloc.update"


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

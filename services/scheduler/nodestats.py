"""The node-stats RPC: `{cluster}.sched.node.stats.<node_id>`. The scheduler asks the node for
its host figures, an allocation's resource usage, or a client GC; the node answers with its
secret, which the scheduler checks against the hash it keeps (nodeauth), as for /client/fs."""

from __future__ import annotations

from typing import Any

import msgspec

NODE_STATS = "node.stats"


class StatsRequest(msgspec.Struct, kw_only=True):
    op: str  # "host" | "alloc" | "gc" | "gc-alloc"
    alloc_id: str = ""


class StatsReply(msgspec.Struct, kw_only=True):
    node_id: str
    secret: str
    code: int = 200
    error: str = ""
    body: dict[str, Any] | None = None

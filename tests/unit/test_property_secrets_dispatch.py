"""Random methods, paths, queries and bodies straight into the secrets dispatcher
(`handle_http`) of a live, unsealed core: every answer is < 500 (503 only while sealed).
The cluster runs on its own event loop in a thread so that hypothesis can drive it
synchronously."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.secrets.core.dispatch import handle_http
from shared.messages import HttpRequest, HttpResponse
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

T = TypeVar("T")

# Requests that would end the test rather than exercise it (seal, revoke the root token this
# test authenticates with, DR mode changes); the same list the schemathesis run leaves out.
DESTRUCTIVE = re.compile(
    r"^/v1/sys/(seal|step-down)/?$"
    r"|^/v1/sys/replication/"
    r"|^/v1/auth/token/revoke-self"
    r"|^/v1/sys/(leases/)?revoke-(prefix|force)"
)
SEGMENTS = [
    "sys",
    "auth",
    "token",
    "secret",
    "data",
    "metadata",
    "delete",
    "undelete",
    "destroy",
    "config",
    "cubbyhole",
    "mounts",
    "auth",
    "tune",
    "policy",
    "policies",
    "acl",
    "password",
    "leases",
    "lookup",
    "renew",
    "wrapping",
    "wrap",
    "unwrap",
    "rewrap",
    "create",
    "create-orphan",
    "roles",
    "accessors",
    "capabilities-self",
    "internal",
    "specs",
    "openapi",
    "ui",
    "namespaces",
    "health",
    "seal-status",
    "leader",
    "init",
    "unseal",
    "remount",
    "plugins",
    "catalog",
    "managed-keys",
    "generate",
    "x",
    "",
    "..",
    "%2F",
    "*",
]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "LIST", "HEAD", "OPTIONS", "BREW"]
FIELD_NAMES = [
    "ttl",
    "max_ttl",
    "explicit_max_ttl",
    "period",
    "policies",
    "type",
    "path",
    "config",
    "options",
    "data",
    "cas",
    "versions",
    "version",
    "policy",
    "token",
    "accessor",
    "increment",
    "lease_id",
    "num_uses",
    "renewable",
    "paths",
    "from",
    "to",
    "key",
    "reset",
    "description",
    "default_lease_ttl",
    "plugin_name",
]
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=10)
    | st.sampled_from(["1h", "-1h", "999999999999999999h", "", "0", "root", "default"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
BODIES = (
    st.dictionaries(st.sampled_from(FIELD_NAMES), JSON_VALUES, max_size=5).map(
        lambda d: json.dumps(d).encode()
    )
    | JSON_VALUES.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=64)
)
PATHS = st.lists(st.sampled_from(SEGMENTS) | st.text(max_size=6), min_size=1, max_size=6).map(
    lambda segs: "/v1/" + "/".join(segs)
)
QUERIES = st.sampled_from(["", "list=true", "help=1", "version=1", "list=true&help=1"]) | st.text(
    max_size=12
)


class LoopThread:
    """An event loop on a daemon thread: run coroutines on it from synchronous tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def live(nats_url: str) -> Iterator[tuple[LoopThread, Cluster]]:
    lt = LoopThread()
    cluster = lt.run(start_cluster(nats_url))
    try:
        yield lt, cluster
    finally:
        lt.run(cluster.close())
        lt.close()


def _call(lt: LoopThread, cluster: Cluster, env: HttpRequest) -> HttpResponse:
    core = cluster.secrets[0].core
    assert core is not None
    return lt.run(handle_http(core, env))


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    method=st.sampled_from(METHODS),
    path=PATHS,
    query=QUERIES,
    body=BODIES,
    authenticated=st.booleans(),
)
def test_dispatch_never_answers_5xx(
    live: tuple[LoopThread, Cluster],
    method: str,
    path: str,
    query: str,
    body: bytes,
    authenticated: bool,
) -> None:
    lt, cluster = live
    if DESTRUCTIVE.match(path):
        return
    headers = {"content-type": "application/json"}
    if authenticated:
        headers["x-vault-token"] = cluster.root_token
    env = HttpRequest(
        method=method, path=path, query=query, headers=headers, body=body, request_id="prop"
    )
    resp = _call(lt, cluster, env)
    sealed = resp.status == 503 and b"sealed" in resp.body
    assert resp.status < 500 or sealed, (method, path, query, body, resp.status, resp.body)

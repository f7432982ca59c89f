"""KV version 2 through the real gateway and nats-server: every route, error statuses,
check-and-set, deletes, metadata, config, subkeys, concurrent writers on two replicas, and
that no secret value reaches JetStream in the clear."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import nats
import nats.js.errors
import pytest

from services.secrets.core.dispatch import handle_http
from shared.messages import HttpRequest
from tests.harness import Cluster, start_cluster

pytestmark = pytest.mark.nats

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
MERGE = {"Content-Type": "application/merge-patch+json"}
CAS_MISMATCH = "check-and-set parameter did not match the current version"
CAS_REQUIRED = "check-and-set parameter required for this call"


async def write(c: Cluster, path: str, data: dict[str, Any], **options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"data": data}
    if options:
        body["options"] = options
    status, out = await c.request("POST", f"/v1/secret/data/{path}", json=body)
    assert status == 200, out
    return out["data"]


async def test_write_read_versions_and_metadata(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        w1 = await write(c, "app/db", {"user": "u", "password": "p1"})
        assert w1["version"] == 1 and w1["destroyed"] is False and w1["deletion_time"] == ""
        assert TIME.match(w1["created_time"]) and w1["custom_metadata"] is None
        w2 = await write(c, "app/db", {"user": "u", "password": "p2"})
        assert w2["version"] == 2

        status, body = await c.request("GET", "/v1/secret/data/app/db")
        assert status == 200
        assert body["data"]["data"] == {"user": "u", "password": "p2"}
        assert body["data"]["metadata"] == {**w2, "version": 2}
        assert body["lease_id"] == "" and body["lease_duration"] == 0

        status, body = await c.request("GET", "/v1/secret/data/app/db?version=1")
        assert status == 200 and body["data"]["data"]["password"] == "p1"
        assert body["data"]["metadata"]["version"] == 1

        for query, code in (
            ("version=99", 404),
            ("version=abc", 400),
            ("version=-1", 400),
            ("version=", 200),
            ("version=0", 200),
        ):
            status, body = await c.request("GET", f"/v1/secret/data/app/db?{query}")
            assert status == code, (query, body)
        status, body = await c.request("GET", "/v1/secret/data/app/nope")
        assert (status, body) == (404, {"errors": []})

        status, body = await c.request("GET", "/v1/secret/metadata/app/db")
        assert status == 200, body
        meta = body["data"]
        assert meta["current_version"] == 2 and meta["oldest_version"] == 0
        assert meta["max_versions"] == 0 and meta["cas_required"] is False
        assert meta["delete_version_after"] == "0s" and meta["custom_metadata"] is None
        assert meta["created_time"] == w1["created_time"]
        assert meta["updated_time"] == w2["created_time"]
        assert set(meta["versions"]) == {"1", "2"}
        assert meta["versions"]["2"] == {
            "created_time": w2["created_time"],
            "deletion_time": "",
            "destroyed": False,
        }
        # A v1-style path is not a KV v2 route.
        status, _ = await c.request("GET", "/v1/secret/app/db")
        assert status == 404
    finally:
        await c.close()


async def test_check_and_set(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        assert (await write(c, "cas", {"a": 1}, cas=0))["version"] == 1
        for cas in (0, 5, "2"):
            status, body = await c.request(
                "POST", "/v1/secret/data/cas", json={"data": {"a": 2}, "options": {"cas": cas}}
            )
            assert (status, body) == (400, {"errors": [CAS_MISMATCH]})
        assert (await write(c, "cas", {"a": 2}, cas="1"))["version"] == 2  # weakly typed
        status, body = await c.request(
            "POST", "/v1/secret/data/cas", json={"data": {"a": 3}, "options": {"cas": "two"}}
        )
        assert status == 400 and "check-and-set" in body["errors"][0]

        # Required by the key's metadata...
        status, _ = await c.request("POST", "/v1/secret/metadata/cas", json={"cas_required": True})
        assert status == 204
        status, body = await c.request("POST", "/v1/secret/data/cas", json={"data": {"a": 3}})
        assert (status, body) == (400, {"errors": [CAS_REQUIRED]})
        assert (await write(c, "cas", {"a": 3}, cas=2))["version"] == 3
        # ...or by the mount's config, for every key.
        status, _ = await c.request("POST", "/v1/secret/config", json={"cas_required": "true"})
        assert status == 204
        status, body = await c.request("POST", "/v1/secret/data/other", json={"data": {"b": 1}})
        assert (status, body) == (400, {"errors": [CAS_REQUIRED]})
        status, body = await c.request(
            "POST", "/v1/secret/metadata/cas", json={"cas_required": False}
        )
        assert status == 200 and "mandated by backend config" in body["warnings"][0]
        status, body = await c.request("GET", "/v1/secret/config")
        assert body["data"] == {
            "cas_required": True,
            "delete_version_after": "0s",
            "max_versions": 0,
            "metadata_cas_required": False,
        }
    finally:
        await c.close()


async def test_delete_undelete_destroy(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        for i in range(3):
            await write(c, "d", {"i": i})
        status, _ = await c.request("DELETE", "/v1/secret/data/d")
        assert status == 204
        status, body = await c.request("GET", "/v1/secret/data/d")
        assert status == 404 and body["errors"] == []
        assert body["data"]["data"] is None
        meta = body["data"]["metadata"]
        assert meta["version"] == 3 and TIME.match(meta["deletion_time"])
        assert meta["destroyed"] is False

        status, _ = await c.request("POST", "/v1/secret/undelete/d", json={"versions": [3]})
        assert status == 204
        status, body = await c.request("GET", "/v1/secret/data/d")
        assert status == 200 and body["data"]["data"] == {"i": 2}
        assert body["data"]["metadata"]["deletion_time"] == ""

        status, _ = await c.request("POST", "/v1/secret/delete/d", json={"versions": "1,2"})
        assert status == 204
        for v in (1, 2):
            status, body = await c.request("GET", f"/v1/secret/data/d?version={v}")
            assert status == 404 and body["data"]["metadata"]["deletion_time"] != ""

        status, _ = await c.request("POST", "/v1/secret/destroy/d", json={"versions": [1, 3]})
        assert status == 204
        status, body = await c.request("GET", "/v1/secret/data/d")
        assert status == 404 and body["data"]["metadata"]["destroyed"] is True
        status, _ = await c.request("POST", "/v1/secret/undelete/d", json={"versions": [1, 2]})
        assert status == 204
        status, body = await c.request("GET", "/v1/secret/metadata/d")
        versions = body["data"]["versions"]
        assert versions["1"]["destroyed"] is True  # destroyed stays destroyed
        assert versions["2"] == {**versions["2"], "deletion_time": "", "destroyed": False}
        assert versions["3"]["destroyed"] is True
        status, body = await c.request("GET", "/v1/secret/data/d?version=2")
        assert status == 200 and body["data"]["data"] == {"i": 1}

        for route in ("delete", "undelete", "destroy"):
            for bad in (
                {},
                {"versions": []},
                {"versions": "x"},
                {"versions": [-1]},
                {"versions": {"a": 1}},
            ):
                status, body = await c.request("POST", f"/v1/secret/{route}/d", json=bad)
                assert status == 400, (route, bad, body)
            status, _ = await c.request(
                "POST", f"/v1/secret/{route}/missing", json={"versions": [1]}
            )
            assert status == 204
        status, _ = await c.request("DELETE", "/v1/secret/data/missing")
        assert status == 204
    finally:
        await c.close()


async def test_patch_is_a_json_merge_patch(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await write(c, "p", {"a": "1", "b": {"c": "2", "d": "3"}, "e": "4"})
        status, body = await c.request(
            "PATCH",
            "/v1/secret/data/p",
            headers=MERGE,
            json={"data": {"a": "new", "b": {"d": None}, "e": None, "f": "5"}},
        )
        assert status == 200, body
        assert body["data"]["version"] == 2
        status, body = await c.request("GET", "/v1/secret/data/p")
        assert body["data"]["data"] == {"a": "new", "b": {"c": "2"}, "f": "5"}

        status, body = await c.request(
            "PATCH",
            "/v1/secret/data/p",
            headers=MERGE,
            json={"data": {"a": "x"}, "options": {"cas": 1}},
        )
        assert (status, body) == (400, {"errors": [CAS_MISMATCH]})
        status, _ = await c.request(
            "PATCH",
            "/v1/secret/data/p",
            headers=MERGE,
            json={"data": {"a": "x"}, "options": {"cas": 2}},
        )
        assert status == 200
        # The merge-patch content type is required, as in Vault.
        status, _ = await c.request("PATCH", "/v1/secret/data/p", json={"data": {"a": "y"}})
        assert status == 415
        status, _ = await c.request("PATCH", "/v1/secret/data/p", headers=MERGE, json={})
        assert status == 400
        status, _ = await c.request(
            "PATCH", "/v1/secret/data/missing", headers=MERGE, json={"data": {"a": "x"}}
        )
        assert status == 404
        await c.request("DELETE", "/v1/secret/data/p")
        status, _ = await c.request(
            "PATCH", "/v1/secret/data/p", headers=MERGE, json={"data": {"a": "x"}}
        )
        assert status == 404  # the latest version is deleted: nothing to patch
    finally:
        await c.close()


async def test_metadata_max_versions_custom_metadata_list_and_delete(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, _ = await c.request(
            "POST",
            "/v1/secret/metadata/dir/k",
            json={"max_versions": "2", "custom_metadata": {"owner": "ops", "tier": 1}},
        )
        assert status == 204
        status, body = await c.request("GET", "/v1/secret/metadata/dir/k")
        assert body["data"]["current_version"] == 0 and body["data"]["versions"] == {}
        status, _ = await c.request("GET", "/v1/secret/data/dir/k")
        assert status == 404  # metadata alone has no version to read

        for i in range(4):
            w = await write(c, "dir/k", {"i": i})
        assert w["custom_metadata"] == {"owner": "ops", "tier": "1"}
        status, body = await c.request("GET", "/v1/secret/metadata/dir/k")
        meta = body["data"]
        assert meta["current_version"] == 4 and meta["oldest_version"] == 3
        assert sorted(meta["versions"]) == ["3", "4"] and meta["max_versions"] == 2
        status, _ = await c.request("GET", "/v1/secret/data/dir/k?version=1")
        assert status == 404

        status, _ = await c.request(
            "PATCH",
            "/v1/secret/metadata/dir/k",
            headers=MERGE,
            json={"custom_metadata": {"owner": None, "team": "blue"}, "delete_version_after": "1h"},
        )
        assert status == 204
        status, body = await c.request("GET", "/v1/secret/metadata/dir/k")
        assert body["data"]["custom_metadata"] == {"tier": "1", "team": "blue"}
        assert body["data"]["delete_version_after"] == "1h0m0s"
        assert body["data"]["max_versions"] == 2  # untouched by the patch
        status, _ = await c.request(
            "PATCH", "/v1/secret/metadata/nope", headers=MERGE, json={"max_versions": 1}
        )
        assert status == 404

        for bad in (
            {"max_versions": -1},
            {"max_versions": "x"},
            {"delete_version_after": "-1s"},
            {"delete_version_after": "soon"},
            {"custom_metadata": {"k": "v" * 600}},
            {"custom_metadata": "not json"},
            {"custom_metadata": {"k": {"nested": True}}},
            {"cas_required": "maybe"},
        ):
            status, body = await c.request("POST", "/v1/secret/metadata/dir/k", json=bad)
            assert status == 400, (bad, body)

        await write(c, "dir/sub/x", {"a": 1})
        await write(c, "top", {"a": 1})
        status, body = await c.request("LIST", "/v1/secret/metadata/")
        assert body["data"]["keys"] == ["dir/", "top"]
        status, body = await c.request("GET", "/v1/secret/metadata?list=true")
        assert body["data"]["keys"] == ["dir/", "top"]
        status, body = await c.request("LIST", "/v1/secret/metadata/dir")
        assert body["data"]["keys"] == ["k", "sub/"]
        status, body = await c.request("LIST", "/v1/secret/metadata/empty/")
        assert (status, body) == (404, {"errors": []})

        status, _ = await c.request("DELETE", "/v1/secret/metadata/dir/k")
        assert status == 204
        for path in ("metadata/dir/k", "data/dir/k", "data/dir/k?version=4"):
            status, _ = await c.request("GET", f"/v1/secret/{path}")
            assert status == 404, path
        status, body = await c.request("LIST", "/v1/secret/metadata/dir/")
        assert body["data"]["keys"] == ["sub/"]
        status, _ = await c.request("DELETE", "/v1/secret/metadata/dir/k")
        assert status == 204
        # The key starts over at version 1.
        assert (await write(c, "dir/k", {"again": True}))["version"] == 1
    finally:
        await c.close()


async def test_config_and_delete_version_after(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("GET", "/v1/secret/config")
        assert body["data"] == {
            "cas_required": False,
            "delete_version_after": "0s",
            "max_versions": 0,
            "metadata_cas_required": False,
        }
        for bad in (
            {"max_versions": -2},
            {"max_versions": "lots"},
            {"delete_version_after": "1y"},
            {"cas_required": "perhaps"},
        ):
            status, _ = await c.request("POST", "/v1/secret/config", json=bad)
            assert status == 400, bad
        # Long enough for the writes and reads below to land before the versions go, on a
        # loaded machine too; the wait for their deletion polls for it.
        status, _ = await c.request(
            "POST", "/v1/secret/config", json={"max_versions": 3, "delete_version_after": "3s"}
        )
        assert status == 204
        status, body = await c.request("GET", "/v1/secret/config")
        assert body["data"] == {
            "cas_required": False,
            "delete_version_after": "3s",
            "max_versions": 3,
            "metadata_cas_required": False,
        }

        for i in range(5):
            w = await write(c, "ttl", {"i": i})
        assert w["deletion_time"] > w["created_time"]  # scheduled, not yet deleted
        status, body = await c.request("GET", "/v1/secret/metadata/ttl")
        assert sorted(body["data"]["versions"]) == ["3", "4", "5"]  # the mount's max_versions
        status, body = await c.request("GET", "/v1/secret/data/ttl")
        assert status == 200
        deadline = asyncio.get_running_loop().time() + 15
        while status == 200:
            assert asyncio.get_running_loop().time() < deadline, "version 5 was never deleted"
            await asyncio.sleep(0.1)
            status, body = await c.request("GET", "/v1/secret/data/ttl")
        assert status == 404 and body["data"]["data"] is None
        deleted = body["data"]["metadata"]["deletion_time"]
        assert deleted == w["deletion_time"]  # at the time it was scheduled for, not another
        status, _ = await c.request("POST", "/v1/secret/undelete/ttl", json={"versions": [5]})
        status, body = await c.request("GET", "/v1/secret/data/ttl")
        assert status == 200 and body["data"]["data"] == {"i": 4}
    finally:
        await c.close()


async def test_subkeys(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await write(c, "s", {"foo": "abc", "bar": {"baz": "def", "q": {"z": 1}}, "quux": {}})
        await write(c, "s", {"only": "one"})
        status, body = await c.request("GET", "/v1/secret/subkeys/s?version=1")
        assert status == 200
        assert body["data"]["subkeys"] == {
            "foo": None,
            "bar": {"baz": None, "q": {"z": None}},
            "quux": None,
        }
        assert body["data"]["metadata"]["version"] == 1
        status, body = await c.request("GET", "/v1/secret/subkeys/s?version=1&depth=2")
        assert body["data"]["subkeys"]["bar"] == {"baz": None, "q": None}
        status, body = await c.request("GET", "/v1/secret/subkeys/s")
        assert body["data"]["subkeys"] == {"only": None}
        for q in ("depth=-1", "depth=x", "version=x", "version=-3"):
            status, _ = await c.request("GET", f"/v1/secret/subkeys/s?{q}")
            assert status == 400, q
        status, _ = await c.request("GET", "/v1/secret/subkeys/s?version=9")
        assert status == 404
        await c.request("DELETE", "/v1/secret/data/s")
        status, body = await c.request("GET", "/v1/secret/subkeys/s")
        assert status == 404 and body["data"]["subkeys"] is None
        assert body["data"]["metadata"]["deletion_time"] != ""
    finally:
        await c.close()


async def test_malformed_input_is_a_client_error_never_a_500(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        cases: list[tuple[str, str, Any, int]] = [
            ("POST", "data/x", {}, 400),
            ("POST", "data/x", {"data": None}, 400),
            ("POST", "data/x", {"data": "text"}, 400),
            ("POST", "data/x", {"data": [1, 2]}, 400),
            ("POST", "data/x", {"data": {"a": 1}, "options": "cas"}, 400),
            ("POST", "data/x", {"data": {"a": 1}, "options": {"cas": [1]}}, 400),
            ("POST", "data/x", {"data": {"a": 1}, "options": {"cas": {"n": 1}}}, 400),
            ("POST", "data/dir/", {"data": {"a": 1}}, 400),
            ("GET", "data/x?version=1&version=2", None, 400),
            ("GET", "data/x.", None, 404),
            ("LIST", "data/x", None, 405),
            ("PUT", "subkeys/x", {"a": 1}, 405),
            ("GET", "delete/x", None, 405),
            ("POST", "config", {"max_versions": {"a": 1}}, 400),
            ("GET", "nowhere", None, 404),
            ("POST", "config", {"max_versions": 10**30}, 400),
            ("POST", "config", {"delete_version_after": "99999999999999h"}, 400),
            ("POST", "metadata/x", {"max_versions": 2**40}, 400),
            ("POST", "metadata/x", {"delete_version_after": 10**40}, 400),
            ("GET", "data/x?version=99999999999999999999999", None, 404),
            ("POST", "destroy/x", {"versions": [10**30]}, 204),
        ]
        for method, path, body, code in cases:
            status, out = await c.request(method, f"/v1/secret/{path}", json=body)
            assert status == code, (method, path, body, out)
            if code >= 400:
                assert isinstance(out, dict) and isinstance(out.get("errors"), list)
        # A body that is not JSON at all.
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                c.secrets_url + "/v1/secret/data/x",
                data=b"{not json",
                headers={"X-Svc-Token": c.root_token},
            ) as r,
        ):
            assert r.status == 400
        # Large and odd-shaped data round-trips.
        odd = {
            "unicode": "päss wörd ✓",
            "nested": {"list": [1, 2.5, None, True]},
            "big": 10**30,
            "empty": {},
            "k.with/slash": "v",
        }
        await write(c, "odd path/with spaces=and=equals", odd)
        status, body = await c.request("GET", "/v1/secret/data/odd path/with spaces=and=equals")
        assert status == 200 and body["data"]["data"] == odd
        deep: dict[str, Any] = {"leaf": 1}
        for _ in range(900):
            deep = {"n": deep}
        await write(c, "deep", {"a": 1})
        status, _ = await c.request(
            "PATCH", "/v1/secret/data/deep", headers=MERGE, json={"data": deep}
        )
        assert status in (200, 400)
        large = {"blob": "x" * (300 * 1024)}  # above the inline limit: stored apart
        await write(c, "large", large)
        await write(c, "large", {"small": 1})
        status, body = await c.request("GET", "/v1/secret/data/large?version=1")
        assert status == 200 and body["data"]["data"] == large
    finally:
        await c.close()


async def _wait_unsealed(c: Cluster) -> None:
    for _ in range(200):
        if all(
            s.core is not None and not s.core.barrier.sealed and s.core.tables for s in c.secrets
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("a secrets replica stayed sealed")


async def test_concurrent_writers_on_two_replicas_lose_no_version(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        await c.add_secrets_replica()
        await _wait_unsealed(c)
        status, _ = await c.request("POST", "/v1/secret/config", json={"max_versions": 100})
        assert status == 204

        async def direct(replica: int, i: int) -> int:
            core = c.secrets[replica].core
            assert core is not None
            resp = await handle_http(
                core,
                HttpRequest(
                    method="POST",
                    path="/v1/secret/data/race",
                    headers={"x-svc-token": c.root_token},
                    body=b'{"data": {"writer": %d}}' % i,
                ),
            )
            assert resp.status == 200, resp.body
            return int(re.search(rb'"version":(\d+)', resp.body).group(1))  # type: ignore[union-attr]

        async def via_gateway(i: int) -> int:
            return (await write(c, "race", {"writer": i}))["version"]

        jobs = [direct(i % 2, i) for i in range(30)] + [via_gateway(i) for i in range(30, 50)]
        numbers = await asyncio.gather(*jobs)
        assert sorted(numbers) == list(range(1, 51))
        status, body = await c.request("GET", "/v1/secret/metadata/race")
        assert body["data"]["current_version"] == 50
        assert sorted(int(v) for v in body["data"]["versions"]) == list(range(1, 51))
        seen = set()
        for v in range(1, 51):
            status, body = await c.request("GET", f"/v1/secret/data/race?version={v}")
            assert status == 200
            seen.add(body["data"]["data"]["writer"])
        assert seen == set(range(50))  # every writer's data is there, under its own version
    finally:
        await c.close()


async def _raw_bucket(c: Cluster) -> list[tuple[str, bytes]]:
    """Every message in the secrets bucket's stream, as JetStream holds it."""
    nc = await nats.connect(c.settings.nats_url)
    try:
        js = nc.jetstream()
        stream = f"KV_{c.settings.cluster_name}-secrets"
        info = await js.stream_info(stream)
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            out.append((msg.subject or "", msg.data or b""))
        return out
    finally:
        await nc.close()


async def test_nothing_readable_reaches_storage(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    secret = "s3cr3t-plaintext-7f1c"
    try:
        await write(c, "plain/one", {"password": secret})
        await write(c, "plain/one", {"password": secret + "-v2", "note": "other"})
        await c.request(
            "POST",
            "/v1/secret/metadata/plain/one",
            json={"custom_metadata": {"label": secret + "-meta"}},
        )
        await c.request(
            "PATCH",
            "/v1/secret/data/plain/one",
            headers=MERGE,
            json={"data": {"patched": secret + "-patch"}},
        )
        await c.request("POST", "/v1/sys/mounts/old", json={"type": "kv"})
        await c.request("POST", "/v1/old/k", json={"password": secret + "-v1"})
        messages = await _raw_bucket(c)
        assert any(".plain.one" in subject for subject, _ in messages)  # the right bucket
        for _subject, data in messages:
            assert secret.encode() not in data
            assert b"password" not in data
    finally:
        await c.close()


async def test_kv_v2_type_alias(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("POST", "/v1/sys/mounts/versioned", json={"type": "kv-v2"})
        assert status == 204, body
        status, body = await c.request("GET", "/v1/sys/mounts")
        assert body["data"]["versioned/"]["options"] == {"version": "2"}
        status, body = await c.request("POST", "/v1/versioned/data/k", json={"data": {"a": 1}})
        assert status == 200 and body["data"]["version"] == 1
        status, body = await c.request("GET", "/v1/versioned/data/k")
        assert body["data"]["data"] == {"a": 1}
    finally:
        await c.close()


async def test_acl_create_is_not_update(nats_url: str) -> None:
    """The existence check makes a first write `create` and later ones `update`, as Vault's
    policies expect; data/ and metadata/ are separate paths for the ACL."""
    c = await start_cluster(nats_url)
    try:
        policy = (
            'path "secret/data/team/*" { capabilities = ["create", "read"] }\n'
            'path "secret/metadata/*" { capabilities = ["list"] }'
        )
        status, _ = await c.request("POST", "/v1/sys/policies/acl/writer", json={"policy": policy})
        assert status == 204
        status, body = await c.request(
            "POST", "/v1/auth/token/create", json={"policies": ["writer"]}
        )
        token = body["auth"]["client_token"]
        status, _ = await c.request(
            "POST", "/v1/secret/data/team/a", token=token, json={"data": {"a": 1}}
        )
        assert status == 200
        status, _ = await c.request(
            "POST", "/v1/secret/data/team/a", token=token, json={"data": {"a": 2}}
        )
        assert status == 403
        status, body = await c.request("GET", "/v1/secret/data/team/a", token=token)
        assert status == 200 and body["data"]["data"] == {"a": 1}
        status, body = await c.request("LIST", "/v1/secret/metadata/team", token=token)
        assert status == 200 and body["data"]["keys"] == ["a"]
        status, _ = await c.request("GET", "/v1/secret/metadata/team/a", token=token)
        assert status == 403
    finally:
        await c.close()

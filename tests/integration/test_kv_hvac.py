"""hvac, unmodified, against the KV engine (v1 and v2) through the gateway. hvac is synchronous
and the services run in this test's event loop, so every call goes through a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import hvac
import hvac.exceptions
import pytest

from tests.harness import start_cluster

pytestmark = pytest.mark.nats

T = TypeVar("T")


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


async def test_hvac_kv_v2(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        client = hvac.Client(url=c.secrets_url, token=c.root_token)
        kv = client.secrets.kv.v2

        await call(kv.configure, max_versions=20, mount_point="secret")
        conf = await call(kv.read_configuration, mount_point="secret")
        assert conf["data"]["max_versions"] == 20

        out = await call(
            kv.create_or_update_secret, path="app/db", secret={"user": "admin", "password": "pw1"}
        )
        assert out["data"]["version"] == 1
        out = await call(
            kv.create_or_update_secret,
            path="app/db",
            secret={"user": "admin", "password": "pw2"},
            cas=1,
        )
        assert out["data"]["version"] == 2
        with pytest.raises(hvac.exceptions.InvalidRequest, match="check-and-set"):
            await call(kv.create_or_update_secret, path="app/db", secret={"x": 1}, cas=1)

        read = await call(kv.read_secret_version, path="app/db", raise_on_deleted_version=True)
        assert read["data"]["data"] == {"user": "admin", "password": "pw2"}
        old = await call(
            kv.read_secret_version, path="app/db", version=1, raise_on_deleted_version=True
        )
        assert old["data"]["data"]["password"] == "pw1"

        patched = await call(kv.patch, path="app/db", secret={"password": "pw3"})
        assert patched["data"]["version"] == 3
        read = await call(kv.read_secret_version, path="app/db", raise_on_deleted_version=True)
        assert read["data"]["data"] == {"user": "admin", "password": "pw3"}

        await call(kv.delete_latest_version_of_secret, path="app/db")
        with pytest.raises(hvac.exceptions.InvalidPath):
            await call(kv.read_secret_version, path="app/db", raise_on_deleted_version=True)
        # hvac reads the deleted version's metadata out of the 404 body.
        deleted = await call(kv.read_secret_version, path="app/db", raise_on_deleted_version=False)
        assert deleted["data"]["data"] is None
        assert deleted["data"]["metadata"]["deletion_time"] != ""

        await call(kv.undelete_secret_versions, path="app/db", versions=[3])
        read = await call(kv.read_secret_version, path="app/db", raise_on_deleted_version=True)
        assert read["data"]["metadata"]["version"] == 3

        await call(kv.delete_secret_versions, path="app/db", versions=[2])
        await call(kv.destroy_secret_versions, path="app/db", versions=[1])
        meta = await call(kv.read_secret_metadata, path="app/db")
        versions = meta["data"]["versions"]
        assert versions["1"]["destroyed"] is True
        assert versions["2"]["deletion_time"] != "" and versions["2"]["destroyed"] is False
        assert meta["data"]["current_version"] == 3

        await call(
            kv.update_metadata,
            path="app/db",
            max_versions=5,
            cas_required=False,
            custom_metadata={"owner": "team-a"},
        )
        meta = await call(kv.read_secret_metadata, path="app/db")
        assert meta["data"]["max_versions"] == 5
        assert meta["data"]["custom_metadata"] == {"owner": "team-a"}

        await call(kv.create_or_update_secret, path="app/cache", secret={"k": "v"})
        await call(kv.create_or_update_secret, path="root-key", secret={"k": "v"})
        listed = await call(kv.list_secrets, path="app")
        assert listed["data"]["keys"] == ["cache", "db"]
        listed = await call(kv.list_secrets, path="")
        assert listed["data"]["keys"] == ["app/", "root-key"]
        with pytest.raises(hvac.exceptions.InvalidPath):
            await call(kv.list_secrets, path="nothing-here")

        await call(kv.delete_metadata_and_all_versions, path="app/db")
        with pytest.raises(hvac.exceptions.InvalidPath):
            await call(kv.read_secret_metadata, path="app/db")
    finally:
        await c.close()


async def test_hvac_kv_v1(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        client = hvac.Client(url=c.secrets_url, token=c.root_token)
        await call(
            client.sys.enable_secrets_engine,
            backend_type="kv",
            path="kv1",
            options={"version": "1"},
        )
        kv = client.secrets.kv.v1

        await call(
            kv.create_or_update_secret, path="svc/api", secret={"key": "k1"}, mount_point="kv1"
        )
        await call(
            kv.create_or_update_secret,
            path="svc/web",
            secret={"key": "k2", "ttl": "1m"},
            mount_point="kv1",
        )
        read = await call(kv.read_secret, path="svc/api", mount_point="kv1")
        assert read["data"] == {"key": "k1"} and read["lease_duration"] == 2764800
        read = await call(kv.read_secret, path="svc/web", mount_point="kv1")
        assert read["lease_duration"] == 60
        listed = await call(kv.list_secrets, path="svc", mount_point="kv1")
        assert listed["data"]["keys"] == ["api", "web"]
        await call(kv.delete_secret, path="svc/api", mount_point="kv1")
        with pytest.raises(hvac.exceptions.InvalidPath):
            await call(kv.read_secret, path="svc/api", mount_point="kv1")
        # The generic client helpers: None on 404, as hvac users expect.
        assert await call(client.read, "kv1/svc/api") is None
        assert (await call(client.read, "kv1/svc/web"))["data"]["key"] == "k2"
    finally:
        await c.close()

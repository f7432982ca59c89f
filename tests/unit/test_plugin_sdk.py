"""The plugin SDK's dispatch, without a bus: routes, create/update existence, leases, errors."""

from __future__ import annotations

from typing import Any

from shared.plugin_sdk import (
    LeaseInfo,
    Plugin,
    PluginCall,
    PluginError,
    PluginRequest,
    Reply,
    Storage,
)


class MemoryStorage(Storage):
    def __init__(self) -> None:
        self.items: dict[str, bytes] = {}

    async def get(self, key: str) -> bytes | None:
        return self.items.get(key)

    async def put(self, key: str, value: bytes) -> None:
        self.items[key] = value

    async def delete(self, key: str) -> None:
        self.items.pop(key, None)

    async def list(self, prefix: str = "") -> list[str]:
        return sorted(k[len(prefix) :] for k in self.items if k.startswith(prefix))


def make_plugin() -> Plugin:
    plugin = Plugin("t", help="test plugin")

    @plugin.route("items/{name}", "read")
    async def read(req: PluginRequest) -> dict[str, Any]:
        raw = await req.storage.get(req.captures["name"])
        if raw is None:
            raise PluginError(404, "no such item")
        return {"value": raw.decode()}

    @plugin.route("items/{name}", "write", synopsis="items")
    async def put(req: PluginRequest) -> None:
        await req.storage.put(req.captures["name"], str(req.data["value"]).encode())

    @plugin.exists("items/{name}")
    async def exists(req: PluginRequest) -> bool:
        return await req.storage.get(req.captures["name"]) is not None

    @plugin.route("boom", "read")
    async def boom(req: PluginRequest) -> None:
        raise RuntimeError("secret internals")

    @plugin.route("leased", "read")
    async def leased(req: PluginRequest) -> Reply:
        return Reply(data={"x": 1}, lease=LeaseInfo(ttl=60, secret_type="s", internal={"a": 1}))

    async def revoke(req: PluginRequest) -> None:
        await req.storage.put("revoked", str(req.internal["a"]).encode())

    async def renew(req: PluginRequest) -> int:
        return req.increment * 2

    plugin.secret("s", revoke, renew)
    return plugin


def call(op: str, template: str, **kw: Any) -> PluginCall:
    return PluginCall(op=op, path=template, template=template, **kw)


async def test_info_lists_paths_and_secret_types() -> None:
    info = make_plugin().info()
    spec = next(p for p in info.paths if p.template == "items/{name}")
    assert spec.operations == ["read", "create", "update"] and spec.has_exists
    assert spec.synopsis == "items" and info.secret_types == ["s"]


async def test_dispatch() -> None:
    plugin, st = make_plugin(), MemoryStorage()
    caps = {"name": "a"}
    reply = await plugin.handle(call("exists", "items/{name}", captures=caps), st)
    assert reply.exists is False
    reply = await plugin.handle(
        call("create", "items/{name}", captures=caps, data={"value": 5}), st
    )
    assert reply.status == 0 and reply.data is None
    reply = await plugin.handle(call("exists", "items/{name}", captures=caps), st)
    assert reply.exists is True
    reply = await plugin.handle(call("read", "items/{name}", captures=caps), st)
    assert reply.data == {"value": "5"}
    reply = await plugin.handle(call("read", "items/{name}", captures={"name": "b"}), st)
    assert (reply.status, reply.error) == (404, "no such item")
    reply = await plugin.handle(call("delete", "items/{name}", captures=caps), st)
    assert reply.status == 405
    reply = await plugin.handle(call("read", "nowhere"), st)
    assert reply.status == 404
    reply = await plugin.handle(call("read", "boom"), st)
    assert reply.status == 500 and "secret" not in reply.error


async def test_leases_revoke_and_renew() -> None:
    plugin, st = make_plugin(), MemoryStorage()
    reply = await plugin.handle(call("read", "leased"), st)
    assert reply.lease is not None and reply.lease.secret_type == "s"
    reply = await plugin.handle(PluginCall(op="revoke", secret_type="s", internal={"a": 7}), st)
    assert reply.status == 0 and st.items["revoked"] == b"7"
    reply = await plugin.handle(PluginCall(op="renew", secret_type="s", increment=30), st)
    assert reply.ttl == 60
    reply = await plugin.handle(PluginCall(op="revoke", secret_type="other"), st)
    assert reply.status == 400

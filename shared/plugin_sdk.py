"""The plugin SDK: what an external secrets engine imports to serve its paths over the bus.

Trellis starts a registered plugin (after checking its SHA-256) with two environment variables:
`TRELLIS_NATS_URL` and `TRELLIS_PLUGIN_SUBJECT`, a subject prefix private to one mount. The
plugin answers on `<prefix>.hello` (what paths it serves) and `<prefix>.call` (one request);
Trellis answers on `<prefix>.storage`, the mount's encrypted storage, so a plugin keeps no
state of its own and any number of copies can serve one mount. A plugin exits when its stdin
closes (Trellis went away) or on SIGTERM.

    plugin = Plugin("echo", help="Echoes what it is given.")

    @plugin.route("echo/{name}", "update")
    async def echo(req: PluginRequest) -> dict:
        return {"name": req.captures["name"], **req.data}

    run(plugin)

This module depends on nats-py and msgspec only, so a plugin needs nothing else of Trellis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import stat
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

PROTOCOL = 1
# About 30 s without the bus and a plugin gives up (Trellis restarts it when needed).
RECONNECT_ATTEMPTS = 60
OPERATIONS = ("read", "list", "create", "update", "delete", "patch")

# Environment Trellis sets for a plugin process.
ENV_NATS_URL = "TRELLIS_NATS_URL"
ENV_SUBJECT = "TRELLIS_PLUGIN_SUBJECT"
# A 0600 JSON file {"user", "password"}: the plugin's NATS user, limited to plugin subjects.
ENV_CREDENTIALS = "TRELLIS_PLUGIN_NATS_CREDENTIALS"


# ---- wire types (msgpack), shared by Trellis and the plugin -----------------------------------
class PathSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One path a plugin serves: a Trellis path template (`roles/{name}`, `data/{path*}`)."""

    template: str
    operations: list[str]
    synopsis: str = ""
    description: str = ""
    # The plugin answers op "exists", so writes are told apart as create or update.
    has_exists: bool = False


class Hello(msgspec.Struct, kw_only=True, omit_defaults=True):
    protocol: int = PROTOCOL


class PluginInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    protocol: int = PROTOCOL
    name: str = ""
    help: str = ""
    paths: list[PathSpec] = []
    # Kinds of leased secrets the plugin can revoke (op "revoke") and renew (op "renew").
    secret_types: list[str] = []


class PluginCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    op: str  # an OPERATIONS entry, or "exists", "revoke", "renew"
    path: str = ""  # relative to the mount
    template: str = ""  # the declared template that matched
    captures: dict[str, str] = {}
    data: dict[str, Any] = {}
    mount_path: str = ""
    namespace: str = ""
    request_id: str = ""
    # Leases: the secret type and the internal data the plugin returned with the secret.
    secret_type: str = ""
    internal: dict[str, Any] = {}
    increment: int = 0


class LeaseInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    ttl: int
    max_ttl: int = 0
    renewable: bool = True
    secret_type: str = ""
    internal: dict[str, Any] = {}


class PluginReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    status: int = 0  # 0: 200 with data, 204 without
    data: dict[str, Any] | None = None
    warnings: list[str] = []
    error: str = ""  # with a status >= 400
    lease: LeaseInfo | None = None
    exists: bool = False  # answer to op "exists"
    ttl: int = 0  # answer to op "renew"


class StorageCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    op: str  # get, put, delete, list
    key: str = ""
    value: bytes = b""


class StorageReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    found: bool = False
    value: bytes = b""
    keys: list[str] = []
    error: str = ""


def call_subject(prefix: str) -> str:
    return f"{prefix}.call"


def hello_subject(prefix: str) -> str:
    return f"{prefix}.hello"


def storage_subject(prefix: str) -> str:
    return f"{prefix}.storage"


# ---- the plugin side ------------------------------------------------------------------------
class PluginError(Exception):
    """Raise in a handler to answer with this status and message (`errors` body)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Storage:
    """The mount's storage, encrypted by Trellis's barrier; keys are relative to the mount."""

    def __init__(self, nc: Any, prefix: str, timeout: float = 10.0) -> None:
        self._nc = nc
        self._subject = storage_subject(prefix)
        self._timeout = timeout

    async def _call(self, call: StorageCall) -> StorageReply:
        msg = await self._nc.request(self._subject, _enc.encode(call), timeout=self._timeout)
        reply = _storage_reply.decode(msg.data)
        if reply.error:
            raise PluginError(500, f"storage: {reply.error}")
        return reply

    async def get(self, key: str) -> bytes | None:
        reply = await self._call(StorageCall(op="get", key=key))
        return reply.value if reply.found else None

    async def put(self, key: str, value: bytes) -> None:
        await self._call(StorageCall(op="put", key=key, value=value))

    async def delete(self, key: str) -> None:
        await self._call(StorageCall(op="delete", key=key))

    async def list(self, prefix: str = "") -> list[str]:
        """Immediate children of `prefix`; folders end in '/'."""
        return (await self._call(StorageCall(op="list", key=prefix))).keys


@dataclass
class PluginRequest:
    op: str
    path: str
    captures: dict[str, str]
    data: dict[str, Any]
    storage: Storage
    mount_path: str = ""
    namespace: str = ""
    secret_type: str = ""
    internal: dict[str, Any] = field(default_factory=dict)
    increment: int = 0


@dataclass
class Reply:
    """A full answer; a handler may also return a dict (the `data`) or None (204)."""

    data: dict[str, Any] | None = None
    status: int = 0
    warnings: list[str] = field(default_factory=list)
    lease: LeaseInfo | None = None


Handler = Callable[[PluginRequest], Awaitable["Reply | dict[str, Any] | None"]]
ExistsHandler = Callable[[PluginRequest], Awaitable[bool]]
RevokeHandler = Callable[[PluginRequest], Awaitable[None]]
RenewHandler = Callable[[PluginRequest], Awaitable[int]]


@dataclass
class _Route:
    spec: PathSpec
    handlers: dict[str, Handler]
    exists: ExistsHandler | None = None


class Plugin:
    def __init__(self, name: str, help: str = "") -> None:
        self.name = name
        self.help = help
        self._routes: dict[str, _Route] = {}
        self._revoke: dict[str, RevokeHandler] = {}
        self._renew: dict[str, RenewHandler] = {}

    def route(self, template: str, *ops: str, synopsis: str = "") -> Callable[[Handler], Handler]:
        """Serve `ops` ("read", "update", ...) on `template`; "write" means create and update."""
        expanded = [o for op in ops for o in (("create", "update") if op == "write" else (op,))]
        for op in expanded:
            if op not in OPERATIONS:
                raise ValueError(f"unknown operation {op!r}")

        def register(handler: Handler) -> Handler:
            route = self._routes.setdefault(
                template, _Route(PathSpec(template=template, operations=[]), {})
            )
            for op in expanded:
                route.handlers[op] = handler
                if op not in route.spec.operations:
                    route.spec.operations.append(op)
            if synopsis:
                route.spec.synopsis = synopsis
            return handler

        return register

    def exists(self, template: str) -> Callable[[ExistsHandler], ExistsHandler]:
        """Tell create from update on `template` (declare its routes first)."""

        def register(handler: ExistsHandler) -> ExistsHandler:
            route = self._routes[template]
            route.exists = handler
            route.spec.has_exists = True
            return handler

        return register

    def secret(
        self, secret_type: str, revoke: RevokeHandler, renew: RenewHandler | None = None
    ) -> None:
        """A kind of leased secret: `revoke` runs when its lease ends."""
        self._revoke[secret_type] = revoke
        if renew is not None:
            self._renew[secret_type] = renew

    def info(self) -> PluginInfo:
        return PluginInfo(
            name=self.name,
            help=self.help,
            paths=[r.spec for r in self._routes.values()],
            secret_types=sorted(self._revoke),
        )

    async def handle(self, call: PluginCall, storage: Storage) -> PluginReply:
        req = PluginRequest(
            op=call.op,
            path=call.path,
            captures=dict(call.captures),
            data=dict(call.data),
            storage=storage,
            mount_path=call.mount_path,
            namespace=call.namespace,
            secret_type=call.secret_type,
            internal=dict(call.internal),
            increment=call.increment,
        )
        try:
            if call.op == "revoke":
                fn = self._revoke.get(call.secret_type)
                if fn is None:
                    raise PluginError(400, f"unknown secret type {call.secret_type!r}")
                await fn(req)
                return PluginReply()
            if call.op == "renew":
                renew = self._renew.get(call.secret_type)
                if renew is None:
                    raise PluginError(400, f"secret type {call.secret_type!r} is not renewable")
                return PluginReply(ttl=await renew(req))
            route = self._routes.get(call.template)
            if route is None:
                raise PluginError(404, f"unsupported path: {call.path}")
            if call.op == "exists":
                return PluginReply(exists=bool(route.exists and await route.exists(req)))
            handler = route.handlers.get(call.op)
            if handler is None:
                raise PluginError(405, "unsupported operation")
            result = await handler(req)
        except PluginError as exc:
            return PluginReply(status=exc.status, error=exc.message)
        except Exception as exc:  # a plugin bug: report it without the traceback
            print(f"plugin {self.name}: {call.op} {call.path} failed: {exc!r}", file=sys.stderr)
            return PluginReply(status=500, error="internal error in plugin")
        if isinstance(result, Reply):
            return PluginReply(
                status=result.status, data=result.data, warnings=result.warnings, lease=result.lease
            )
        return PluginReply(data=result)


_enc = msgspec.msgpack.Encoder()
_call_dec = msgspec.msgpack.Decoder(PluginCall)
_storage_reply = msgspec.msgpack.Decoder(StorageReply)


def _nats_auth() -> dict[str, str]:
    """The plugin NATS user Trellis named in the environment (none on an open test bus)."""
    creds = os.environ.get(ENV_CREDENTIALS)
    if not creds:
        return {}
    with open(creds) as f:
        data = json.load(f)
    return {"user": data["user"], "password": data["password"]}


async def serve(plugin: Plugin, nats_url: str, prefix: str) -> None:
    """Serve until stdin closes or a signal arrives."""
    import nats  # imported here so `import shared.plugin_sdk` stays cheap for Trellis

    stop = asyncio.Event()
    last_error = 0.0

    async def on_error(err: Exception) -> None:
        # One line now and then, not a traceback per reconnect attempt.
        nonlocal last_error
        if time.monotonic() - last_error > 10:
            last_error = time.monotonic()
            print(f"plugin {plugin.name}: nats: {err or type(err).__name__}", file=sys.stderr)

    async def on_closed() -> None:
        stop.set()  # the bus is gone for good (reconnects exhausted): so are we

    auth = _nats_auth()
    nc = await nats.connect(
        nats_url,
        name=f"plugin-{plugin.name}",
        **auth,
        max_reconnect_attempts=RECONNECT_ATTEMPTS,
        reconnect_time_wait=0.5,
        error_cb=on_error,
        closed_cb=on_closed,
    )
    storage = Storage(nc, prefix)
    info = _enc.encode(plugin.info())
    tasks: set[asyncio.Task[None]] = set()

    async def on_hello(msg: Any) -> None:
        await msg.respond(info)

    async def answer(msg: Any) -> None:
        try:
            reply = await plugin.handle(_call_dec.decode(msg.data), storage)
        except msgspec.DecodeError as exc:
            reply = PluginReply(status=400, error=f"bad call: {exc}")
        with contextlib.suppress(Exception):
            await msg.respond(_enc.encode(reply))

    async def on_call(msg: Any) -> None:
        # Handlers run concurrently: one slow call must not hold up the others.
        task = asyncio.create_task(answer(msg))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    await nc.subscribe(hello_subject(prefix), queue="plugin", cb=on_hello)
    await nc.subscribe(call_subject(prefix), queue="plugin", cb=on_call)
    # nats-py writes a flush's PING ahead of SUBs still pending: send those first, so that the
    # PONG proves the server has them before the host is told this plugin answers.
    await nc._flush_pending(force_flush=True)
    await nc.flush()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(_watch_stdin(stop))
    await stop.wait()
    watcher.cancel()
    with contextlib.suppress(Exception):
        await nc.drain()


async def _watch_stdin(stop: asyncio.Event) -> None:
    """Trellis holds our stdin open; EOF means it is gone and we must not outlive it."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError):
        return
    # Trellis gives a pipe or a socket pair (asyncio's choice); a terminal or /dev/null means
    # we were started by hand: rely on signals alone.
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass
    stop.set()


def run(plugin: Plugin) -> None:
    """The plugin's main: read the environment Trellis set, then serve."""
    url = os.environ.get(ENV_NATS_URL)
    prefix = os.environ.get(ENV_SUBJECT)
    if not url or not prefix:
        sys.exit(
            f"{plugin.name}: this is a Trellis plugin; register it in the plugin catalog "
            f"and mount it ({ENV_NATS_URL} and {ENV_SUBJECT} are not set)"
        )
    asyncio.run(serve(plugin, url, prefix))

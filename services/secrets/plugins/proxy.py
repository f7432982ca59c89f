"""The backend of a plugin mount: paths come from the plugin's hello, and each request is
forwarded over the bus to the plugin process; the plugin's storage calls are answered here
from the mount's encrypted view."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
import nats.errors
import structlog

from services.secrets.errors import SecretsError, upstream
from services.secrets.framework.backend import Backend, SecretType
from services.secrets.framework.path import Op, Operation, Path
from services.secrets.framework.request import LeaseSpec, Request, Response
from shared.plugin_sdk import (
    PluginCall,
    PluginInfo,
    PluginReply,
    StorageCall,
    StorageReply,
    call_subject,
)

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.mounts import MountEntry

log = structlog.get_logger("plugins")
# Seconds a plugin nobody answers for, that still looks alive, may take to be seen to have died.
SETTLE = 2.0

_enc = msgspec.msgpack.Encoder()
_reply = msgspec.msgpack.Decoder(PluginReply)
_storage_call = msgspec.msgpack.Decoder(StorageCall)
_OPS = {op.value: op for op in Op}


class PluginBackend(Backend):
    type_name = "plugin"

    def __init__(
        self,
        core: Any,
        mount: MountEntry | None,
        storage: BarrierView,
        info: PluginInfo,
        prefix: str,
        ensure_running: Callable[..., Awaitable[None]],
        on_cleanup: Callable[[], Awaitable[None]],
    ) -> None:
        self.info = info
        self.prefix = prefix
        self.ensure_running = ensure_running
        self.on_cleanup = on_cleanup
        super().__init__(core, mount, storage)
        self.help_text = info.help
        for st in info.secret_types:
            self.secret_types[st] = SecretType(revoke=self._revoker(st), renew=self._renewer(st))

    def build_paths(self) -> list[Path]:
        out: list[Path] = []
        for spec in self.info.paths:
            ops = {
                _OPS[o]: Operation(self._forward, spec.synopsis)
                for o in spec.operations
                if o in _OPS
            }
            if ops:
                out.append(
                    Path(
                        spec.template,
                        ops,
                        synopsis=spec.synopsis,
                        description=spec.description,
                        arbitrary_input=True,
                        exists=self._exists if spec.has_exists else None,
                    )
                )
        return out

    async def cleanup(self) -> None:
        await self.on_cleanup()

    # ---- forwarding -------------------------------------------------------------------------
    def _call(self, req: Request, op: str) -> PluginCall:
        for p in self.paths:
            for template, rx in zip(p.templates, p.regexes, strict=True):
                m = rx.fullmatch(req.path)
                if m:
                    captures = {k: v for k, v in m.groupdict().items() if v is not None}
                    return PluginCall(
                        op=op,
                        path=req.path,
                        template=template,
                        captures=captures,
                        data=req.data,
                        mount_path=req.mount_path,
                        namespace=req.namespace.path,
                        request_id=req.request_id,
                    )
        return PluginCall(op=op, path=req.path, data=req.data, mount_path=req.mount_path)

    async def send(self, call: PluginCall) -> PluginReply:
        await self.ensure_running()
        timeout = max(1.0, self.core.settings.request_timeout - 5)
        try:
            msg = await self._request(call, timeout)
        except nats.errors.NoRespondersError:
            # Killed a moment ago, its exit not seen yet: once it is, start it again (the
            # binary checked again) and ask once more.
            await self.ensure_running(settle=SETTLE)
            try:
                msg = await self._request(call, timeout)
            except nats.errors.NoRespondersError:
                raise upstream(
                    f"plugin {self.mount.type if self.mount else ''!r} is not running"
                ) from None
        try:
            return _reply.decode(msg.data)
        except msgspec.DecodeError:
            raise upstream("the plugin sent an unreadable reply") from None

    async def _request(self, call: PluginCall, timeout: float) -> Any:
        try:
            return await self.core.bus.nc.request(
                call_subject(self.prefix), _enc.encode(call), timeout=timeout
            )
        except nats.errors.TimeoutError:
            raise SecretsError(504, f"the plugin did not answer within {timeout:g}s") from None

    @staticmethod
    def _raise_for(reply: PluginReply) -> None:
        if reply.status >= 500:  # the plugin is a third party to the caller
            raise upstream(f"plugin error: {reply.error or 'internal error'}")
        if reply.status >= 400:
            raise SecretsError(reply.status, reply.error)

    async def _forward(self, req: Request, _fields: object) -> Response:
        reply = await self.send(self._call(req, req.op.value))
        self._raise_for(reply)
        lease = None
        if reply.lease is not None:
            lease = LeaseSpec(
                ttl=reply.lease.ttl,
                max_ttl=reply.lease.max_ttl,
                renewable=reply.lease.renewable,
                internal=reply.lease.internal,
                secret_type=reply.lease.secret_type,
            )
        return Response(
            data=reply.data, warnings=list(reply.warnings), lease=lease, status=reply.status or None
        )

    async def _exists(self, req: Request, _fields: object) -> bool:
        reply = await self.send(self._call(req, "exists"))
        self._raise_for(reply)
        return reply.exists

    def _revoker(self, secret_type: str) -> Callable[[dict[str, Any]], Awaitable[None]]:
        async def revoke(internal: dict[str, Any]) -> None:
            reply = await self.send(
                PluginCall(op="revoke", secret_type=secret_type, internal=internal)
            )
            self._raise_for(reply)

        return revoke

    def _renewer(self, secret_type: str) -> Callable[[dict[str, Any], int], Awaitable[int]]:
        async def renew(internal: dict[str, Any], ttl: int) -> int:
            reply = await self.send(
                PluginCall(op="renew", secret_type=secret_type, internal=internal, increment=ttl)
            )
            self._raise_for(reply)
            return reply.ttl or ttl

        return renew

    # ---- the plugin's storage ----------------------------------------------------------------
    async def on_storage(self, msg: Any) -> None:
        """Answer one storage call; always reply, never raise into nats-py."""
        try:
            call = _storage_call.decode(msg.data)
            reply = await self._storage(call)
        except SecretsError as exc:
            reply = StorageReply(error=exc.message)
        except Exception:
            log.exception("plugin storage call failed", subject=msg.subject)
            reply = StorageReply(error="internal error")
        with contextlib.suppress(Exception):
            await msg.respond(_enc.encode(reply))

    async def _storage(self, call: StorageCall) -> StorageReply:
        if not call.key and call.op != "list":
            return StorageReply(error="a key is required")
        if call.op == "get":
            value = await self.storage.get(call.key)
            return StorageReply(found=value is not None, value=value or b"")
        if call.op == "put":
            await self.storage.put(call.key, call.value)
            return StorageReply()
        if call.op == "delete":
            await self.storage.delete(call.key)
            return StorageReply()
        if call.op == "list":
            prefix = call.key if not call.key or call.key.endswith("/") else call.key + "/"
            return StorageReply(keys=await self.storage.list(prefix))
        return StorageReply(error=f"unknown storage operation {call.op!r}")

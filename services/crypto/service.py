"""The crypto worker process. `processes=N` starts N-1 more worker processes beside this one
(one per core); each joins the crypto queue group and runs one op at a time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid

import msgspec
import structlog

from services.crypto.keypool import POOL
from services.crypto.messages import CryptoReply, CryptoRequest
from services.crypto.ops import CryptoFailure, load_all, run_local
from services.crypto.shared_args import SharedStore, UnknownRef
from shared import subjects
from shared.bus import Bus, CallContext
from shared.cluster_identity import load_identity
from shared.control import CRYPTO, ControlBox, Rejected
from shared.errors import ServiceError
from shared.settings import Settings

log = structlog.get_logger("crypto")


def run_one(req: CryptoRequest, store: SharedStore) -> CryptoReply:
    try:
        args = store.resolve(req.ref, req.shared, req.own) if req.ref or req.shared else req.args
    except UnknownRef:
        return CryptoReply(
            error_code=503,
            error_message="the worker lost the call's shared arguments",
            unknown_ref=True,
        )
    except msgspec.DecodeError:
        return CryptoReply(error_code=400, error_message="malformed shared arguments")
    try:
        # Inline, not in a thread: a process runs one op at a time anyway, and a thread hop made
        # the loop thread (busy receiving the next requests) fight the op for the GIL: EC
        # issuing ran at half speed under load.
        return CryptoReply(result=run_local(req.op, args))
    except CryptoFailure as exc:
        return CryptoReply(error_code=400, error_message=str(exc))


class CryptoService:
    name = "crypto"

    def __init__(self, bus: Bus, settings: Settings, processes: int = 1) -> None:
        self.bus = bus
        self.settings = settings
        self.processes = max(1, processes)
        self.children: list[subprocess.Popen[bytes]] = []
        self._ready = False
        self._refill: asyncio.Task[None] | None = None
        identity = load_identity(settings)
        if identity.crypto_key is None:
            raise ServiceError(500, "the crypto worker needs its channel key (crypto_key_file)")
        self.box = ControlBox(identity.crypto_key, CRYPTO, window=120.0)
        self.shared = SharedStore()

    @property
    def ready(self) -> bool:
        return self._ready

    async def start(self) -> None:
        load_all()
        self._refill = asyncio.create_task(POOL.run(), name="rsa-key-pool")

        subject = subjects.CRYPTO.on(self.settings.cluster_name)
        box, store = self.box, self.shared
        worker = uuid.uuid4().hex[:16]

        async def handle(sealed: bytes, ctx: CallContext) -> bytes:
            # Obey only the secrets cluster; answer sealed to the one request.
            try:
                req = msgspec.msgpack.decode(box.open(subject, sealed), type=CryptoRequest)
            except (Rejected, msgspec.DecodeError) as exc:
                log.warning("crypto command refused", reason=str(exc))
                raise ServiceError(403, "crypto commands are accepted from secrets only") from None
            if req.batch:
                reply = CryptoReply(batch=[run_one(r, store) for r in req.batch])
            else:
                reply = run_one(req, store)
            reply.worker = worker
            return box.seal(
                ControlBox.reply_context(subject, sealed), msgspec.msgpack.encode(reply)
            )

        # One op at a time per process: the work is CPU-bound, more would only queue in-process
        # instead of on the bus where another worker could take it.
        await self.bus.serve(
            subject,
            handle,
            bytes,
            queue=subjects.CRYPTO.queue,
            concurrency=1,
        )
        for _ in range(self.processes - 1):
            self.children.append(
                subprocess.Popen(  # noqa: ASYNC220 - spawned once, never awaited
                    [
                        sys.executable,
                        "-m",
                        "services.cli",
                        "run",
                        "crypto",
                        "--processes",
                        "1",
                        "--health-addr",
                        "",
                    ],
                    env={**os.environ, **self._child_env()},
                )
            )
        self._ready = True

    def _child_env(self) -> dict[str, str]:
        """What a worker process needs to join the same cluster as this one."""
        s = self.settings
        env = {
            "TRELLIS_NATS_URL": s.nats_url,
            "TRELLIS_CLUSTER_NAME": s.cluster_name,
            "TRELLIS_LOG_JSON": str(s.log_json).lower(),
        }
        for name in (
            "nats_user",
            "nats_password",
            "nats_credentials_file",
            "nats_tls_ca",
            "nats_tls_cert",
            "nats_tls_key",
            "cluster_public_key",
            "cluster_key_file",
            "crypto_key_file",
        ):
            if getattr(s, name):
                env[f"TRELLIS_{name.upper()}"] = getattr(s, name)
        if s.insecure_bus:
            env["TRELLIS_INSECURE_BUS"] = "true"
        return env

    async def stop(self) -> None:
        self._ready = False
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refill
        for child in self.children:
            with contextlib.suppress(ProcessLookupError):
                child.terminate()
        for child in self.children:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(child.wait, 10)

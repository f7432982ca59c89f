"""`tidy`: remove certificates (and revocation records) that expired more than `safety_buffer`
ago, then re-sign the CRLs they left. Runs in the background; `tidy-status` reports progress
(kept in storage so every replica can answer), `tidy-cancel` stops it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import msgspec
import structlog

from services.secrets.engines.pki.models import CertEntry, RevokedCert, TidyStatus
from services.secrets.engines.pki.pem import rfc3339, short_duration
from services.secrets.errors import bad_request
from services.secrets.framework.fields import Duration
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend

log = structlog.get_logger("pki")
STATUS_KEY = "tidy/status"


class TidyFields(msgspec.Struct, kw_only=True):
    tidy_cert_store: bool = False
    tidy_revoked_certs: bool = False
    tidy_revoked_cert_issuer_associations: bool = False
    tidy_expired_issuers: bool = False
    safety_buffer: Duration = 72 * 3600
    issuer_safety_buffer: Duration = 365 * 24 * 3600
    pause_duration: str = "0s"


def status_data(s: TidyStatus) -> dict[str, object]:
    data: dict[str, object] = msgspec.to_builtins(s)
    data["safety_buffer"] = s.safety_buffer
    return data


class Tidier:
    def __init__(self, backend: PKIBackend) -> None:
        self.b = backend
        self.task: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def status(self) -> TidyStatus:
        return await self.b.storage.get_obj(STATUS_KEY, TidyStatus) or TidyStatus()

    async def save(self, s: TidyStatus) -> None:
        await self.b.storage.put_obj(STATUS_KEY, s)

    async def run(self, f: TidyFields, s: TidyStatus) -> None:
        try:
            await self._tidy(f, s)
            s.state, s.message = "Finished", "Tidying complete"
        except asyncio.CancelledError:
            s.state, s.message = "Cancelled", "Tidy was cancelled"
        except Exception as exc:  # reported in tidy-status, never raised into the loop
            log.exception("tidy failed")
            s.state, s.error = "Error", str(exc) or type(exc).__name__
        s.time_finished = rfc3339(time.time())
        with contextlib.suppress(Exception):
            await self.save(s)

    async def _tidy(self, f: TidyFields, s: TidyStatus) -> None:
        b = self.b
        await b.cfg.refresh()
        cutoff = time.time() - f.safety_buffer
        if f.tidy_cert_store:
            names = await b.storage.list("certs/")
            s.current_cert_store_count = len(names)
            for name in names:
                entry = await b.storage.get_obj(f"certs/{name}", CertEntry)
                if entry is None or entry.not_after >= cutoff:
                    continue
                if await b.storage.get(f"revoked/{name}") is not None and not f.tidy_revoked_certs:
                    continue  # a revoked certificate stays until its revocation is tidied
                await b.storage.delete(f"certs/{name}")
                s.cert_store_deleted_count += 1
                s.current_cert_store_count -= 1
        if f.tidy_revoked_certs:
            names = await b.storage.list("revoked/")
            s.current_revoked_cert_count = len(names)
            dropped: dict[str, set[str]] = {}
            for name in names:
                rec = await b.storage.get_obj(f"revoked/{name}", RevokedCert)
                if rec is None or not rec.not_after or rec.not_after >= cutoff:
                    continue
                await b.storage.delete(f"revoked/{name}")
                await b.storage.delete(f"certs/{name}")
                dropped.setdefault(rec.issuer_id, set()).add(rec.serial_number)
                s.revoked_cert_deleted_count += 1
                s.current_revoked_cert_count -= 1
            for issuer_id, serials in dropped.items():
                issuer = await b.issuers.get(issuer_id)
                if issuer is not None:
                    await b.crls.rebuild(issuer, drop=serials)
        await self.save(s)


def paths(b: PKIBackend) -> list[Path]:
    tidier = b.tidier = Tidier(b)

    async def tidy(req: Request, f: TidyFields) -> Response:
        if not (
            f.tidy_cert_store
            or f.tidy_revoked_certs
            or f.tidy_revoked_cert_issuer_associations
            or f.tidy_expired_issuers
        ):
            # OpenBao: with its defaults (every operation off) a tidy is accepted and does
            # nothing, saying so; hvac's tidy() sends no body at all.
            return Response(
                status=202,
                warnings=[
                    "Manual tidy requested but no tidy operations were set. Enable at least one "
                    "tidy operation to be run (tidy_cert_store / tidy_revoked_certs / "
                    "tidy_invalid_certs / tidy_revoked_cert_issuer_associations / "
                    "tidy_expired_issuers / tidy_move_legacy_ca_bundle / tidy_acme)."
                ],
            )
        if f.safety_buffer < 1:
            raise bad_request("safety_buffer must be at least one second")
        if tidier.task is not None and not tidier.task.done():
            raise bad_request("a tidy operation is already in progress")
        s = TidyStatus(
            safety_buffer=f.safety_buffer,
            tidy_cert_store=f.tidy_cert_store,
            tidy_revoked_certs=f.tidy_revoked_certs,
            state="Running",
            time_started=rfc3339(time.time()),
        )
        await tidier.save(s)
        tidier.task = asyncio.create_task(tidier.run(f, s))
        return Response(
            status=202,
            warnings=[
                "Tidy operation successfully started. Any information from the operation will be "
                f"printed to the server logs (safety_buffer {short_duration(f.safety_buffer)})."
            ],
        )

    async def status(req: Request, f: NoFields) -> Response:
        return Response(data=status_data(await tidier.status()))

    async def cancel(req: Request, f: NoFields) -> Response:
        if tidier.task is None or tidier.task.done():
            raise bad_request("no tidy operation is running on this node")
        tidier.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tidier.task
        return Response(data=status_data(await tidier.status()))

    return [
        Path(
            "tidy",
            write(tidy, "Remove expired certificates"),
            TidyFields,
            synopsis="Remove expired certificates and revocations from storage.",
        ),
        Path(
            "tidy-status",
            {Op.READ: Operation(status, "Read the last tidy's status")},
            synopsis="Progress of the last tidy.",
        ),
        Path(
            "tidy-cancel",
            write(cancel, "Cancel a running tidy"),
            synopsis="Cancel the tidy running on this node.",
        ),
    ]

"""CRLs: one per issuer, signed on a crypto worker. A revocation appends to the issuer's CRL
state and re-signs it (compare-and-set, so concurrent revocations on several replicas all land);
`crl/rotate` rebuilds every CRL from the revocation records. Also `config/crl`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import msgspec

from services.secrets.engines.pki.models import (
    CrlConfig,
    CrlRevocation,
    CrlState,
    IssuerEntry,
    RevokedCert,
)
from services.secrets.engines.pki.pem import short_duration
from services.secrets.errors import SecretsError, bad_request
from services.secrets.framework.fields import Duration
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from shared.storage import CasConflict

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend

CAS_ATTEMPTS = 20


class CrlConfigFields(msgspec.Struct, kw_only=True):
    expiry: Duration = 72 * 3600
    disable: bool = False
    ocsp_disable: bool = False
    ocsp_expiry: Duration = 12 * 3600
    auto_rebuild: bool = False
    auto_rebuild_grace_period: Duration = 12 * 3600
    enable_delta: bool = False
    delta_rebuild_interval: Duration = 15 * 60
    allow_expired_cert_revocation: bool = False


def config_data(cfg: CrlConfig) -> dict[str, object]:
    data: dict[str, object] = msgspec.to_builtins(cfg)
    for key in ("expiry", "ocsp_expiry", "auto_rebuild_grace_period", "delta_rebuild_interval"):
        data[key] = short_duration(getattr(cfg, key))
    return data


class CrlManager:
    def __init__(self, backend: PKIBackend) -> None:
        self.b = backend

    async def config(self) -> CrlConfig:
        return await self.b.cfg.get_obj("config/crl", CrlConfig) or CrlConfig()

    async def state(self, issuer_id: str) -> CrlState | None:
        return await self.b.storage.get_obj(f"crl/{issuer_id}", CrlState)

    async def add(self, issuer: IssuerEntry, serial: str, when: int, not_after: int) -> None:
        await self.rebuild(issuer, add=CrlRevocation(serial, when, not_after))

    async def rebuild(
        self,
        issuer: IssuerEntry,
        *,
        full: bool = False,
        add: CrlRevocation | None = None,
        drop: set[str] | None = None,
    ) -> CrlState | None:
        """Re-sign `issuer`'s CRL (with `add` listed, `drop` removed, or everything re-read
        from the revocation records when `full`). Issuers that cannot sign CRLs keep only
        the list."""
        key = f"crl/{issuer.id}"
        for _ in range(CAS_ATTEMPTS):
            got = await self.b.storage.get_obj_entry(key, CrlState)
            state, revision = got if got is not None else (CrlState(), 0)
            revoked = await self._collect(issuer) if full else list(state.revoked)
            if add is not None and all(r.serial_number != add.serial_number for r in revoked):
                revoked.append(add)
            if drop:
                revoked = [r for r in revoked if r.serial_number not in drop]
            cfg = await self.config()
            now = int(time.time())
            new = CrlState(
                number=state.number,
                revoked=revoked,
                pem=state.pem,
                this_update=state.this_update,
                next_update=state.next_update,
            )
            if issuer.key_id and "crl-signing" in issuer.usage:
                signer = await self.b.issuers.signer(issuer, "crl-signing")
                listed = [] if cfg.disable else revoked
                result = await self.b.crypto(
                    "crl_build",
                    {
                        "signer": signer,
                        "crl_number": state.number + 1,
                        "this_update": now,
                        "next_update": now + cfg.expiry,
                        "revoked": [
                            {"serial_number": r.serial_number, "revocation_time": r.revocation_time}
                            for r in listed
                        ],
                    },
                )
                new = CrlState(
                    number=state.number + 1,
                    revoked=revoked,
                    pem=result["crl"],
                    this_update=now,
                    next_update=now + cfg.expiry,
                )
            data = msgspec.json.encode(new)
            try:
                if revision:
                    await self.b.storage.update(key, data, revision)
                else:
                    await self.b.storage.create(key, data)
                return new
            except CasConflict:
                continue  # another replica revoked at the same moment: redo on its result
        raise SecretsError(503, "the CRL is changing too fast; try again")

    async def _collect(self, issuer: IssuerEntry) -> list[CrlRevocation]:
        """Every revocation record that belongs on `issuer`'s CRL; records whose issuer is
        gone go on the default issuer's (as Vault does)."""
        known = {i.id for i in await self.b.issuers.all()}
        default = (await self.b.issuers.config()).default
        out = []
        for name in await self.b.storage.list("revoked/"):
            rec = await self.b.storage.get_obj(f"revoked/{name}", RevokedCert)
            if rec is None:
                continue
            if rec.issuer_id == issuer.id or (rec.issuer_id not in known and issuer.id == default):
                out.append(
                    CrlRevocation(rec.serial_number, int(rec.revocation_time), rec.not_after)
                )
        return out

    async def current(self, issuer: IssuerEntry) -> CrlState:
        """The CRL to serve; built on first use and re-signed once it has expired."""
        state = await self.state(issuer.id)
        if state is None or not state.pem or state.next_update < time.time():
            if not issuer.key_id or "crl-signing" not in issuer.usage:
                raise bad_request(
                    f"issuer {issuer.name or issuer.id} has no CRL: it cannot sign one"
                )
            state = await self.rebuild(issuer)
        assert state is not None
        return state

    async def rotate_all(self) -> None:
        for issuer in await self.b.issuers.all():
            if issuer.key_id and "crl-signing" in issuer.usage:
                await self.rebuild(issuer, full=True)


def paths(b: PKIBackend) -> list[Path]:
    async def rotate(req: Request, f: NoFields) -> Response:
        await b.crls.rotate_all()
        return Response(data={"success": True})

    async def read_config(req: Request, f: NoFields) -> Response:
        return Response(data=config_data(await b.crls.config()))

    async def write_config(req: Request, f: CrlConfigFields) -> Response:
        current = msgspec.to_builtins(await b.crls.config())
        given = msgspec.to_builtins(f)
        for key in req.data:
            if key in given:
                current[key] = given[key]
        cfg = msgspec.convert(current, CrlConfig)
        if cfg.expiry <= 0:
            raise bad_request("expiry must be a positive duration")
        await b.cfg.put("config/crl", cfg)
        await b.crls.rotate_all()
        return Response(data=config_data(cfg))

    return [
        Path(
            "crl/rotate",
            {Op.READ: Operation(rotate, "Rebuild every CRL")},
            synopsis="Rebuild and re-sign the CRL of every issuer.",
        ),
        Path(
            "config/crl",
            {
                Op.READ: Operation(read_config, "Read the CRL configuration"),
                **write(write_config, "Set the CRL configuration"),
            },
            CrlConfigFields,
            synopsis="CRL lifetime and switches.",
        ),
    ]

"""Issuers (CA certificates, several per mount) and the keys they sign with.

`IssuerStore` resolves `issuer_ref` (an id, a name or `default`), keeps each issuer's CA chain
and hands out signer material; the paths list, read, update, revoke and delete issuers and set
the default (`config/issuers`, `root/replace`), and `DELETE root` removes them all.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.engines.pki.models import (
    DEFAULT_USAGE,
    IssuerEntry,
    IssuersConfig,
    KeyEntry,
    KeysConfig,
)
from services.secrets.engines.pki.pem import rfc3339
from services.secrets.errors import SecretsError, bad_request, not_found
from services.secrets.framework.fields import CommaList
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.pki.backend import PKIBackend

USAGES = ("read-only", "issuing-certificates", "crl-signing", "ocsp-signing")
LEAF_BEHAVIORS = ("err", "truncate", "permit")
_NAME = re.compile(r"^[A-Za-z0-9_.-]*$")


def check_name(name: str, what: str) -> str:
    name = name.strip()
    if name == "default":
        raise bad_request(f"{what} name 'default' is reserved")
    if not _NAME.match(name):
        raise bad_request(
            f"{what} name {name!r} may only contain letters, digits, '_', '-' and '.'"
        )
    return name


def _is_uuid(ref: str) -> bool:
    try:
        uuid.UUID(ref)
    except ValueError:
        return False
    return True


class IssuerStore:
    def __init__(self, backend: PKIBackend) -> None:
        self.b = backend

    # ---- issuers ------------------------------------------------------------------------
    async def get(self, issuer_id: str) -> IssuerEntry | None:
        return await self.b.cfg.get_obj(f"issuer/{issuer_id}", IssuerEntry)

    async def all(self) -> list[IssuerEntry]:
        out = []
        for iid in await self.b.cfg.list("issuer/"):
            entry = await self.get(iid)
            if entry is not None:
                out.append(entry)
        return sorted(out, key=lambda e: e.created)

    async def save(self, entry: IssuerEntry) -> None:
        await self.b.cfg.put(f"issuer/{entry.id}", entry)

    async def config(self) -> IssuersConfig:
        return await self.b.cfg.get_obj("config/issuers", IssuersConfig) or IssuersConfig()

    async def save_config(self, cfg: IssuersConfig) -> None:
        await self.b.cfg.put("config/issuers", cfg)

    async def resolve(self, ref: str) -> IssuerEntry:
        """An issuer by id, name or `default`; 400 naming the reference when there is none."""
        ref = (ref or "default").strip()
        if ref == "default":
            cfg = await self.config()
            entry = await self.get(cfg.default) if cfg.default else None
            if entry is None:
                raise bad_request(
                    "no default issuer currently configured: generate or import "
                    "a CA first, or set one at config/issuers"
                )
            return entry
        if _is_uuid(ref):
            entry = await self.get(ref)
            if entry is not None:
                return entry
        for entry in await self.all():
            if entry.name and entry.name == ref:
                return entry
        raise bad_request(f"unable to find PKI issuer for reference: {ref}")

    async def name_taken(self, name: str, except_id: str = "") -> bool:
        return bool(name) and any(e.name == name and e.id != except_id for e in await self.all())

    async def signer(
        self, issuer: IssuerEntry, usage: str = "issuing-certificates"
    ) -> dict[str, str]:
        """The certificate and private key a crypto op signs with."""
        if usage not in issuer.usage:
            raise bad_request(
                f"issuer {issuer.name or issuer.id} is not allowed to be used "
                f"for {usage} (usage: {','.join(issuer.usage)})"
            )
        key = await self.get_key(issuer.key_id) if issuer.key_id else None
        if key is None:
            raise bad_request(
                f"issuer {issuer.name or issuer.id} has no private key in this "
                "mount and cannot sign"
            )
        return {"certificate": issuer.certificate, "private_key": key.private_key}

    async def add(self, entry: IssuerEntry, *, make_default: bool = False) -> None:
        entry.created = entry.created or time.time()
        await self.save(entry)
        cfg = await self.config()
        if not cfg.default or make_default or (cfg.default_follows_latest_issuer and entry.key_id):
            cfg.default = entry.id
            await self.save_config(cfg)

    async def relink(self) -> None:
        """Recompute who issued whom (signatures, checked on a crypto worker) and every
        issuer's CA chain. Run after issuers are added or removed."""
        entries = await self.all()
        if not entries:
            return
        parents: list[list[int]] = [[] for _ in entries]
        if len(entries) > 1:
            links = await self.b.crypto(
                "issuer_links", {"certificates": [e.certificate for e in entries]}
            )
            parents = links["parents"]
        by_id = {e.id: e for e in entries}
        for entry, plist in zip(entries, parents, strict=True):
            entry.parents = [entries[j].id for j in plist if entries[j].id != entry.id]
        for entry in entries:
            chain = self.chain(entry, by_id)
            await self.save(
                msgspec.structs.replace(
                    entry,
                    ca_chain=[c.certificate for c in chain],
                    chain_self_signed=[c.self_issued for c in chain],
                )
            )

    def chain(self, entry: IssuerEntry, by_id: dict[str, IssuerEntry]) -> list[IssuerEntry]:
        """This issuer, then every issuer above it (or its manual_chain)."""
        if entry.manual_chain:
            return [by_id[i] for i in entry.manual_chain if i in by_id]
        out, seen, queue = [], set(), [entry.id]
        while queue:
            iid = queue.pop(0)
            if iid in seen or iid not in by_id:
                continue
            seen.add(iid)
            out.append(by_id[iid])
            queue.extend(by_id[iid].parents)
        return out

    # ---- keys ---------------------------------------------------------------------------
    async def get_key(self, key_id: str) -> KeyEntry | None:
        return await self.b.cfg.get_obj(f"key/{key_id}", KeyEntry)

    async def all_keys(self) -> list[KeyEntry]:
        out = []
        for kid in await self.b.cfg.list("key/"):
            entry = await self.get_key(kid)
            if entry is not None:
                out.append(entry)
        return out

    async def keys_config(self) -> KeysConfig:
        return await self.b.cfg.get_obj("config/keys", KeysConfig) or KeysConfig()

    async def resolve_key(self, ref: str) -> KeyEntry:
        ref = (ref or "default").strip()
        if ref == "default":
            cfg = await self.keys_config()
            entry = await self.get_key(cfg.default) if cfg.default else None
            if entry is None:
                raise bad_request("no default key currently configured")
            return entry
        if _is_uuid(ref):
            entry = await self.get_key(ref)
            if entry is not None:
                return entry
        for entry in await self.all_keys():
            if entry.name and entry.name == ref:
                return entry
        raise bad_request(f"unable to find PKI key for reference: {ref}")

    async def add_key(self, entry: KeyEntry) -> None:
        await self.b.cfg.put(f"key/{entry.id}", entry)
        cfg = await self.keys_config()
        if not cfg.default:
            await self.b.cfg.put("config/keys", KeysConfig(default=entry.id))

    async def key_name_taken(self, name: str, except_id: str = "") -> bool:
        return bool(name) and any(
            k.name == name and k.id != except_id for k in await self.all_keys()
        )


def issuer_data(entry: IssuerEntry) -> dict[str, Any]:
    data: dict[str, Any] = {
        "issuer_id": entry.id,
        "issuer_name": entry.name,
        "key_id": entry.key_id,
        "certificate": entry.certificate.strip(),
        "ca_chain": [c.strip() for c in entry.ca_chain or [entry.certificate]],
        "serial_number": entry.serial_number,
        "manual_chain": entry.manual_chain,
        "leaf_not_after_behavior": entry.leaf_not_after_behavior,
        "usage": ",".join(entry.usage),
        "revocation_signature_algorithm": entry.revocation_signature_algorithm,
        "issuing_certificates": entry.issuing_certificates,
        "crl_distribution_points": entry.crl_distribution_points,
        "delta_crl_distribution_points": entry.delta_crl_distribution_points,
        "ocsp_servers": entry.ocsp_servers,
        "enable_aia_url_templating": entry.enable_aia_url_templating,
        "revoked": entry.revoked,
    }
    if entry.revoked:
        data["revocation_time"] = entry.revocation_time
        data["revocation_time_rfc3339"] = rfc3339(entry.revocation_time)
    return data


class IssuerRef(msgspec.Struct, kw_only=True):
    issuer_ref: str


class IssuerUpdate(msgspec.Struct, kw_only=True):
    issuer_ref: str
    issuer_name: str = ""
    leaf_not_after_behavior: str = "err"
    manual_chain: CommaList = []
    usage: CommaList = msgspec.field(default_factory=lambda: list(DEFAULT_USAGE))
    revocation_signature_algorithm: str = ""
    issuing_certificates: CommaList = []
    crl_distribution_points: CommaList = []
    delta_crl_distribution_points: CommaList = []
    ocsp_servers: CommaList = []
    enable_aia_url_templating: bool = False


class IssuersConfigFields(msgspec.Struct, kw_only=True):
    default: str = ""
    default_follows_latest_issuer: bool | None = None


class ReplaceFields(msgspec.Struct, kw_only=True):
    default: str = "next"


def paths(b: PKIBackend) -> list[Path]:
    store = b.issuers

    async def listing(req: Request, f: NoFields) -> Response:
        entries = await store.all()
        if not entries:
            raise not_found()
        default = (await store.config()).default
        return Response(
            data={
                "keys": [e.id for e in entries],
                "key_info": {
                    e.id: {
                        "issuer_name": e.name,
                        "is_default": e.id == default,
                        "serial_number": e.serial_number,
                        "key_id": e.key_id,
                    }
                    for e in entries
                },
            }
        )

    async def read(req: Request, f: IssuerRef) -> Response:
        try:
            entry = await store.resolve(f.issuer_ref)
        except SecretsError:
            if await b.storage.get(f"deleted-issuer/{f.issuer_ref}") is None:
                raise
            # OpenBao answers a read of a deleted issuer with a 500 and its multierror text;
            # hvac's tests expect that. Only a deleted issuer's id or name gets it.
            raise SecretsError(
                500,
                "1 error occurred:\n\t* unable to find PKI issuer for reference: "
                f"{f.issuer_ref}\n\n",
            ) from None
        return Response(data=issuer_data(entry))

    async def apply(entry: IssuerEntry, f: IssuerUpdate, given: set[str]) -> IssuerEntry:
        changes: dict[str, Any] = {}
        if "issuer_name" in given:
            name = check_name(f.issuer_name, "issuer")
            if await store.name_taken(name, entry.id):
                raise bad_request(f"issuer name {name!r} is already in use")
            changes["name"] = name
        if "leaf_not_after_behavior" in given:
            behavior = f.leaf_not_after_behavior.strip().lower()
            if behavior not in LEAF_BEHAVIORS:
                raise bad_request(
                    f"unknown leaf_not_after_behavior {behavior!r}: use err, truncate or permit"
                )
            changes["leaf_not_after_behavior"] = behavior
        if "usage" in given:
            usage = [u.strip().lower() for u in f.usage if u.strip()]
            for u in usage:
                if u not in USAGES:
                    raise bad_request(f"unknown issuer usage {u!r}: use " + ", ".join(USAGES))
            if (
                "crl-signing" in usage
                and entry.cert_key_usage
                and "CRLSign" not in entry.cert_key_usage
            ):
                raise bad_request(
                    "the issuer's certificate lacks the CRLSign key usage, so "
                    "crl-signing cannot be enabled"
                )
            if "read-only" not in usage:
                usage.insert(0, "read-only")
            changes["usage"] = [u for u in USAGES if u in usage]
        if "manual_chain" in given:
            chain = []
            for ref in f.manual_chain:
                chain.append((await store.resolve(ref)).id)
            if chain and chain[0] != entry.id:
                raise bad_request("the first entry of manual_chain must be this issuer")
            changes["manual_chain"] = chain or None
        for field in (
            "revocation_signature_algorithm",
            "issuing_certificates",
            "crl_distribution_points",
            "delta_crl_distribution_points",
            "ocsp_servers",
            "enable_aia_url_templating",
        ):
            if field in given:
                changes[field] = getattr(f, field)
        return msgspec.structs.replace(entry, **changes)

    async def update(req: Request, f: IssuerUpdate) -> Response:
        entry = await store.resolve(f.issuer_ref)
        # POST replaces every field (elided ones take their defaults), as Vault's does.
        fields = set(msgspec.structs.asdict(f)) - {"issuer_ref"}
        updated = await apply(entry, f, fields)
        await store.save(updated)
        if "manual_chain" in fields:
            await store.relink()
            updated = await store.get(updated.id) or updated
        return Response(data=issuer_data(updated))

    async def patch(req: Request, f: IssuerUpdate) -> Response:
        entry = await store.resolve(f.issuer_ref)
        given = set(req.data) - {"issuer_ref"}
        updated = await apply(entry, f, given)
        await store.save(updated)
        if "manual_chain" in given:
            await store.relink()
            updated = await store.get(updated.id) or updated
        return Response(data=issuer_data(updated))

    async def delete(req: Request, f: IssuerRef) -> Response:
        try:
            entry = await store.resolve(f.issuer_ref)
        except SecretsError:
            return Response()  # deleting what is not there is not an error
        await b.cfg.delete(f"issuer/{entry.id}")
        await b.storage.delete(f"crl/{entry.id}")
        for ref in {entry.id, entry.name} - {""}:
            await b.storage.put(f"deleted-issuer/{ref}", b"1")
        warnings = []
        cfg = await store.config()
        if cfg.default == entry.id:
            cfg.default = ""
            await store.save_config(cfg)
            warnings.append(
                "Deleted issuer was the default issuer; a new default issuer has "
                "not been set. Set one with config/issuers."
            )
        await store.relink()
        return Response(warnings=warnings)

    async def revoke_issuer(req: Request, f: IssuerRef) -> Response:
        entry = await store.resolve(f.issuer_ref)
        if not entry.revoked:
            now = int(time.time())
            entry = msgspec.structs.replace(
                entry,
                revoked=True,
                revocation_time=now,
                usage=[u for u in entry.usage if u != "issuing-certificates"],
            )
            await store.save(entry)
            # It appears on the CRLs of the issuers above it in this mount.
            for parent_id in entry.parents:
                parent = await store.get(parent_id)
                if parent is not None and parent.key_id:
                    await b.crls.add(parent, entry.serial_number, now, entry.not_after)
        return Response(data=issuer_data(entry))

    async def read_config(req: Request, f: NoFields) -> Response:
        cfg = await store.config()
        return Response(
            data={
                "default": cfg.default,
                "default_follows_latest_issuer": cfg.default_follows_latest_issuer,
            }
        )

    async def write_config(req: Request, f: IssuersConfigFields) -> Response:
        cfg = await store.config()
        if f.default:
            cfg.default = (await store.resolve(f.default)).id
        if f.default_follows_latest_issuer is not None:
            cfg.default_follows_latest_issuer = f.default_follows_latest_issuer
        await store.save_config(cfg)
        return Response(
            data={
                "default": cfg.default,
                "default_follows_latest_issuer": cfg.default_follows_latest_issuer,
            }
        )

    async def replace(req: Request, f: ReplaceFields) -> Response:
        return await write_config(req, IssuersConfigFields(default=f.default))

    async def delete_root(req: Request, f: NoFields) -> Response:
        for name in await b.storage.list("crl/"):
            await b.storage.delete("crl/" + name)
        for prefix in ("issuer/", "key/"):
            for name in await b.storage.list(prefix):
                await b.cfg.delete(prefix + name)
        for cfg in ("config/issuers", "config/keys"):
            await b.cfg.delete(cfg)
        return Response()

    return [
        Path(
            ("issuers", "issuers/"),
            {Op.LIST: Operation(listing, "List issuers", unauthenticated=True)},
            synopsis="List the issuers of this mount (unauthenticated).",
        ),
        Path(
            "issuer/{issuer_ref}/revoke",
            {Op.UPDATE: Operation(revoke_issuer, "Revoke an issuer")},
            IssuerRef,
            synopsis="Revoke an issuer: it stops issuing and joins its parent's CRL.",
        ),
        Path(
            "issuer/{issuer_ref}",
            {
                Op.READ: Operation(read, "Read an issuer"),
                **write(update, "Replace an issuer's settings"),
                Op.PATCH: Operation(patch, "Change some issuer settings"),
                Op.DELETE: Operation(delete, "Delete an issuer"),
            },
            IssuerUpdate,
            synopsis="Manage one issuer.",
        ),
        Path(
            "config/issuers",
            {
                Op.READ: Operation(read_config, "Read the default issuer"),
                **write(write_config, "Set the default issuer"),
            },
            IssuersConfigFields,
            synopsis="The default issuer.",
        ),
        Path(
            "root/replace",
            write(replace, "Set the default issuer"),
            ReplaceFields,
            synopsis="Set the default issuer (defaults to the one named `next`).",
        ),
        Path(
            "root",
            {Op.DELETE: Operation(delete_root, "Delete every issuer and key", sudo=True)},
            synopsis="Delete every issuer and key of this mount (requires sudo).",
        ),
    ]

"""The `cert` auth method: TLS client certificates log in against trusted certificates kept
as roles at `certs/<name>`.

A login reads the client's certificate from the request envelope (the gateway forwards it
for this path only, when its listener asked the client for one) and trusts it only through
this mount's roles: a CA role admits certificates that chain to it, a non-CA role exactly
its own certificate. CRLs under `crls/<name>` revoke serials anywhere in the chain."""

from __future__ import annotations

import base64
import datetime
import hmac
import re
from typing import Annotated, Any

import msgspec
from cryptography import x509

from services.secrets.auth import cert_verify as cv
from services.secrets.auth.stored import change
from services.secrets.auth.token_params import (
    TokenInput,
    TokenParams,
    addr_allowed,
    apply_token_input,
    login_auth,
    take_deprecated,
    token_data,
)
from services.secrets.errors import bad_request, not_found, permission_denied, unsupported_path
from services.secrets.framework.backend import Backend
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.listing import list_prefix
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

# Vault's GenericNameRegex.
_NAME = re.compile(r"\w(?:[\w.-]*\w)?")
MAX_NAME_BYTES = 256
MIN_OCSP_CACHE, MAX_OCSP_CACHE = 2, 100_000
_ALIASES = {
    "policies": "token_policies",
    "ttl": "token_ttl",
    "max_ttl": "token_max_ttl",
    "period": "token_period",
    "bound_cidrs": "token_bound_cidrs",
}
NO_CERT = "client certificate must be supplied"
NO_CHAIN = "invalid certificate or no client certificate supplied"
NO_MATCH = "no chain matching all constraints could be found for this login certificate"


class CertEntry(TokenParams, kw_only=True):
    name: str
    certificate: str
    display_name: str = ""
    allowed_names: list[str] = []
    allowed_common_names: list[str] = []
    allowed_dns_sans: list[str] = []
    allowed_email_sans: list[str] = []
    allowed_uri_sans: list[str] = []
    allowed_organizational_units: list[str] = []
    required_extensions: list[str] = []
    allowed_metadata_extensions: list[str] = []
    ocsp_enabled: bool = False
    ocsp_ca_certificates: str = ""
    ocsp_servers_override: list[str] = []
    ocsp_fail_open: bool = False
    ocsp_query_all_servers: bool = False
    # Deprecated names the last writer used; a read echoes them as Vault does.
    legacy: list[str] = []


class CertFields(TokenInput, kw_only=True):
    name: str
    certificate: Annotated[str, desc("the trusted certificate (PEM)")] | None = None
    display_name: Annotated[str, desc("display name of the login tokens")] | None = None
    allowed_names: Annotated[CommaList, desc("deprecated: CN or SAN globs")] | None = None
    allowed_common_names: Annotated[CommaList, desc("common name globs")] | None = None
    allowed_dns_sans: Annotated[CommaList, desc("DNS SAN globs")] | None = None
    allowed_email_sans: Annotated[CommaList, desc("email SAN globs")] | None = None
    allowed_uri_sans: Annotated[CommaList, desc("URI SAN globs")] | None = None
    allowed_organizational_units: Annotated[CommaList, desc("OU globs")] | None = None
    required_extensions: Annotated[CommaList, desc("oid:value globs")] | None = None
    allowed_metadata_extensions: Annotated[CommaList, desc("OIDs copied to metadata")] | None = None
    ocsp_enabled: bool | None = None
    ocsp_ca_certificates: str | None = None
    ocsp_servers_override: CommaList | None = None
    ocsp_fail_open: bool | None = None
    ocsp_query_all_servers: bool | None = None
    policies: Annotated[CommaList, desc("deprecated: use token_policies")] | None = None
    lease: Annotated[int, desc("deprecated: use token_ttl")] | None = None
    ttl: Annotated[Duration, desc("deprecated: use token_ttl")] | None = None
    max_ttl: Annotated[Duration, desc("deprecated: use token_max_ttl")] | None = None
    period: Annotated[Duration, desc("deprecated: use token_period")] | None = None
    bound_cidrs: Annotated[CommaList, desc("deprecated: use token_bound_cidrs")] | None = None


class CertConfig(msgspec.Struct, kw_only=True):
    disable_binding: bool = False
    enable_identity_alias_metadata: bool = False
    ocsp_cache_size: int = 0


class ConfigFields(msgspec.Struct, kw_only=True):
    disable_binding: bool | None = None
    enable_identity_alias_metadata: bool | None = None
    ocsp_cache_size: int | None = None


class CrlEntry(msgspec.Struct, kw_only=True):
    # Revoked serial numbers, in decimal as Vault keys them.
    serials: list[str] = []


class CrlFields(msgspec.Struct, kw_only=True):
    name: str
    crl: Annotated[str, desc("the CRL, PEM or DER")] | None = None
    url: Annotated[str, desc("a CRL distribution point (not supported)")] | None = None


class LoginFields(msgspec.Struct, kw_only=True):
    name: Annotated[str, desc("log in against this certificate role only")] = ""


_UPDATABLE = tuple(
    f
    for f in msgspec.structs.fields(CertFields)
    if f.name not in {"name", "certificate", *_ALIASES, "lease"} and not f.name.startswith("token_")
)


def _name(raw: str) -> str:
    name = raw.strip().lower()
    if not _NAME.fullmatch(name):
        raise unsupported_path(raw)
    if len(name.encode()) > MAX_NAME_BYTES:
        raise bad_request(f"name must be at most {MAX_NAME_BYTES} bytes")
    return name


def _check_certificate(pem: str) -> None:
    parsed = cv.parse_pem_certs(pem)
    if not parsed:
        raise bad_request("failed to parse certificate")
    first = parsed[0]
    if not cv.is_ca(first) and not cv.allows_client_auth(first):
        raise bad_request(
            "nonCA certificates should have TLS client authentication set as an extended key usage"
        )


def _parse_crl(text: str) -> x509.CertificateRevocationList:
    raw = text.encode()
    try:
        if b"-----BEGIN" in raw:
            return x509.load_pem_x509_crl(raw)
        return x509.load_der_x509_crl(raw)
    except ValueError:
        raise bad_request("failed to parse CRL") from None


class CertBackend(Backend):
    type_name = "cert"
    is_auth = True
    help_text = (
        "TLS client certificate logins. Trusted certificates are managed under certs/; a login "
        "at login presents a client certificate over TLS and returns a token."
    )

    async def _entry(self, name: str) -> CertEntry | None:
        return await self.storage.get_obj(f"cert/{name}", CertEntry)

    async def _config(self) -> CertConfig:
        return await self.storage.get_obj("config", CertConfig) or CertConfig()

    async def _revoked(self) -> set[str]:
        out: set[str] = set()
        for key in await self.storage.list("crls/"):
            crl = await self.storage.get_obj(f"crls/{key}", CrlEntry)
            if crl is not None:
                out.update(crl.serials)
        return out

    # ---- login ----------------------------------------------------------------------------
    async def _trusted(self, name: str) -> list[tuple[CertEntry, list[x509.Certificate]]]:
        """The roles to try (all, or the one named: none when no such role can exist)."""
        wanted = name.strip().lower()
        if wanted and not _NAME.fullmatch(wanted):
            return []
        names = [wanted] if wanted else await self.storage.list("cert/")
        out = []
        for n in names:
            entry = await self._entry(n)
            if entry is None:
                continue
            parsed = cv.parse_pem_certs(entry.certificate)
            if parsed:
                out.append((entry, parsed + cv.parse_pem_certs(entry.ocsp_ca_certificates)))
        return out

    @staticmethod
    def _acceptable(
        leaf: x509.Certificate, chain: list[x509.Certificate], entry: CertEntry, revoked: set[str]
    ) -> bool:
        if any(str(c.serial_number) in revoked for c in chain):
            return False
        if not cv.matches_constraints(leaf, entry):
            return False
        # OCSP is not queried: a role that demands it admits no one unless it fails open.
        return not entry.ocsp_enabled or entry.ocsp_fail_open

    async def _verified_role(self, req: Request, name: str) -> tuple[CertEntry, x509.Certificate]:
        if not req.client_certs:
            raise bad_request(NO_CERT)
        try:
            sent = [x509.load_der_x509_certificate(der) for der in req.client_certs]
        except ValueError:
            raise bad_request(NO_CHAIN) from None
        leaf, intermediates = sent[0], sent[1:]
        trusted = await self._trusted(name)
        revoked = await self._revoked()
        now = datetime.datetime.now(datetime.UTC)
        leaf_der = req.client_certs[0]
        roots = [c for entry, certs in trusted if cv.is_ca(certs[0]) for c in certs]
        try:
            chains = cv.verify_chains(leaf, intermediates, roots, now)
        except cv.CertError as exc:
            raise bad_request(str(exc)) from None
        # A non-CA role trusts exactly its own certificate.
        for entry, certs in trusted:
            own = certs[0].public_bytes(cv.DER)
            if (
                not cv.is_ca(certs[0])
                and hmac.compare_digest(own, leaf_der)
                and self._acceptable(leaf, certs, entry, revoked)
            ):
                return entry, leaf
        if not chains:
            raise bad_request(NO_CHAIN)
        for entry, certs in trusted:
            if not cv.is_ca(certs[0]):
                continue
            mine = {c.public_bytes(cv.DER) for c in certs}
            for chain in chains:
                linked = any(c.public_bytes(cv.DER) in mine for c in chain)
                if linked and self._acceptable(leaf, chain, entry, revoked):
                    return entry, leaf
        raise bad_request(NO_MATCH)

    def _metadata(self, entry: CertEntry, leaf: x509.Certificate) -> dict[str, str]:
        skid, akid = cv.key_ids(leaf)
        meta = {
            "cert_name": entry.name,
            "common_name": cv.common_name(leaf),
            "serial_number": str(leaf.serial_number),
            "subject_key_id": cv.hex_colons(skid),
            "authority_key_id": cv.hex_colons(akid),
        }
        if entry.allowed_metadata_extensions:
            present = cv.extension_strings(leaf)
            for oid in entry.allowed_metadata_extensions:
                if oid in present:
                    meta[oid.replace(".", "-")] = present[oid]
        return meta

    # ---- paths ----------------------------------------------------------------------------
    def build_paths(self) -> list[Path]:
        async def list_certs(req: Request, _: NoFields) -> Response:
            return await list_prefix(self.storage, "cert/")

        async def read_cert(req: Request, f: CertFields) -> Response:
            entry = await self._entry(_name(f.name))
            if entry is None:
                raise not_found()
            data: dict[str, Any] = {
                k: getattr(entry, k)
                for k in (
                    "certificate",
                    "display_name",
                    "allowed_names",
                    "allowed_common_names",
                    "allowed_dns_sans",
                    "allowed_email_sans",
                    "allowed_uri_sans",
                    "allowed_organizational_units",
                    "required_extensions",
                    "allowed_metadata_extensions",
                    "ocsp_ca_certificates",
                    "ocsp_enabled",
                    "ocsp_servers_override",
                    "ocsp_fail_open",
                    "ocsp_query_all_servers",
                )
            }
            data.update(token_data(entry))
            for old in entry.legacy:
                data[old] = data[_ALIASES[old]]
            return Response(data=data)

        async def write_cert(req: Request, f: CertFields) -> Response:
            name = _name(f.name)
            if f.lease is not None and f.token_ttl is None and f.ttl is None:
                f.ttl = f.lease
            used, dropped = take_deprecated(
                f, {old: (new, getattr(f, old)) for old, new in _ALIASES.items()}
            )

            def apply(current: CertEntry | None) -> CertEntry:
                base = current or CertEntry(name=name, certificate="")
                changes = apply_token_input(base, f)
                for field in _UPDATABLE:
                    value = getattr(f, field.name)
                    if value is not None:
                        changes[field.name] = value
                if f.certificate is not None:
                    changes["certificate"] = f.certificate
                new = msgspec.structs.replace(
                    base, legacy=sorted((set(base.legacy) - dropped) | used), **changes
                )
                if not new.display_name:
                    new.display_name = name
                _check_certificate(new.certificate)
                return new

            await change(self.storage, f"cert/{name}", CertEntry, apply)
            return Response()

        async def delete_cert(req: Request, f: CertFields) -> Response:
            await self.storage.delete(f"cert/{_name(f.name)}")
            return Response()

        async def read_config(req: Request, _: NoFields) -> Response:
            return Response(data=msgspec.structs.asdict(await self._config()))

        async def write_config(req: Request, f: ConfigFields) -> Response:
            size = f.ocsp_cache_size
            if size is not None and not MIN_OCSP_CACHE <= size <= MAX_OCSP_CACHE:
                raise bad_request(
                    f"invalid cache size, must be >= {MIN_OCSP_CACHE} and <= {MAX_OCSP_CACHE}"
                )
            given = {k: v for k, v in msgspec.structs.asdict(f).items() if v is not None}

            def apply(current: CertConfig | None) -> CertConfig:
                return msgspec.structs.replace(current or CertConfig(), **given)

            await change(self.storage, "config", CertConfig, apply)
            return Response()

        async def list_crls(req: Request, _: NoFields) -> Response:
            return await list_prefix(self.storage, "crls/")

        async def read_crl(req: Request, f: CrlFields) -> Response:
            name = _name(f.name)
            crl = await self.storage.get_obj(f"crls/{name}", CrlEntry)
            if crl is None:
                raise bad_request(f"no such CRL {name}")
            return Response(data={"cdp": None, "serials": {s: {} for s in crl.serials}})

        async def write_crl(req: Request, f: CrlFields) -> Response:
            name = _name(f.name)
            if f.crl is None:
                if f.url is not None:
                    raise bad_request("CRL distribution points are not supported: give 'crl'")
                raise bad_request("one of 'crl' or 'url' must be provided")
            parsed = _parse_crl(f.crl)
            entry = CrlEntry(serials=sorted({str(r.serial_number) for r in parsed}))
            await self.storage.put_obj(f"crls/{name}", entry)
            return Response()

        async def delete_crl(req: Request, f: CrlFields) -> Response:
            name = _name(f.name)
            if await self.storage.get_obj(f"crls/{name}", CrlEntry) is None:
                raise bad_request(f"no such CRL {name}")
            await self.storage.delete(f"crls/{name}")
            return Response()

        async def login(req: Request, f: LoginFields) -> Response:
            entry, leaf = await self._verified_role(req, f.name)
            if not addr_allowed(req.remote_addr, entry.token_bound_cidrs):
                raise permission_denied()
            meta = self._metadata(entry, leaf)
            skid, akid = cv.key_ids(leaf)
            auth = login_auth(
                entry,
                req,
                display_name=entry.display_name,
                metadata=meta,
                internal={
                    "subject_key_id": base64.b64encode(skid).decode(),
                    "authority_key_id": base64.b64encode(akid).decode(),
                },
            )
            auth.alias_name = cv.common_name(leaf)
            if (await self._config()).enable_identity_alias_metadata:
                auth.alias_metadata = dict(meta)
            return Response(auth=auth)

        r = Operation
        return [
            Path(
                ("certs", "certs/"),
                {Op.LIST: r(list_certs, "List trusted certificates")},
                synopsis="List the trusted certificates (roles) of this method.",
            ),
            Path(
                "certs/{name}",
                {
                    Op.READ: r(read_cert, "Read a trusted certificate"),
                    **write(write_cert, "Create or update a trusted certificate"),
                    Op.DELETE: r(delete_cert, "Delete a trusted certificate"),
                },
                CertFields,
                synopsis="Manage trusted certificates used for authentication.",
                description="A CA certificate admits client certificates that chain to it; a "
                "non-CA certificate admits exactly itself. Constraints narrow who may log in.",
            ),
            Path(
                "config",
                {
                    Op.READ: r(read_config, "Read the method's configuration"),
                    **write(write_config, "Configure the method"),
                },
                ConfigFields,
                synopsis="Configure the cert auth method.",
            ),
            Path(
                ("crls", "crls/"),
                {Op.LIST: r(list_crls, "List CRLs")},
                synopsis="List the CRLs checked during login.",
            ),
            Path(
                "crls/{name}",
                {
                    Op.READ: r(read_crl, "Read a CRL's revoked serials"),
                    **write(write_crl, "Add or replace a CRL"),
                    Op.DELETE: r(delete_crl, "Delete a CRL"),
                },
                CrlFields,
                synopsis="Manage Certificate Revocation Lists checked during login.",
                description="A chain with any serial revoked by any CRL is not trusted.",
            ),
            Path(
                "login",
                write(login, "Log in with a TLS client certificate", unauthenticated=True),
                LoginFields,
                synopsis="Log in with the TLS client certificate of the connection.",
                description="The certificate must chain to (or be) a trusted certificate and "
                "meet its constraints; `name` restricts the login to one role.",
            ),
        ]

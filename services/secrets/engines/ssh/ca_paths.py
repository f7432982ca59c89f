"""The SSH CA: its key pair (`config/ca`, generated or imported), its public key for sshd's
TrustedUserCAKeys (`public_key`, unauthenticated, text/plain), and certificates for ca roles
(`sign/<role>` for a caller's key, `issue/<role>` for a new key pair)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.engines.ssh import signing
from services.secrets.engines.ssh.roles import CA, SSHRole
from services.secrets.engines.ssh.store import CAKeys
from services.secrets.errors import SecretsError, bad_request
from services.secrets.framework.backend import SecretType
from services.secrets.framework.fields import CommaList, Duration, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import LeaseSpec, RawResponse, Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.ssh.backend import SSHBackend

CERT_SECRET = "ssh_certificate"
# What a CA created on first use (a sign with create capability and no CA yet) is made of.
DEFAULT_CA_KEY_TYPE, DEFAULT_CA_KEY_BITS = "ssh-rsa", 0


_ISSUER_IDS = uuid.UUID("0b6f1c55-2f55-4c1e-9d1f-7f3d7c1c9a21")


def issuer(public_key: str) -> dict[str, str]:
    """OpenBao's issuer fields for the mount's one CA: an id derived from its public key (the
    same on every replica, new when the key changes) and the name of the default issuer."""
    return {
        "issuer_id": str(uuid.uuid5(_ISSUER_IDS, public_key.strip())),
        "issuer_name": "default",
    }


class CAFields(msgspec.Struct, kw_only=True):
    private_key: Annotated[str, desc("CA private key to import")] = ""
    public_key: Annotated[str, desc("CA public key to import")] = ""
    generate_signing_key: Annotated[bool | None, desc("generate the CA key pair here")] = None
    key_type: Annotated[
        str, desc("ssh-rsa, ecdsa-sha2-nistp256/384/521, ssh-ed25519, rsa, ec or ed25519")
    ] = DEFAULT_CA_KEY_TYPE
    key_bits: Annotated[int, desc("RSA: 0 means 4096; ec: 256, 384 or 521")] = DEFAULT_CA_KEY_BITS


class SignFields(msgspec.Struct, kw_only=True):
    name: str
    public_key: Annotated[str, desc("the SSH public key to sign (sign only)")] = ""
    key_type: Annotated[str, desc("rsa, ec or ed25519 (issue only)")] = "rsa"
    key_bits: Annotated[int, desc("0 for the default size (issue only)")] = 0
    ttl: Duration = 0
    valid_principals: Annotated[CommaList, desc("usernames or hostnames")] = []
    cert_type: Annotated[str, desc("user or host")] = "user"
    key_id: str = ""
    critical_options: dict[str, Any] = {}
    extensions: dict[str, Any] = {}


def _import_choice(f: CAFields) -> bool:
    """True to generate, False to import; as Vault decides from what was given."""
    given = bool(f.public_key.strip() or f.private_key.strip())
    if f.generate_signing_key:
        if given:
            raise bad_request(
                "public_key and private_key must not be set when generate_signing_key is true"
            )
        return True
    if f.generate_signing_key is None and not given:
        return True
    if not f.public_key.strip():
        raise bad_request("missing public_key (or set generate_signing_key to true)")
    if not f.private_key.strip():
        raise bad_request("missing private_key (or set generate_signing_key to true)")
    return False


def paths(b: SSHBackend) -> list[Path]:
    store = b.store

    async def write_ca(req: Request, f: CAFields) -> Response:
        if _import_choice(f):
            pair = await b.crypto(
                "ssh_generate_key",
                {
                    "key_type": f.key_type or DEFAULT_CA_KEY_TYPE,
                    "key_bits": f.key_bits,
                    "purpose": "ca",
                },
            )
            await store.put_ca(
                CAKeys(public_key=pair["public_key"], private_key=pair["private_key"])
            )
            return Response(data={"public_key": pair["public_key"], **issuer(pair["public_key"])})
        pair = await b.crypto(
            "ssh_import_ca", {"private_key": f.private_key, "public_key": f.public_key}
        )
        await store.put_ca(CAKeys(public_key=pair["public_key"], private_key=pair["private_key"]))
        return Response()

    async def read_ca(req: Request, _: CAFields) -> Response:
        ca = await store.ca()
        if ca is None:
            raise bad_request("keys haven't been configured yet")
        return Response(data={"public_key": ca.public_key, **issuer(ca.public_key)})

    async def delete_ca(req: Request, _: CAFields) -> Response:
        await store.delete_ca()
        # OpenBao answers 200 with what it deleted (its CLI prints the warning).
        return Response(warnings=["Deleted the CA key pair of this mount."])

    async def public_key(req: Request, _: NoFields) -> Response:
        ca = await store.ca()
        if ca is None:
            raise SecretsError(404, "no SSH CA is configured at config/ca")
        return Response(raw=RawResponse(200, ca.public_key.encode(), "text/plain"))

    async def ca_exists(req: Request, _: SignFields) -> bool:
        # Signing is an update when the CA exists; without one it is a create, which (with
        # create capability) makes the CA from the defaults first, as the seed describes.
        return await store.ca() is not None

    async def ca_for(req: Request) -> CAKeys:
        ca = await store.ca()
        if ca is not None:
            return ca
        if req.op is not Op.CREATE:
            raise bad_request("no SSH CA is configured: write one to config/ca first")
        pair = await b.crypto(
            "ssh_generate_key",
            {"key_type": DEFAULT_CA_KEY_TYPE, "key_bits": DEFAULT_CA_KEY_BITS, "purpose": "ca"},
        )
        return await store.create_ca(
            CAKeys(public_key=pair["public_key"], private_key=pair["private_key"])
        )

    async def ca_role(name: str) -> SSHRole:
        role = await store.role(name)
        if role is None:
            raise bad_request(f"unknown role: {name}")
        if role.key_type != CA:
            raise bad_request(f"role {name!r} is a {role.key_type} role; only ca roles sign keys")
        return role

    def plan(req: Request, role: SSHRole, f: SignFields) -> dict[str, Any]:
        mount = req.mount.config if req.mount is not None else None
        default_ttl, max_ttl = b.core.tokens.ttl_limits(
            mount.default_lease_ttl if mount else 0, mount.max_lease_ttl if mount else 0
        )
        try:
            return signing.plan(
                role,
                signing.SignInput(
                    valid_principals=f.valid_principals,
                    cert_type=f.cert_type,
                    key_id=f.key_id,
                    ttl=f.ttl,
                    critical_options=f.critical_options,
                    extensions=f.extensions,
                ),
                role_name=f.name,
                display_name=req.token.display_name if req.token else "",
                mount_default=default_ttl,
                mount_max=max_ttl,
            )
        except ValueError as exc:
            raise bad_request(str(exc)) from None

    def respond(
        result: dict[str, Any], ttl: int, ca: CAKeys, extra: tuple[str, ...] = ()
    ) -> Response:
        data = {"serial_number": result["serial_number"], "signed_key": result["signed_key"]}
        data["issuer_id"] = issuer(ca.public_key)["issuer_id"]
        data.update({k: result[k] for k in extra})
        # Certificates cannot be revoked; the lease only reports their lifetime (seed).
        return Response(
            data=data,
            lease=LeaseSpec(ttl=ttl, max_ttl=ttl, renewable=False, secret_type=CERT_SECRET),
        )

    async def sign(req: Request, f: SignFields) -> Response:
        role = await ca_role(f.name)
        try:
            signing.check_public_key_text(f.public_key)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        args = plan(req, role, f)
        ttl = args.pop("ttl")
        ca = await ca_for(req)
        result = await b.crypto(
            "ssh_sign", {**args, "ca_private_key": ca.private_key, "public_key": f.public_key}
        )
        return respond(result, ttl, ca)

    async def issue(req: Request, f: SignFields) -> Response:
        role = await ca_role(f.name)
        args = plan(req, role, f)
        ttl = args.pop("ttl")
        ca = await ca_for(req)
        result = await b.crypto(
            "ssh_issue",
            {
                **args,
                "ca_private_key": ca.private_key,
                "key_type": f.key_type or "rsa",
                "key_bits": f.key_bits,
            },
        )
        return respond(result, ttl, ca, ("private_key", "private_key_type"))

    async def revoke_cert(internal: dict[str, Any]) -> None:
        return None

    b.secret_types[CERT_SECRET] = SecretType(revoke=revoke_cert)

    return [
        Path(
            "config/ca",
            {
                Op.READ: Operation(read_ca, "Read the CA public key"),
                **write(write_ca, "Generate or import the CA key pair"),
                Op.DELETE: Operation(delete_ca, "Delete the CA key pair"),
            },
            CAFields,
            synopsis="The CA key pair that signs SSH certificates.",
        ),
        Path(
            "public_key",
            {Op.READ: Operation(public_key, "The CA public key", unauthenticated=True)},
            synopsis="The CA public key as text, for TrustedUserCAKeys; no token needed.",
        ),
        Path(
            "sign/{name}",
            write(sign, "Sign an SSH public key"),
            SignFields,
            exists=ca_exists,
            synopsis="Sign a public key with the CA, within the role's limits.",
        ),
        Path(
            "issue/{name}",
            write(issue, "Issue a key pair and certificate"),
            SignFields,
            exists=ca_exists,
            synopsis="Generate a key pair and sign it; the key is not stored.",
        ),
    ]

"""Per-service identities: what lets a gateway (or the secrets service) tell a genuine
workspace replica from a genuine scheduler or secrets replica.

Each API service holds an Ed25519 key of its own and a **certificate**: the secrets cluster
key's signature over the service's name and public key. Whoever pins the cluster public key
(every process does) checks a service in two steps: the certificate names the service it
expects, and the service signs the exchange with the certified key. A workspace replica holds
only the workspace key, so it can neither sign as the scheduler or secrets service nor mint
certificates (that needs the cluster key, which only secrets and replication hold).

The secrets service's key is the cluster key itself. Other services' seeds are derived from
the cluster seed with HKDF (one per name), so `trellis dev` and `python -m
shared.cluster_identity` can write each service its own key file (`service_key_file`,
0600: `{"service", "seed", "certificate"}`) and the derivation is repeatable; a process with
only a service key file cannot go back to the cluster seed. A process configured with the
cluster key file (tests, a single-node server) derives the service key itself; with
`insecure_bus` and no key, from the name-derived insecure cluster key.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from shared.cluster_identity import (
    SEED_BYTES,
    ClusterIdentity,
    IdentityError,
    _derive,
    insecure_identity,
    read_cluster_key,
    write_secret_file,
)
from shared.settings import Settings

SERVICES = ("secrets", "workspace", "scheduler")
_CERT = b"trellis service certificate v1"


def certificate_message(service: str, public: bytes) -> bytes:
    return _CERT + b"\x00" + service.encode() + b"\x00" + public


@dataclass(frozen=True, slots=True)
class ServiceKey:
    """One service's signing key, its certificate, and the key that seals its API tickets."""

    service: str
    signing_key: Ed25519PrivateKey
    certificate: bytes
    ticket_key: bytes

    @property
    def public(self) -> bytes:
        return self.signing_key.public_key().public_bytes_raw()

    @property
    def seed(self) -> bytes:
        return self.signing_key.private_bytes_raw()


def _from_seed(service: str, seed: bytes, certificate: bytes) -> ServiceKey:
    signing = Ed25519PrivateKey.from_private_bytes(seed)
    return ServiceKey(service, signing, certificate, _derive(seed, b"api session tickets"))


def derive_service_key(identity: ClusterIdentity, service: str) -> ServiceKey:
    """The key of `service` from the cluster key (only its holders can do this)."""
    if service not in SERVICES:
        raise IdentityError(f"unknown service {service!r}")
    cluster = identity.signing_key
    if cluster is None:
        raise IdentityError("deriving a service key needs the cluster key")
    root = cluster.private_bytes_raw()
    seed = root if service == "secrets" else _derive(root, b"service identity: " + service.encode())
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    return _from_seed(service, seed, cluster.sign(certificate_message(service, public)))


def verify_service(
    cluster_public: Ed25519PublicKey, service: str, public: bytes, certificate: bytes
) -> Ed25519PublicKey:
    """The certified key of `service`; InvalidSignature unless the cluster key certified
    `public` for exactly that service."""
    cluster_public.verify(certificate, certificate_message(service, public))
    try:
        return Ed25519PublicKey.from_public_bytes(public)
    except ValueError:
        raise InvalidSignature("malformed service key") from None


def write_service_key(path: Path, key: ServiceKey) -> None:
    doc = {
        "service": key.service,
        "seed": base64.b64encode(key.seed).decode(),
        "certificate": base64.b64encode(key.certificate).decode(),
    }
    write_secret_file(path, json.dumps(doc) + "\n")


def read_service_key(path: Path | str, service: str) -> ServiceKey:
    try:
        doc = json.loads(Path(path).read_text())
        seed = base64.b64decode(doc["seed"], validate=True)
        cert = base64.b64decode(doc["certificate"], validate=True)
        named = str(doc["service"])
    except OSError as exc:
        raise IdentityError(f"cannot read the service key file {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise IdentityError(f"the service key file {path} is malformed") from None
    if named != service:
        raise IdentityError(f"the service key file {path} is for {named!r}, not {service!r}")
    if len(seed) != SEED_BYTES:
        raise IdentityError(f"the service key in {path} must be {SEED_BYTES} bytes")
    return _from_seed(service, seed, cert)


def load_service_key(settings: Settings, service: str) -> ServiceKey:
    """This process's key as `service`: its own key file, else derived from the cluster key
    file, else (insecure bus) from the name-derived key."""
    if settings.service_key_file:
        return read_service_key(settings.service_key_file, service)
    if settings.cluster_key_file:
        return derive_service_key(read_cluster_key(settings.cluster_key_file), service)
    if settings.insecure_bus:
        return derive_service_key(insecure_identity(settings.cluster_name), service)
    raise IdentityError(
        f"no {service} service identity: set service_key_file (or cluster_key_file), "
        "or run with --insecure-bus on a throwaway cluster"
    )


def main(argv: list[str]) -> None:
    """`python -m shared.service_identity DIR`: workspace.key and scheduler.key from
    DIR/cluster.key, one file per service, to mount into that service's pods only."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m shared.service_identity DIR")
    folder = Path(argv[0])
    try:
        identity = read_cluster_key(folder / "cluster.key")
    except IdentityError as exc:
        raise SystemExit(str(exc)) from None
    for service in SERVICES[1:]:
        write_service_key(folder / f"{service}.key", derive_service_key(identity, service))
    print(f"wrote workspace.key and scheduler.key to {folder}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

"""What the PKI engine keeps in its mount's (barrier-encrypted) storage.

Layout: `issuer/<id>`, `key/<id>` (private keys, PKCS#8), `config/issuers`, `config/keys`,
`config/urls`, `config/crl`, `config/cluster`, `role/<name>`, `certs/<serial>` (issued
certificates, serial with dashes), `revoked/<serial>`, `crl/<issuer id>` (the signed CRL and the
revocations it lists), `tidy/status`.
"""

from __future__ import annotations

import msgspec

DEFAULT_USAGE = ["read-only", "issuing-certificates", "crl-signing", "ocsp-signing"]


class KeyEntry(msgspec.Struct, kw_only=True):
    id: str
    name: str = ""
    key_type: str
    key_bits: int
    private_key: str  # PKCS#8 PEM; never returned after creation
    fingerprint: str  # SHA-256 of the public key: pairs keys with issuer certificates


class IssuerEntry(msgspec.Struct, kw_only=True):
    id: str
    name: str = ""
    key_id: str = ""
    certificate: str
    serial_number: str
    subject: str = ""
    common_name: str = ""
    not_before: int = 0
    not_after: int = 0
    is_ca: bool = True
    self_issued: bool = False
    max_path_length: int = -1
    key_type: str = ""
    key_bits: int = 0
    fingerprint: str = ""
    cert_key_usage: list[str] = []
    # Issuer ids above this one (computed from signatures at import), and the PEM chain
    # (this certificate first) served with everything it issues.
    parents: list[str] = []
    ca_chain: list[str] = []
    chain_self_signed: list[bool] = []  # per ca_chain entry: a self-signed root?
    manual_chain: list[str] | None = None
    leaf_not_after_behavior: str = "err"
    usage: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_USAGE))
    revocation_signature_algorithm: str = ""
    issuing_certificates: list[str] = []
    crl_distribution_points: list[str] = []
    delta_crl_distribution_points: list[str] = []
    ocsp_servers: list[str] = []
    enable_aia_url_templating: bool = False
    revoked: bool = False
    revocation_time: int = 0
    created: float = 0.0


class IssuersConfig(msgspec.Struct, kw_only=True):
    default: str = ""
    default_follows_latest_issuer: bool = False


class KeysConfig(msgspec.Struct, kw_only=True):
    default: str = ""


class UrlsConfig(msgspec.Struct, kw_only=True):
    issuing_certificates: list[str] = []
    crl_distribution_points: list[str] = []
    delta_crl_distribution_points: list[str] = []
    ocsp_servers: list[str] = []
    enable_templating: bool = False


class ClusterConfig(msgspec.Struct, kw_only=True):
    path: str = ""
    aia_path: str = ""


class CrlConfig(msgspec.Struct, kw_only=True):
    expiry: int = 72 * 3600
    disable: bool = False
    ocsp_disable: bool = False
    ocsp_expiry: int = 12 * 3600
    auto_rebuild: bool = False
    auto_rebuild_grace_period: int = 12 * 3600
    enable_delta: bool = False
    delta_rebuild_interval: int = 15 * 60
    # OpenBao's switch: revoke (and list on the CRL) certificates that have already expired.
    allow_expired_cert_revocation: bool = False


class CertEntry(msgspec.Struct, kw_only=True):
    serial_number: str
    certificate: str
    issuer_id: str = ""
    not_after: int = 0


class RevokedCert(msgspec.Struct, kw_only=True):
    serial_number: str
    revocation_time: float
    issuer_id: str = ""
    not_after: int = 0
    certificate: str = ""


class CrlRevocation(msgspec.Struct, array_like=True):
    serial_number: str
    revocation_time: int
    not_after: int = 0


class CrlState(msgspec.Struct, kw_only=True):
    """One issuer's CRL: the revocations it lists are kept with it, so a revocation rewrites
    one entry instead of re-reading every revoked certificate (vault#9176)."""

    number: int = 0
    revoked: list[CrlRevocation] = []
    pem: str = ""
    this_update: int = 0
    next_update: int = 0


class TidyStatus(msgspec.Struct, kw_only=True):
    safety_buffer: int = 0
    tidy_cert_store: bool = False
    tidy_revoked_certs: bool = False
    state: str = "Inactive"
    error: str | None = None
    time_started: str | None = None
    time_finished: str | None = None
    message: str | None = None
    cert_store_deleted_count: int = 0
    revoked_cert_deleted_count: int = 0
    current_cert_store_count: int = 0
    current_revoked_cert_count: int = 0

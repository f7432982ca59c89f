"""Text helpers for certificates the crypto worker produced: PEM <-> base64 DER, serial number
spellings, and the response formats (`pem`, `der`, `pem_bundle`). No cryptography runs here."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re

from services.secrets.errors import bad_request

_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.S)
FORMATS = ("pem", "der", "pem_bundle")


def blocks(text: str) -> list[tuple[str, str]]:
    """(kind, normalised PEM) of every block in `text`."""
    return [
        (kind, f"-----BEGIN {kind}-----\n{body.strip()}\n-----END {kind}-----")
        for kind, body in _BLOCK.findall(text)
    ]


def der_b64(pem: str) -> str:
    """The base64 DER inside a PEM block, on one line (Vault's `der` format)."""
    m = _BLOCK.search(pem)
    return "".join(m.group(2).split()) if m else ""


def der_bytes(pem: str) -> bytes:
    try:
        return base64.b64decode(der_b64(pem))
    except binascii.Error:
        return b""


def trim(pem: str) -> str:
    return pem.strip()


def check_format(fmt: str) -> str:
    f = (fmt or "pem").strip().lower()
    if f not in FORMATS:
        raise bad_request(f"unsupported format {fmt!r}: use pem, der or pem_bundle")
    return f


def check_key_format(fmt: str) -> str:
    f = (fmt or "der").strip().lower()
    if f not in ("der", "pkcs8"):
        raise bad_request(f"unsupported private_key_format {fmt!r}: use der or pkcs8")
    return f


def as_format(pem: str, fmt: str) -> str:
    return der_b64(pem) if fmt == "der" else trim(pem)


def normalize_serial(serial: str) -> str:
    """`AB:cd`, `ab-cd` or `abcd` -> `ab:cd` (colon-separated lowercase hex pairs)."""
    clean = serial.strip().lower().replace(":", "").replace("-", "")
    if not clean or not re.fullmatch(r"[0-9a-f]+", clean):
        raise bad_request(f"invalid serial number {serial!r}: expected hexadecimal")
    if len(clean) % 2:
        clean = "0" + clean
    return ":".join(clean[i : i + 2] for i in range(0, len(clean), 2))


def serial_key(serial: str) -> str:
    """Storage spelling of a serial (Vault keeps dashes)."""
    return normalize_serial(serial).replace(":", "-")


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def parse_time(text: str, field: str) -> int:
    """`YYYY-MM-ddTHH:MM:SSZ` (RFC 3339) -> unix seconds."""
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(
            f"cannot parse {field} {text!r}: use the UTC form YYYY-MM-ddTHH:MM:SSZ"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp())


def short_duration(seconds: int) -> str:
    """21600 -> "6h", 90 -> "1m30s", 0 -> "0s" (the seed's string durations)."""
    if seconds <= 0:
        return "0s"
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v)

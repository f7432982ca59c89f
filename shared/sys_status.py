"""The answers of sys/health, sys/seal-status and sys/leader, computed from a SecretsState: the
secrets service and the gateway (which answers them from published state) share this code, so
the two can never word them differently."""

from __future__ import annotations

import json
import time
from urllib.parse import parse_qs

import msgspec

from shared.secrets_state import SecretsState

VERSION = "1.17.0+trellis"
BUILD_DATE = "2026-11-21T00:00:00Z"


class HealthCodes(msgspec.Struct, kw_only=True):
    """sys/health's query parameters (as OpenBao's)."""

    standbyok: bool = False
    perfstandbyok: bool = False
    activecode: int = 200
    standbycode: int = 429
    drsecondarycode: int = 472
    performancestandbycode: int = 473
    sealedcode: int = 503
    uninitcode: int = 501


_BOOLS = {"standbyok", "perfstandbyok"}
_CODES = {f for f in HealthCodes.__struct_fields__ if f not in _BOOLS}
_TRUE = {"1", "t", "true", "yes", "on", "y"}
_FALSE = {"", "0", "f", "false", "no", "off", "n"}
DEFAULT_CODES = HealthCodes()


def seal_status(state: SecretsState) -> dict[str, object]:
    out: dict[str, object] = {
        "type": state.seal_type,
        "initialized": state.initialized,
        "sealed": state.sealed,
        "t": state.threshold,
        "n": state.shares,
        "progress": state.progress,
        "nonce": state.nonce,
        "version": VERSION,
        # OpenBao's name for the build's date (Vault's build_date); `bao status` prints it.
        "commit_date": BUILD_DATE,
        "migration": False,
        "recovery_seal": state.recovery_seal,
        "storage_type": "jetstream",
    }
    if not state.sealed:
        out["cluster_name"] = state.cluster_name
        out["cluster_id"] = state.cluster_id
    return out


def health(state: SecretsState, codes: HealthCodes) -> tuple[int, dict[str, object]]:
    """(status, body). Every replica is active: there is no standby (see `leader`)."""
    if not state.initialized:
        status = codes.uninitcode
    elif state.dr_mode == "secondary":
        status = codes.drsecondarycode
    elif state.sealed:
        status = codes.sealedcode
    else:
        status = codes.activecode
    body = {
        "initialized": state.initialized,
        "sealed": state.sealed,
        "standby": False,
        "replication_performance_mode": "disabled",
        "replication_dr_mode": state.dr_mode,
        "server_time_utc": int(time.time()),
        "version": VERSION,
        "cluster_name": state.cluster_name if not state.sealed else "",
        "cluster_id": state.cluster_id if not state.sealed else "",
    }
    return status, body


# Every unsealed replica serves every request: there is no active node and no standby to
# forward to, which is what ha_enabled=false says (as OpenBao's single node does).
LEADER: dict[str, object] = {"ha_enabled": False}


def encode(body: dict[str, object]) -> bytes:
    """The bytes these endpoints have always answered (stdlib json's spacing)."""
    return json.dumps(body).encode()


def health_codes(query: str) -> HealthCodes | None:
    """sys/health's parameters from a query string, or None unless every parameter is one of
    them, given once, in a form whose meaning is certain (the service words everything else,
    errors included)."""
    if not query:
        return DEFAULT_CODES
    fields: dict[str, object] = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        if len(values) != 1:
            return None
        text = values[0].strip()
        if key in _BOOLS and text.lower() in _TRUE | _FALSE:
            fields[key] = text.lower() in _TRUE
        elif key in _CODES and text.isascii() and text.isdigit() and 200 <= int(text) <= 599:
            fields[key] = int(text)
        else:
            return None
    return HealthCodes(**fields)  # type: ignore[arg-type]

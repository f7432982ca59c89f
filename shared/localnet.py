"""Small blocking helpers for tools that set up clusters on this machine (`trellis dev`, the
drills, the benchmarks): a free loopback port, and a JSON request for setup steps."""

from __future__ import annotations

import json
import random
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any

# Ports handed out for listeners come from below the kernel's ephemeral range: a port the
# kernel picks for bind(0) is also what it gives outgoing connections as their source port, so
# between the pick and the listener's bind a client connection (many, in a test suite) could
# take it ("address already in use").
_LOW_PORT = 10_000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing holds now, outside the ephemeral range when the
    platform says where that is."""
    top = _ephemeral_low()
    for _ in range(64 if top > _LOW_PORT + 1_000 else 0):
        port = random.randrange(_LOW_PORT, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Extra CAs the setup requests trust (`trellis dev --tls` trusts its own dev CA).
_TLS: list[ssl.SSLContext] = []


def trust_ca(ca_file: str) -> None:
    """Verify https:// setup requests against `ca_file` (in addition to nothing else)."""
    _TLS[:] = [ssl.create_default_context(cafile=ca_file)]


def http_json(
    method: str,
    url: str,
    body: Any = None,
    token: str = "",
    timeout: float = 30.0,
    *,
    fresh: bool = False,
) -> tuple[int, Any]:
    """One blocking JSON request; the token goes both ways the three APIs read it. `fresh`:
    the answer must come from a service replica, not the gateway's copy of published state."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if fresh:
        req.add_header("Cache-Control", "no-cache")
    if token:
        req.add_header("X-Vault-Token", token)
        req.add_header("Authorization", f"Bearer {token}")
    try:
        ctx = _TLS[0] if _TLS and url.startswith("https:") else None
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, raw.decode(errors="replace")

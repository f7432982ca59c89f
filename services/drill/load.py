"""The drill load: concurrent clients (closed loop, or paced to a total rate) sending a mix of
KV v2 writes and reads, workspace creates and job registers through every gateway replica,
with a bounded duration and request count. Every acknowledged write goes into the ledger."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from services.drill.cluster import Gateway
from services.drill.ledger import Ledger, Verification, Write
from services.drill.stats import Sample

JSONAPI = "application/vnd.api+json"
# Ops that may be re-sent to another gateway when the first one dropped the connection: the
# same KV write (same key, same data) or job register twice leaves the same state.
RESENDABLE = frozenset({"kv_write", "kv_read", "job_register"})


@dataclass
class LoadConfig:
    clients: int = 16
    rate: float = 0.0  # total requests/s; 0 = closed loop
    duration: float = 30.0
    max_requests: int = 1_000_000
    mix: dict[str, int] = field(
        default_factory=lambda: {"kv_write": 4, "kv_read": 3, "ws_create": 1, "job_register": 1}
    )
    timeout: float = 15.0  # client-side, above the gateway's request timeout


class Clock:
    """Seconds since the drill began, shared by the load, the faults and the report."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0


@dataclass
class Load:
    gateways: list[Gateway]
    token: str
    clock: Clock
    cfg: LoadConfig
    org: str = ""
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    samples: list[Sample] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)
    statuses: Counter[int] = field(default_factory=Counter)
    _kv_keys: list[tuple[str, int]] = field(default_factory=list)
    _rr: int = 0
    _sent: int = 0

    # --- one request, with client-side load balancing over the gateway replicas -------------

    async def _call(
        self,
        session: aiohttp.ClientSession,
        op: str,
        api: str,
        method: str,
        path: str,
        body: Any = None,
    ) -> tuple[int, Any]:
        headers = {"X-Vault-Token": self.token, "Authorization": f"Bearer {self.token}"}
        if api == "workspace":
            headers["Content-Type"] = JSONAPI
        # Start at the next gateway in turn and fall through the others, like a load balancer
        # that skips a dead backend.
        first = self._rr
        self._rr += 1
        status, doc = 0, None
        for i in range(len(self.gateways)):
            gw = self.gateways[(first + i) % len(self.gateways)]
            url = getattr(gw, api) + path
            try:
                async with session.request(method, url, json=body, headers=headers) as r:
                    status = r.status
                    doc = await r.json(content_type=None) if r.status < 300 else None
                    return status, doc
            except aiohttp.ClientConnectorError:
                continue  # nothing was sent (the gateway is down): always safe to try the next
            except (TimeoutError, aiohttp.ClientError):
                if op in RESENDABLE:
                    continue
                return 0, None
        return status, doc

    async def _op(self, session: aiohttp.ClientSession, client: int, n: int, op: str) -> None:
        key = f"{self.run}/c{client}/{n}"
        if op == "kv_read" and not self._kv_keys:
            op = "kv_write"
        t0 = self.clock.now()
        if op == "kv_write":
            status, _ = await self._call(
                session,
                op,
                "secrets",
                "POST",
                f"/v1/secret/data/drill/{key}",
                {"data": {"v": n}},
            )
            if status == 200:
                self.ledger.ack("kv", key, n, self.clock.now())
                self._kv_keys.append((key, n))
        elif op == "kv_read":
            rk, _ = random.choice(self._kv_keys)
            status, _ = await self._call(
                session, op, "secrets", "GET", f"/v1/secret/data/drill/{rk}"
            )
        elif op == "ws_create":
            name = f"w-{key.replace('/', '-')}"
            status, _ = await self._call(
                session,
                op,
                "workspace",
                "POST",
                f"/api/v2/organizations/{self.org}/workspaces",
                {"data": {"type": "workspaces", "attributes": {"name": name}}},
            )
            if status == 201:
                self.ledger.ack("workspace", name, name, self.clock.now())
        else:
            job_id = f"j-{key.replace('/', '-')}"
            status, _ = await self._call(
                session, op, "scheduler", "POST", "/v1/jobs", {"Job": job_spec(job_id)}
            )
            if status == 200:
                self.ledger.ack("job", job_id, job_id, self.clock.now())
        self.samples.append(Sample(t0, self.clock.now(), op, status))
        self.statuses[status] += 1

    # --- the load ----------------------------------------------------------------------------

    async def run_for(
        self, duration: float | None = None, stop: asyncio.Event | None = None
    ) -> None:
        """Run until `duration` (default cfg.duration) passes, the request budget is spent, or
        `stop` is set."""
        ops = [op for op, w in self.cfg.mix.items() for _ in range(w)]
        end = self.clock.now() + (duration if duration is not None else self.cfg.duration)
        stop = stop or asyncio.Event()
        interval = self.cfg.clients / self.cfg.rate if self.cfg.rate else 0.0
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout)
        conn = aiohttp.TCPConnector(limit=self.cfg.clients * 2)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:

            async def client(i: int) -> None:
                next_at = self.clock.now() + random.random() * interval
                while (
                    self.clock.now() < end
                    and not stop.is_set()
                    and self._sent < self.cfg.max_requests
                ):
                    if interval:
                        # Pace to the target rate; a late client does not burst to catch up.
                        delay = next_at - self.clock.now()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        next_at = max(next_at + interval, self.clock.now())
                    self._sent += 1
                    # The global count keeps keys unique across several run_for calls.
                    await self._op(session, i, self._sent, random.choice(ops))

            await asyncio.gather(*(client(i) for i in range(self.cfg.clients)))

    async def acked_after(self, since: float, count: int, until: float, kind: str = "") -> None:
        """Until `count` (0: no count) writes (of `kind`, default any) were acknowledged after
        `since`, or the drill clock reaches `until`: a phase that ends on what it observed."""
        while self.clock.now() < until:
            acked = [w for w in self.ledger if w.acked_at > since and kind in ("", w.kind)]
            if count and len(acked) >= count:
                return
            await asyncio.sleep(0.1)

    # --- afterwards --------------------------------------------------------------------------

    async def verify(self, attempts: int = 5, deadline: float = 120.0) -> Verification:
        """Read back every acknowledged write (retrying 5xx: the cluster may still be settling);
        a write is lost if it is missing or holds a different value."""
        result = Verification()
        sem = asyncio.Semaphore(16)
        # Bounded, so a drill whose cluster never recovers still ends and says so.
        give_up = time.monotonic() + deadline
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:

            async def check(w: Write) -> None:
                async with sem:
                    if time.monotonic() > give_up:
                        result.unverified += 1
                        return
                    found = False
                    for attempt in range(attempts):
                        status, doc = await self._read_back(session, w)
                        if status == 200:
                            found = _matches(w, doc)
                            break
                        if status == 404:
                            break
                        await asyncio.sleep(0.2 * (attempt + 1))
                    result.record(w, found)

            await asyncio.gather(*(check(w) for w in self.ledger))
        return result

    async def _read_back(self, session: aiohttp.ClientSession, w: Write) -> tuple[int, Any]:
        if w.kind == "kv":
            return await self._call(
                session, "kv_read", "secrets", "GET", f"/v1/secret/data/drill/{w.key}"
            )
        if w.kind == "workspace":
            return await self._call(
                session,
                "kv_read",
                "workspace",
                "GET",
                f"/api/v2/organizations/{self.org}/workspaces/{w.key}",
            )
        return await self._call(session, "kv_read", "scheduler", "GET", f"/v1/job/{w.key}")

    def progress_line(self, label: str) -> str:
        recent = [s.latency for s in self.samples[-500:]]
        p99 = sorted(recent)[int(0.99 * (len(recent) - 1))] * 1000 if recent else 0.0
        errs = sum(v for k, v in self.statuses.items() if not 200 <= k < 300)
        return (
            f"{label} t={self.clock.now():5.1f}s req={len(self.samples)} acked={len(self.ledger)} "
            f"err={errs} p99={p99:.0f}ms"
        )


def _matches(w: Write, doc: Any) -> bool:
    if w.kind == "kv":
        return bool(doc) and doc.get("data", {}).get("data") == {"v": w.value}
    if w.kind == "workspace":
        return bool(doc) and doc["data"]["attributes"]["name"] == w.value
    return bool(doc) and doc.get("ID") == w.value


def job_spec(job_id: str) -> dict[str, Any]:
    """A small batch job for the mock driver (placement needs no real node)."""
    return {
        "ID": job_id,
        "Type": "batch",
        "Datacenters": ["dc1"],
        "TaskGroups": [
            {"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock", "Config": {"run_for": "1s"}}]}
        ],
    }


def create_org(gw: Gateway, token: str, name: str) -> None:
    from services.drill.cluster import http

    body = {
        "data": {"type": "organizations", "attributes": {"name": name, "email": "d@example.com"}}
    }
    code, doc = http("POST", f"{gw.workspace}/api/v2/organizations", body, token=token)
    if code not in (200, 201):
        raise SystemExit(f"cannot create organization {name}: {code} {doc}")

"""sys/health, sys/seal-status and sys/leader answered by the gateway from the state the secrets
replicas publish (shared/secrets_state.py), without a bus round trip.

Never a different answer than the service would give: the gateway answers only while every
replica it has heard from within STALE seconds reports the same state, only plain GETs of exactly
those paths with parameters whose meaning is certain, and forgets everything it knows whenever a
request that may change the state (init, unseal, seal, rekey, DR replication) went through or no
replica answered a request. Otherwise the request is forwarded as any other."""

from __future__ import annotations

import time
from collections.abc import Mapping

import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.aio.msg import Msg

from shared import subjects, sys_status
from shared.bus import Bus
from shared.secrets_state import MAX_SKEW, SecretsState, open_record

log = structlog.get_logger("gateway")

# Three missed heartbeats (services/secrets/core/state_publisher.py): that replica is gone.
STALE = 3.0

PATHS = {"/v1/sys/health": "health", "/v1/sys/seal-status": "seal", "/v1/sys/leader": "leader"}
# sys/ writes after which the published state may have changed (and the records in flight not).
_CHANGES = (
    "/v1/sys/init",
    "/v1/sys/unseal",
    "/v1/sys/seal",
    "/v1/sys/rekey",
    "/v1/sys/replication/",
)
_NAMESPACE = ("x-vault-namespace", "x-svc-namespace")
_LEADER = sys_status.encode(sys_status.LEADER)
# Distinct health queries remembered within one second (monitors use one or two).
_HEALTH_QUERIES = 32
# Replicas remembered before the long-gone ones are dropped.
_NODES = 16

Answer = tuple[int, bytes]


class LocalStatus:
    def __init__(self, public_key: Ed25519PublicKey, cluster: str) -> None:
        self._public = public_key
        self._cluster = cluster
        # node -> (state, received, epoch): a record from before the last `forget` (an older
        # epoch) still says the replica is there, but not what it answers now.
        self._states: dict[str, tuple[SecretsState, float, int]] = {}
        self._epoch = 0
        # node -> (highest sequence seen, when), kept after it leaves: replays are refused.
        self._seqs: dict[str, tuple[int, float]] = {}
        self._agreed: SecretsState | None = None
        self._fresh_until = 0.0
        self._seal_body = b""
        # sys/health's answers by query string, for the current second of the current state:
        # encoding the body was the largest item of a local answer.
        self._health: dict[str, Answer | None] = {}
        self._health_second = 0

    async def subscribe(self, bus: Bus) -> None:
        async def on_message(msg: Msg) -> None:
            self.receive(msg.data)

        await bus.nc.subscribe(subjects.SECRETS_STATE.on(self._cluster), cb=on_message)

    def receive(self, data: bytes) -> None:
        record = open_record(self._public, self._cluster, data)
        if record is None:
            log.warning("secrets state refused: not signed by the cluster key, or too old")
            return
        now = time.monotonic()
        if record.seq <= self._seqs.get(record.node, (0, now))[0]:
            return
        if record.node not in self._seqs and len(self._seqs) >= _NODES:
            # Replicas unheard for this long are gone; their records are refused as too old.
            cutoff = now - 2 * MAX_SKEW
            self._seqs = {n: v for n, v in self._seqs.items() if v[1] > cutoff}
        self._seqs[record.node] = (record.seq, now)
        if record.state is None:
            self._states.pop(record.node, None)
        else:
            self._states[record.node] = (record.state, now, self._epoch)
        self._settle(now)

    def forget(self, *, gone: bool = False) -> None:
        """Answer nothing until every replica publishes again (`gone`: no replica is left)."""
        if gone:
            self._states.clear()
        self._epoch += 1
        self._settle(time.monotonic())

    @staticmethod
    def changes_state(method: str, path: str) -> bool:
        return method not in ("GET", "HEAD") and path.startswith(_CHANGES)

    def _settle(self, now: float) -> None:
        self._states = {n: v for n, v in self._states.items() if now - v[1] < STALE}
        agreed = {state for state, _, _ in self._states.values()}
        outdated = any(epoch != self._epoch for _, _, epoch in self._states.values())
        if len(agreed) != 1 or outdated:
            self._agreed, self._fresh_until = None, 0.0
            return
        (state,) = agreed
        if state != self._agreed:
            self._seal_body = sys_status.encode(sys_status.seal_status(state))
            self._health.clear()
        self._agreed = state
        self._fresh_until = min(received for _, received, _ in self._states.values()) + STALE

    def current(self) -> SecretsState | None:
        """The state every live replica reports, or None."""
        now = time.monotonic()
        if now >= self._fresh_until:
            if not self._states:
                return None
            self._settle(now)
            if now >= self._fresh_until:
                return None
        return self._agreed

    def answer(
        self, method: str, path: str, query: str, headers: Mapping[str, str]
    ) -> Answer | None:
        """(status, JSON body) for one of the three endpoints, or None: forward the request."""
        kind = PATHS.get(path)
        if kind is None or method != "GET" or any(h in headers for h in _NAMESPACE):
            return None
        if "no-cache" in headers.get("cache-control", ""):
            return None  # the caller asks a replica itself (a restarted one may not have spoken)
        state = self.current()
        if state is None:
            return None
        if kind == "health":
            return self._health_answer(state, query)
        if query:
            return None
        if kind == "seal":
            return 200, self._seal_body
        return 200, _LEADER  # a DR secondary too (services/secrets/core/dispatch.py)

    def _health_answer(self, state: SecretsState, query: str) -> Answer | None:
        second = int(time.time())
        if second != self._health_second or len(self._health) > _HEALTH_QUERIES:
            self._health.clear()
            self._health_second = second
        if query in self._health:
            return self._health[query]
        codes = sys_status.health_codes(query)
        answer = None
        if codes is not None:
            status, body = sys_status.health(state, codes)
            answer = status, sys_status.encode(body)
        self._health[query] = answer
        return answer

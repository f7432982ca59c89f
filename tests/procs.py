"""Trellis processes for end-to-end and chaos tests: real `trellis` subprocesses."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from services.dev_launch import ROOT, popen_dev, stop_process
from services.supervisor import direct_children
from tests.conftest import free_port


@dataclass
class DevProcess:
    proc: subprocess.Popen[str]
    secrets: str
    workspace: str
    scheduler: str
    root_token: str
    unseal_key: str
    output: list[str]
    ca_file: str = ""  # `--tls`: the dev CA clients must trust

    def stop(self) -> int:
        return stop_process(self.proc, signal.SIGINT, 40)

    @property
    def nats_url(self) -> str:
        """The NATS address the banner printed."""
        return banner_value(self.output, r"NATS:\s+(\S+)", "NATS address")

    @property
    def data_dir(self) -> str:
        """The data dir the banner printed ("Trellis is running ..., data in DIR, ...")."""
        return banner_value(self.output, r"Trellis is running.*data in (\S+),", "data dir")

    @property
    def gateway_metrics(self) -> list[str]:
        """Each gateway process's own /metrics URL (the banner's "Gateways:" line): with
        several, a listener's /metrics counts only the process that took the connection."""
        line = banner_value(self.output, r"(Gateways:.*)", "gateways line")
        return re.findall(r"http://\S+/metrics", line)


def banner_value(output: list[str], pattern: str, what: str) -> str:
    """The first group of the first banner line `pattern` matches (from its start)."""
    for line in output:
        if m := re.match(pattern, line):
            return m.group(1)
    raise AssertionError(f"trellis dev printed no {what}:\n" + "".join(output))


def start_dev(*args: str, timeout: float = 120.0, default_replicas: bool = False) -> DevProcess:
    """Start `trellis dev` and wait for its banner. One secrets replica and one crypto worker
    unless `args` name a count or `default_replicas` keeps dev's own (two of each on 2 CPUs): a
    replica's start costs ~1.5 s of CPU, and most tests start their own dev. The session's
    shared dev (tests/conftest.py), the replica, key-ceremony and transit tests run the
    default."""
    if not default_replicas:
        for flag in ("--secrets-replicas", "--crypto-processes"):
            if flag not in args:
                args = (*args, flag, "1")
    ports = [free_port() for _ in range(3)]
    proc = popen_dev(ports, *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    token = key = ca = ""
    # The banner says http:// or https:// (`--tls`); default to what the ports imply.
    urls = {
        name: f"http://127.0.0.1:{port}"
        for name, port in zip(("Secrets", "Workspace", "Scheduler"), ports, strict=True)
    }
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line)
        if m := re.match(r"Root Token: (\S+)", line):
            token = m.group(1)
        if m := re.match(r"Unseal Key: (\S+)", line):
            key = m.group(1)
        if m := re.match(r"(Secrets|Workspace|Scheduler) API:\s+(\S+)", line):
            urls[m.group(1)] = m.group(2)
        if m := re.match(r"CA certificate: (\S+)", line):
            ca = m.group(1)
        if line.startswith("Press Ctrl-C") or time.monotonic() > deadline:
            break
    if not token:
        proc.kill()
        raise AssertionError("trellis dev did not start:\n" + "".join(out))
    return DevProcess(
        proc, urls["Secrets"], urls["Workspace"], urls["Scheduler"], token, key, out, ca
    )


@contextlib.contextmanager
def dev(*args: str, default_replicas: bool = False) -> Iterator[DevProcess]:
    d = start_dev(*args, default_replicas=default_replicas)
    try:
        yield d
    finally:
        d.stop()


def spawn_service(
    name: str, nats_url: str, cluster: str, log_dir: Path, *, health_port: int = 0, **env: str
) -> subprocess.Popen[bytes]:
    """`trellis run <name>`, its output in a log file under `log_dir`; its /healthz and
    /readyz on `health_port` (a free port when 0)."""
    log = open(log_dir / f"{name}-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.cli",
            "run",
            name,
            "--health-addr",
            f"127.0.0.1:{health_port or free_port()}",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TRELLIS_NATS_URL": nats_url,
            "TRELLIS_CLUSTER_NAME": cluster,
            "TRELLIS_LOG_JSON": "false",
            # The session's NATS admits anyone; the cluster key is the name-derived one.
            "TRELLIS_INSECURE_BUS": "true",
            **env,
        },
    )


def server_config(
    nats_url: str, tmp_path: Path, prefix: str = "srv", log_json: bool = True
) -> tuple[Path, list[int]]:
    """A `trellis server` config on free ports (secrets, workspace, scheduler) and the ports."""
    ports = [free_port() for _ in range(3)]
    cfg = tmp_path / "trellis.yaml"
    cfg.write_text(
        f"nats_url: {nats_url}\n"
        f"cluster_name: {prefix}{ports[0]}\n"
        f"secrets_addr: 127.0.0.1:{ports[0]}\n"
        f"workspace_addr: 127.0.0.1:{ports[1]}\n"
        f"scheduler_addr: 127.0.0.1:{ports[2]}\n"
        f"cluster_addr: 127.0.0.1:{free_port()}\n"
        + ("log_json: true\n" if log_json else "")
        # The session's NATS admits anyone (tests/security covers the refusal).
        + "insecure_bus: true\n"
    )
    return cfg, ports


def start_server(cfg: Path, *wrapper: str) -> subprocess.Popen[bytes]:
    """`trellis server --config cfg` (under `wrapper`, e.g. unshare), its output discarded."""
    return subprocess.Popen(
        [*wrapper, sys.executable, "-m", "services.cli", "server", "--config", str(cfg)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_http(url: str, timeout: float = 60.0, ok: tuple[int, ...] = (200,)) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, timeout=2).status_code in ok:
                return
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready in {timeout}s")


def until(
    pred: Callable[[], Any], timeout: float = 60.0, what: str = "condition", interval: float = 0.2
) -> Any:
    """Poll `pred` until it returns something true (returned) or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(interval)
    doc = f" ({pred.__doc__})" if pred.__doc__ else ""
    raise AssertionError(f"{what} not met within {timeout:.0f}s{doc}")


def wait_node_ready(d: DevProcess, timeout: float = 60.0) -> None:
    """The banner comes before the scheduler and the client node are up: wait for a ready node
    (the scheduler answers and the dev client registered), as a first job needs."""

    def ready() -> bool:
        with contextlib.suppress(requests.RequestException, ValueError):
            r = requests.get(
                d.scheduler + "/v1/nodes", headers={"X-Nomad-Token": d.root_token}, timeout=10
            )
            return r.status_code == 200 and any(n["Status"] == "ready" for n in r.json())
        return False

    until(ready, timeout, what="a ready client node")


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children before their own children."""
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in direct_children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def proc_state(pid: int) -> str:
    """The state letter of `pid` in /proc (R, S, Z...); "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """`pid` runs (a zombie does not count)."""
    return proc_state(pid) not in ("", "Z")


def dev_client_agent(nats_url: str, service: str = "client") -> tuple[int, dict[str, str]]:
    """The pid and environment of the dev client agent (or another `service`) on `nats_url`,
    read from /proc."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"services.cli" not in cmd or service.encode() not in cmd:
                continue
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        env = dict(
            item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item
        )
        if env.get("TRELLIS_NATS_URL") == nats_url:
            return int(pid), env
    raise AssertionError(f"the dev {service} process was not found")

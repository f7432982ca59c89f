"""CPU per request of the secrets service's own work: `handle_http` (routing, token, ACL, the
handler, its storage reads, the reply) called in-process against a live core on a private
nats-server, without the gateway, the bus hop or the session layer around it.

    python bench/secrets_handlers.py [--n 3000] [--clients 16] [--reps 3] [--only kv-read,...]

Prints microseconds of this process's CPU per call (min and median over the repetitions), for
the root token and a policy token. The figure moves far less with machine load than the CPU a
whole `trellis dev` spends per request; compare two trees by running this in each.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.dev_launch import stop_process
from services.secrets.core.dispatch import handle_http
from shared.messages import HttpRequest
from tests.conftest import start_nats
from tests.harness import Cluster, start_cluster

PLAIN = base64.b64encode(b"x" * 64).decode()
POLICY = """
path "kv/data/bench" { capabilities = ["read"] }
path "auth/token/lookup-self" { capabilities = ["read"] }
path "transit/*" { capabilities = ["update"] }
"""
WORKLOADS = ("kv-read", "lookup-self", "encrypt", "decrypt", "sign-ed25519")


async def _call(cluster: Cluster, method: str, path: str, body: Any = None) -> Any:
    status, answer = await cluster.request(method, path, token=cluster.root_token, json=body)
    if status not in (200, 204):
        raise RuntimeError(f"{method} {path}: {status} {answer}")
    return answer


async def _prepare(cluster: Cluster) -> tuple[dict[str, tuple[str, str, Any]], str]:
    """The fixtures; returns each workload's (method, path, body) and a policy token."""
    await _call(cluster, "POST", "/v1/sys/mounts/kv", {"type": "kv", "options": {"version": "2"}})
    secret = {"data": {"username": "bench", "password": "p" * 32}}
    await _call(cluster, "POST", "/v1/kv/data/bench", secret)
    await _call(cluster, "POST", "/v1/sys/mounts/transit", {"type": "transit"})
    for name, kind in (("aes", "aes256-gcm96"), ("ed", "ed25519")):
        await _call(cluster, "POST", f"/v1/transit/keys/{name}", {"type": kind})
    sealed = await _call(cluster, "POST", "/v1/transit/encrypt/aes", {"plaintext": PLAIN})
    await _call(cluster, "PUT", "/v1/sys/policies/acl/bench", {"policy": POLICY})
    created = await _call(
        cluster, "POST", "/v1/auth/token/create", {"policies": ["bench"], "ttl": "24h"}
    )
    workloads = {
        "kv-read": ("GET", "/v1/kv/data/bench", None),
        "lookup-self": ("GET", "/v1/auth/token/lookup-self", None),
        "encrypt": ("POST", "/v1/transit/encrypt/aes", {"plaintext": PLAIN}),
        "decrypt": (
            "POST",
            "/v1/transit/decrypt/aes",
            {"ciphertext": sealed["data"]["ciphertext"]},
        ),
        "sign-ed25519": ("POST", "/v1/transit/sign/ed", {"input": PLAIN}),
    }
    return workloads, created["auth"]["client_token"]


def _request(shape: tuple[str, str, Any], token: str, i: int) -> HttpRequest:
    method, path, body = shape
    return HttpRequest(
        method=method,
        path=path,
        headers={"x-vault-token": token, "content-type": "application/json"},
        body=json.dumps(body).encode() if body is not None else b"",
        remote_addr="127.0.0.1",
        request_id=f"bench-{i}",
    )


async def _cpu_per_call(cluster: Cluster, requests: list[HttpRequest], clients: int) -> float:
    """µs of CPU per `handle_http` call, `clients` callers at a time."""
    core = cluster.secrets[0].core
    assert core is not None
    todo = iter(requests)

    async def client() -> None:
        for env in todo:
            answer = await handle_http(core, env)
            if answer.status != 200:
                raise RuntimeError(f"{env.path}: {answer.status} {answer.body!r}")

    started = time.process_time()
    await asyncio.gather(*(client() for _ in range(clients)))
    return (time.process_time() - started) / len(requests) * 1e6


async def run(args: argparse.Namespace) -> None:
    wanted = args.only.split(",") if args.only else list(WORKLOADS)
    data = tempfile.mkdtemp(prefix="trellis-bench-handlers-")
    nats, url, _ = start_nats(data)
    try:
        cluster = await start_cluster(url)
        try:
            workloads, policy_token = await _prepare(cluster)
            logging.disable(logging.CRITICAL)  # the per-request log lines are not the subject
            print(f"µs of CPU per handle_http call, {args.clients} callers, {args.n} calls")
            print(f"{'workload':14} {'token':7} {'min':>7} {'median':>7}")
            for key in wanted:
                for label, token in (("root", cluster.root_token), ("policy", policy_token)):
                    # Requests are built before the clock starts: only the dispatch is timed.
                    runs = []
                    for _ in range(args.reps):
                        batch = [_request(workloads[key], token, i) for i in range(args.n)]
                        runs.append(await _cpu_per_call(cluster, batch, args.clients))
                    print(f"{key:14} {label:7} {min(runs):7.1f} {statistics.median(runs):7.1f}")
        finally:
            logging.disable(logging.NOTSET)
            await cluster.close()
    finally:
        stop_process(nats, signal.SIGTERM, 10)
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="calls per repetition")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="", help=f"comma list of {', '.join(WORKLOADS)}")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

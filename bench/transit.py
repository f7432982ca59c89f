"""Transit throughput against OpenBao's transit on the same machine: encrypt, decrypt, sign with
Ed25519 and with RSA-2048, the same closed-loop Python load for both servers, interleaved
(OpenBao, Trellis, OpenBao, Trellis...) so that machine noise hits both alike. The load carries
a token whose policy grants `update` on the transit paths, as an application's does (as
bench/vs_openbao.py's load); `--root-token` loads with the root token, which skips the ACL on both
(OpenBao's root shortcut is much cheaper than its ACL check).

    python bench/transit.py [--seconds 4] [--clients 32] [--rounds 2] [--load python|wrk]
                            [--root-token] [--secrets-replicas N] [--crypto-processes 2]
                            [--cpu-affinity auto|off] [--dev-arg=--gateways=1 ...]

Prints each operation's rate on both and the ratio Trellis / OpenBao (goal: each >= 1); with
`--load wrk` also the CPU each request cost on both, by Trellis process.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import closed_loop, trellis_dev
from bench.vs_openbao import CLK_TCK, cpu_per_request, process_ticks
from tests.openbao import openbao_dev

PLAIN = base64.b64encode(b"x" * 64).decode()
KEYS = {"aes": "aes256-gcm96", "ed": "ed25519", "rsa": "rsa-2048"}
# What an application that encrypts, decrypts and signs with these keys is granted.
POLICY = """
path "transit/encrypt/aes" { capabilities = ["update"] }
path "transit/decrypt/aes" { capabilities = ["update"] }
path "transit/sign/*" { capabilities = ["update"] }
"""

Call = Callable[[aiohttp.ClientSession, int], Awaitable[bool]]
IDLE_CORES = 0.05  # a server "at rest" spends less than this share of a core


async def prepare(base: str, token: str, *, root: bool = True) -> tuple[str, str]:
    """Mount transit, create the keys; returns a ciphertext to decrypt and the load's token:
    `token` (the root token) when `root`, else a new token with the policy POLICY."""
    hdr = {"X-Vault-Token": token}
    async with aiohttp.ClientSession(headers=hdr) as s:
        async with s.post(f"{base}/v1/sys/mounts/transit", json={"type": "transit"}) as r:
            assert r.status in (200, 204), await r.text()
        for name, kt in KEYS.items():
            async with s.post(f"{base}/v1/transit/keys/{name}", json={"type": kt}) as r:
                assert r.status in (200, 204), await r.text()
        async with s.post(f"{base}/v1/transit/encrypt/aes", json={"plaintext": PLAIN}) as r:
            ciphertext = (await r.json())["data"]["ciphertext"]
        if root:
            return ciphertext, token
        async with s.put(f"{base}/v1/sys/policies/acl/transit-bench", json={"policy": POLICY}) as r:
            assert r.status in (200, 204), await r.text()
        body = {"policies": ["transit-bench"], "ttl": "24h"}
        async with s.post(f"{base}/v1/auth/token/create", json=body) as r:
            assert r.status == 200, await r.text()
            return ciphertext, (await r.json())["auth"]["client_token"]


def requests_of(ciphertext: str) -> dict[str, tuple[str, dict[str, str]]]:
    return {
        "encrypt aes256-gcm96": ("encrypt/aes", {"plaintext": PLAIN}),
        "decrypt aes256-gcm96": ("decrypt/aes", {"ciphertext": ciphertext}),
        "sign ed25519": ("sign/ed", {"input": PLAIN}),
        "sign rsa-2048": ("sign/rsa", {"input": PLAIN}),
    }


def ops(base: str, token: str, ciphertext: str) -> dict[str, Call]:
    hdr = {"X-Vault-Token": token}

    def post(path: str, body: dict[str, str]) -> Call:
        url = f"{base}/v1/transit/{path}"

        async def call(session: aiohttp.ClientSession, n: int) -> bool:
            async with session.post(url, headers=hdr, json=body) as r:
                await r.read()
                return r.status == 200

        return call

    return {name: post(path, body) for name, (path, body) in requests_of(ciphertext).items()}


async def settle(root: int, window: float = 0.5, deadline: float = 10.0) -> None:
    """Wait until the processes under `root` are at rest, so that no run pays for work left from
    the one before (Trellis's crypto workers fill their RSA key pools once an RSA key is made)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline
    while loop.time() < give_up:
        before = sum(t for _, t in process_ticks(root).values())
        await asyncio.sleep(window)
        spent = sum(t for _, t in process_ticks(root).values()) - before
        if spent / CLK_TCK < IDLE_CORES * window:
            return
    print(f"  processes under {root} still busy after {deadline:g}s")


async def wrk_rate(
    base: str, token: str, path: str, body: dict[str, str], args: Any, root: int
) -> tuple[float, dict[str, float]]:
    """Requests per second `wrk` reaches (non-2xx answers counted as failures, printed), and
    the CPU ms each request cost in every process under `root`, by role."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(
            'wrk.method = "POST"\n'
            f"wrk.body = '{json.dumps(body)}'\n"
            'wrk.headers["Content-Type"] = "application/json"\n'
            f'wrk.headers["X-Vault-Token"] = "{token}"\n'
        )
    await settle(root)
    before = process_ticks(root)
    proc = await asyncio.create_subprocess_exec(
        "wrk",
        "-t2",
        f"-c{args.clients}",
        f"-d{args.seconds:g}s",
        "-s",
        f.name,
        f"{base}/v1/transit/{path}",
        stdout=asyncio.subprocess.PIPE,
    )
    out = (await proc.communicate())[0].decode()
    after = process_ticks(root)
    os.unlink(f.name)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if bad:
        print(f"  {base} {path}: {bad.group(1)} non-2xx answers")
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    n = re.search(r"(\d+) requests in", out)
    cpu = cpu_per_request(before, after, int(n.group(1)) if n else 0)
    return (float(m.group(1)) if m else 0.0), cpu


async def run(args: argparse.Namespace) -> int:
    extra = [
        "--services",
        "crypto",
        *(["--secrets-replicas", str(args.secrets_replicas)] if args.secrets_replicas else []),
        "--crypto-processes",
        str(args.crypto_processes),
        "--cpu-affinity",
        args.cpu_affinity,
        *args.dev_arg,
    ]
    with openbao_dev() as bao, trellis_dev(*extra) as dev:
        bao_ct, bao_token = await prepare(bao.addr, bao.token, root=args.root_token)
        tre_ct, tre_token = await prepare(dev.secrets, dev.root_token, root=args.root_token)
        bao_ops = ops(bao.addr, bao_token, bao_ct)
        tre_ops = ops(dev.secrets, tre_token, tre_ct)
        rates: dict[str, dict[str, float]] = {}
        cpu: dict[str, dict[str, float]] = {}
        if args.load == "wrk":
            sides = {
                "openbao": (bao.addr, bao_token, requests_of(bao_ct), bao.proc.pid),
                "trellis": (dev.secrets, tre_token, requests_of(tre_ct), dev.proc.pid),
            }
            for name in bao_ops:
                got: dict[str, list[float]] = {"openbao": [], "trellis": []}
                spent: dict[str, Counter[str]] = {"openbao": Counter(), "trellis": Counter()}
                for _ in range(args.rounds):
                    for side, (base, token, reqs, root) in sides.items():
                        path, body = reqs[name]
                        rate, ms = await wrk_rate(base, token, path, body, args, root)
                        got[side].append(rate)
                        spent[side].update(ms)
                rates[name] = {side: sum(v) / len(v) for side, v in got.items()}
                cpu[name] = {
                    "openbao": sum(spent["openbao"].values()) / args.rounds,
                    **{role: ms / args.rounds for role, ms in spent["trellis"].items()},
                }
        for name in bao_ops if args.load == "python" else ():
            totals = {"openbao": [0, 0.0, 0], "trellis": [0, 0.0, 0]}
            # A short warm-up on each, then interleaved rounds.
            await closed_loop("warm", args.clients, 0.5, bao_ops[name])
            await closed_loop("warm", args.clients, 0.5, tre_ops[name])
            for _ in range(args.rounds):
                for side, call, root in (
                    ("openbao", bao_ops[name], bao.proc.pid),
                    ("trellis", tre_ops[name], dev.proc.pid),
                ):
                    await settle(root)
                    res = await closed_loop(name, args.clients, args.seconds, call)
                    totals[side][0] += res.count
                    totals[side][1] += res.seconds
                    totals[side][2] += res.errors
            rates[name] = {}
            for side, (count, secs, errors) in totals.items():
                rates[name][side] = count / secs if secs else 0.0
                if errors:
                    print(f"  {side} {name}: {errors} errors")
    token = "the root token" if args.root_token else "a policy token"
    print(
        f"\ntransit, {args.load} load, {args.clients} clients, {args.rounds}x{args.seconds:g}s "
        f"each, interleaved, with {token}"
    )
    print(f"{'operation':24} {'openbao/s':>10} {'trellis/s':>10} {'ratio':>7}")
    worst = float("inf")
    for name, r in rates.items():
        ratio = r["trellis"] / r["openbao"] if r["openbao"] else 0.0
        worst = min(worst, ratio)
        goal = "ok" if ratio >= 1 else "BELOW GOAL"
        print(f"{name:24} {r['openbao']:10.0f} {r['trellis']:10.0f} {ratio:7.2f}  {goal}")
    if cpu:
        # Robust where the rates are not: a shared machine's load shifts the rates, not these.
        roles = ("gateway", "secrets", "crypto", "nats")
        print("\nCPU ms per request: openbao | trellis " + " / ".join(roles) + " -> total")
        for name, ms in cpu.items():
            parts = " / ".join(f"{ms.get(r, 0.0):.3f}" for r in roles)
            total = sum(v for k, v in ms.items() if k != "openbao")
            print(f"{name:24} {ms['openbao']:.3f} | {parts} -> {total:.3f}")
    return 0 if worst >= 1 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--secrets-replicas", type=int, default=0, help="default: trellis dev's (2 on 2 CPUs)"
    )
    parser.add_argument("--crypto-processes", type=int, default=2)
    parser.add_argument("--load", choices=("python", "wrk"), default="python")
    parser.add_argument(
        "--root-token", action="store_true", help="load with the root token, not a policy token"
    )
    parser.add_argument(
        "--cpu-affinity",
        default="off",
        help="`trellis dev --cpu-affinity` (default off, as trellis dev; 'auto' on 2 CPUs puts "
        "the gateways apart from the secrets replica and nats-server)",
    )
    parser.add_argument(
        "--dev-arg", action="append", default=[], help="an extra `trellis dev` argument"
    )
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()

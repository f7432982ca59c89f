"""PKI issuing throughput: certificates per second through the gateway (role with no_store) for
EC P-256 and RSA-2048 leaves, with 1 and 2 crypto worker processes, beside the raw rate of the
same key generation + signing with `cryptography` in one process, measured in the same run.

    python bench/pki.py [--duration 3] [--rsa-duration 6] [--concurrency 16] [--workers 1,2]

It starts its own nats-server, an in-process gateway + secrets service (tests/harness.py), crypto
worker processes (`python -m services.cli run crypto`), and runs the HTTP load and the raw
baseline each in a process of their own so that they do not share the services' event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = {"ec": ("ec", 256), "rsa": ("rsa", 2048)}


# ---- the raw baseline: one process, cryptography only ----------------------------------------
def raw_rate(kind: str, duration: float) -> dict[str, Any]:
    """Key generation + a leaf signed by an issuer of the same type, with the extensions the
    engine writes, PEM-encoded: what one issue costs without any of Trellis around it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def new_key() -> Any:
        if kind == "ec":
            return ec.generate_private_key(ec.SECP256R1())
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    issuer_key = new_key()
    issuer_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Bench Root")])
    aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key())
    now = dt.datetime.now(dt.UTC)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < duration:
        key = new_key()
        cn = f"h{count}.bench.test"
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(
                x509.KeyUsage(True, False, True, False, True, False, False, False, False),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                False,
            )
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(cn)]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .add_extension(aki, critical=False)
            .sign(issuer_key, hashes.SHA256())
        )
        cert.public_bytes(serialization.Encoding.PEM)
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        count += 1
    elapsed = time.perf_counter() - start
    return {"count": count, "seconds": elapsed, "rate": count / elapsed}


# ---- the HTTP load: its own process, N requests in flight -------------------------------------
async def load(
    url: str, token: str, kind: str, duration: float, concurrency: int
) -> dict[str, Any]:
    import aiohttp

    ok = errors = 0
    first_error = ""
    stop_at = time.perf_counter() + duration
    headers = {"X-Svc-Token": token}

    async def client(i: int, s: aiohttp.ClientSession) -> None:
        nonlocal ok, errors, first_error
        n = 0
        while time.perf_counter() < stop_at:
            if kind == "read":  # the ceiling: an authenticated PKI read, no crypto
                call = s.get(f"{url}/v1/pki_ec/roles/bench", headers=headers)
            else:
                body = {"common_name": f"c{i}-{n}.bench.test"}
                call = s.post(f"{url}/v1/pki_{kind}/issue/bench", json=body, headers=headers)
            async with call as r:
                text = await r.read()
                if r.status == 200:
                    ok += 1
                else:
                    errors += 1
                    first_error = first_error or f"{r.status} {text[:200]!r}"
            n += 1

    start = time.perf_counter()
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as s:
        await asyncio.gather(*(client(i, s) for i in range(concurrency)))
    elapsed = time.perf_counter() - start
    return {
        "ok": ok,
        "errors": errors,
        "seconds": elapsed,
        "rate": ok / elapsed,
        "first_error": first_error,
    }


async def run_child(args: list[str]) -> dict[str, Any]:
    """Run this script in a child process without blocking the services' event loop."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench child {args[:2]} failed: {err.decode()[-2000:]}")
    return json.loads(out.decode().strip().splitlines()[-1])


# ---- orchestration -------------------------------------------------------------------------
async def start_workers(
    nats_url: str, cluster: str, n: int, data_dir: str
) -> list[asyncio.subprocess.Process]:
    """n worker processes (each `--processes 1` with its own health port, so that the bench
    can wait until every one of them serves the queue group), with the crypto workers' NATS
    credentials and channel key from the dev cluster's data dir."""
    import aiohttp

    from services.dev_nats import existing
    from tests.conftest import free_port

    env = {
        **os.environ,
        **existing(Path(data_dir)).env_for("crypto"),
        "TRELLIS_NATS_URL": nats_url,
        "TRELLIS_CLUSTER_NAME": cluster,
        "TRELLIS_LOG_LEVEL": "warning",
    }
    procs, ports = [], []
    for _ in range(n):
        port = free_port()
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "services.cli",
                "run",
                "crypto",
                "--processes",
                "1",
                "--health-addr",
                f"127.0.0.1:{port}",
                cwd=ROOT,
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        )
        ports.append(port)
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as s:
        for port in ports:
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                        if r.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise RuntimeError("crypto workers did not become ready")
                await asyncio.sleep(0.1)
    return procs


async def stop_workers(procs: list[asyncio.subprocess.Process]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            await asyncio.wait_for(p.wait(), 10)
        except TimeoutError:
            p.kill()


class DevCluster:
    """`trellis dev` seen the way the bench needs it: gateway and secrets in their own
    processes, as in production, so the measurement is not one event loop doing everything."""

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self.secrets_url = dev.secrets
        self.root_token = dev.root_token
        self.nats_url = dev.nats_url
        self.cluster = dev.cluster
        self.data_dir = dev.data_dir

    async def request(self, method: str, path: str, json: Any = None) -> tuple[int, Any]:
        import aiohttp

        async with (
            aiohttp.ClientSession() as s,
            s.request(
                method,
                self.secrets_url + path,
                json=json,
                headers={"X-Vault-Token": self.root_token},
            ) as r,
        ):
            body = await r.json(content_type=None) if r.content_length != 0 else None
            return r.status, body


async def setup_pki(c: DevCluster) -> None:
    # A temporary worker process creates the roots; the measured workers are started later.
    setup = await start_workers(c.nats_url, c.cluster, 1, c.data_dir)
    try:
        for kind, (key_type, bits) in KINDS.items():
            for path, body in (
                (f"sys/mounts/pki_{kind}", {"type": "pki", "config": {"max_lease_ttl": "87600h"}}),
                (
                    f"pki_{kind}/root/generate/internal",
                    {
                        "common_name": f"Bench {kind} Root",
                        "ttl": "8760h",
                        "key_type": key_type,
                        "key_bits": bits,
                    },
                ),
                (
                    f"pki_{kind}/roles/bench",
                    {
                        "allowed_domains": "bench.test",
                        "allow_subdomains": True,
                        "no_store": True,
                        "key_type": key_type,
                        "key_bits": bits,
                        "ttl": "1h",
                    },
                ),
            ):
                status, out = await c.request("POST", "/v1/" + path, json=body)
                if status not in (200, 204):
                    raise RuntimeError(f"{path}: {status} {out}")
    finally:
        await stop_workers(setup)


async def measure(c: DevCluster, kind: str, duration: float, concurrency: int) -> dict[str, Any]:
    args = [
        "--load",
        c.secrets_url,
        "--token",
        c.root_token,
        "--kind",
        kind,
        "--concurrency",
        str(concurrency),
    ]
    await run_child([*args, "--duration", "0.5"])  # warm up connections and caches
    return await run_child([*args, "--duration", str(duration)])


async def bench(
    duration: float, rsa_duration: float, concurrency: int, worker_counts: list[int]
) -> None:
    from bench._common import trellis_dev

    logging_quiet()
    seconds = {"ec": duration, "rsa": rsa_duration}
    with trellis_dev("--services", "none") as dev:
        c = DevCluster(dev)
        await setup_pki(c)
        print(
            f"# PKI issue throughput: {duration:g}s per EC case, {rsa_duration:g}s per RSA "
            f"case, {concurrency} requests in flight, {os.cpu_count()} CPUs"
        )
        raw = {k: await run_child(["--raw", k, "--duration", str(seconds[k])]) for k in KINDS}
        for k, r in raw.items():
            print(f"raw cryptography, one process, {k:4}: {r['rate']:8.1f} certs/s")
        ceiling = await measure(c, "read", duration, concurrency)
        print(f"gateway ceiling (authenticated role read): {ceiling['rate']:8.1f} req/s")
        rates: dict[tuple[int, str], float] = {}
        for n in worker_counts:
            procs = await start_workers(c.nats_url, c.cluster, n, c.data_dir)
            try:
                for k in KINDS:
                    r = await measure(c, k, seconds[k], concurrency)
                    rates[(n, k)] = r["rate"]
                    note = f"  ({r['errors']} errors: {r['first_error']})" if r["errors"] else ""
                    print(
                        f"gateway issue, {n} worker process(es), {k:4}: {r['rate']:8.1f} "
                        f"certs/s{note}"
                    )
            finally:
                await stop_workers(procs)
        print("# ratios (targets: EC >= 50% of raw; RSA-2048 >= 90% of raw per worker)")
        for (n, k), rate in sorted(rates.items()):
            print(
                f"{k:4} {n} worker(s): gateway/raw = {rate / raw[k]['rate']:6.1%}   per worker "
                f"= {rate / n / raw[k]['rate']:6.1%}   of the gateway ceiling = "
                f"{rate / ceiling['rate']:6.1%}"
            )
        for k in KINDS:
            if (1, k) in rates and (2, k) in rates:
                print(f"{k:4} 2 workers / 1 worker = {rates[(2, k)] / rates[(1, k)]:.2f}x")


def logging_quiet() -> None:
    from shared.logging import configure_logging

    configure_logging(json=False, level="warning")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per EC case")
    p.add_argument(
        "--rsa-duration",
        type=float,
        default=6.0,
        help="seconds per RSA case (RSA key generation time varies a lot)",
    )
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--workers", default="1,2", help="worker process counts to measure")
    p.add_argument("--raw", choices=sorted(KINDS), help=argparse.SUPPRESS)
    p.add_argument("--load", help=argparse.SUPPRESS)
    p.add_argument("--token", help=argparse.SUPPRESS)
    p.add_argument("--kind", choices=[*sorted(KINDS), "read"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.raw:
        print(json.dumps(raw_rate(a.raw, a.duration)))
    elif a.load:
        print(json.dumps(asyncio.run(load(a.load, a.token, a.kind, a.duration, a.concurrency))))
    else:
        asyncio.run(
            bench(
                a.duration,
                a.rsa_duration,
                a.concurrency,
                [int(x) for x in a.workers.split(",") if x.strip()],
            )
        )


if __name__ == "__main__":
    main()

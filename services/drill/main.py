"""`trellis drill <name>`: run one drill and print its report (text, or JSON with --json)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from services.drill.base import ALL_SERVICES, DrillOptions
from services.drill.report import dumps, format_report

DRILLS = ("scale", "chaos", "nats-failover", "network", "partition", "blocking", "crash")


def options_from_args(args: Any) -> DrillOptions:
    services = tuple(s.strip() for s in args.services.split(",") if s.strip())
    unknown = set(services) - set(ALL_SERVICES)
    if unknown:
        raise SystemExit(f"unknown services {sorted(unknown)}; choose from {ALL_SERVICES}")
    for needed in ("gateway", "secrets"):
        if needed not in services:
            services = (needed, *services)
    return DrillOptions(
        duration=args.duration,
        clients=args.clients,
        rate=args.rate,
        max_requests=args.max_requests,
        services=services,
        interval=args.interval,
        seed=args.seed,
        workdir=args.workdir,
        quiet=args.json and not sys.stderr.isatty(),
    )


async def run(name: str, opts: DrillOptions, **kw: Any) -> dict[str, Any]:
    if name == "chaos":
        from services.drill.chaos import run_chaos

        return await run_chaos(opts)
    if name == "nats-failover":
        from services.drill.failover import run_failover

        return await run_failover(opts, **kw)
    if name == "scale":
        from services.drill.scale import run_scale

        return await run_scale(opts, **kw)
    if name == "blocking":
        from services.drill.blocking import run_blocking

        return await run_blocking(opts, **kw)
    if name == "crash":
        from services.drill.crash import run_crash

        return await run_crash(opts)
    if name == "partition":
        from services.drill.partition import run_partition

        return await run_partition(opts)
    from services.drill.network import run_network

    return await run_network(opts)


def run_drill(args: Any) -> int:
    opts = options_from_args(args)
    kw: dict[str, Any] = {}
    if args.name == "nats-failover":
        kw["down"] = args.down
    if args.name == "blocking":
        kw["waiters"] = args.waiters
    if args.name == "scale":
        kw["steps"] = [int(x) for x in args.steps.split(",")]
    report = asyncio.run(run(args.name, opts, **kw))
    print(dumps(report) if args.json else format_report(report), flush=True)
    # Non-zero when the drill's goal was missed, so CI can run it as is.
    bad = ("lost_writes", "unexplained_errors", "unverified_writes", "not_recovered")
    missed = report.get("blocking", {}).get("goal_met") is False
    return 1 if missed or any(report.get(k) for k in bad) else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("drill", help="run a scale, chaos, NATS failover or network drill")
    p.add_argument("name", choices=DRILLS)
    p.add_argument("--duration", type=float, default=30.0, help="seconds of load (per step)")
    p.add_argument("--clients", type=int, default=16, help="concurrent clients")
    p.add_argument("--rate", type=float, default=0.0, help="total requests/s (0: closed loop)")
    p.add_argument("--max-requests", type=int, default=1_000_000, help="request budget")
    p.add_argument(
        "--services",
        default=",".join(ALL_SERVICES),
        help="comma list of gateway,secrets,crypto,workspace,scheduler",
    )
    p.add_argument("--interval", type=float, default=3.0, help="chaos: seconds between faults")
    p.add_argument("--down", type=float, default=10.0, help="nats-failover: seconds node is down")
    p.add_argument("--steps", default="1,2,4", help="scale: replica counts")
    p.add_argument("--waiters", type=int, default=10_000, help="blocking: queries held open")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--workdir", default="", help="keep logs and data here")
    p.add_argument("--json", action="store_true", help="print the report as JSON")

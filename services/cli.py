"""The `trellis` command: `dev` (everything on one machine), `run <service>` (one service, what
Kubernetes runs), `server --config FILE` (every service of a node from a config file), `drill
<name>` (scale, chaos, NATS failover and network drills on a private loopback cluster)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from shared.service_table import SERVICES
from shared.settings import load_settings


def _use_uvloop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is optional off Linux
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="trellis", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="start NATS and every service on this machine")
    dev.add_argument("--root-token", default="", help="the dev root token (default: random)")
    dev.add_argument("--data-dir", default="", help="keep data here (default: a temp dir)")
    dev.add_argument("--secrets-addr", default="127.0.0.1:8200")
    dev.add_argument("--workspace-addr", default="127.0.0.1:8800")
    dev.add_argument("--scheduler-addr", default="127.0.0.1:4646")
    dev.add_argument("--nats-url", default="", help="use this NATS instead of starting one")
    dev.add_argument(
        "--insecure-bus",
        action="store_true",
        help="allow a NATS that admits clients without credentials (throwaway clusters only)",
    )
    dev.add_argument(
        "--cluster-addr",
        default="",
        help="DR replication listener (default: a free port on 127.0.0.1)",
    )
    dev.add_argument("--plugin-directory", default="")
    dev.add_argument("--cluster-name", default="trellis")
    dev.add_argument("--acl", action="store_true", help="turn on scheduler ACLs")
    dev.add_argument(
        "--tls",
        action="store_true",
        help="serve HTTPS with a development CA issued by Trellis's own PKI engine; also write "
        "a Terraform CLI config (credentials for the workspace listener) and create the "
        "organization 'dev'",
    )
    dev.add_argument(
        "--tls-client-ca-file",
        default="",
        help="with --tls: ask clients of the secrets API for a certificate from these CAs "
        "(PEM; for the cert auth method)",
    )
    dev.add_argument("--log-json", action="store_true")
    dev.add_argument(
        "--secrets-replicas",
        type=int,
        default=0,
        help="secrets replicas (default: 2 with 2 or more usable CPUs, else 1)",
    )
    dev.add_argument(
        "--crypto-processes",
        type=int,
        default=0,
        help="crypto worker processes (default: 2 with 2 or more usable CPUs, else 1)",
    )
    dev.add_argument(
        "--gateways",
        type=int,
        default=0,
        help="gateway processes sharing the three listener ports (default: 2 with 2 or more "
        "usable CPUs, else 1)",
    )
    dev.add_argument(
        "--cpu-affinity",
        default="off",
        help="pin kinds of process to CPUs: 'kind=cpus;...' (e.g. 'gateway=0;secrets=1;nats=1'), "
        "'auto' (that layout on a 2-CPU host: the gateways apart from the secrets replicas "
        "and nats-server) or 'off'",
    )
    dev.add_argument(
        "--services",
        default="all",
        help="comma list of services beside secrets and the gateway "
        "(crypto,workspace,scheduler,client) or 'all'",
    )

    run = sub.add_parser("run", help="run one service")
    run.add_argument("service", choices=sorted(SERVICES))
    run.add_argument("--nats-url", default=None)
    run.add_argument("--config", default=None)
    run.add_argument("--health-addr", default="0.0.0.0:9100")
    run.add_argument("--processes", type=int, default=1, help="crypto: worker processes")
    run.add_argument("--simulate", type=int, default=0, help="client: simulated nodes")
    run.add_argument("--datacenter", default="dc1", help="client: datacenter")
    run.add_argument(
        "--insecure-bus",
        action="store_true",
        help="allow a NATS that admits clients without credentials (throwaway clusters only)",
    )

    server = sub.add_parser("server", help="run every service of a node from a config file")
    server.add_argument("--config", required=True)
    server.add_argument(
        "--insecure-bus",
        action="store_true",
        help="allow a NATS that admits clients without credentials (throwaway clusters only)",
    )

    from services.drill.main import add_parser as add_drill_parser

    add_drill_parser(sub)

    args = parser.parse_args(argv)
    if args.command == "dev":
        from services.dev import run_dev

        sys.exit(run_dev(args))
    if args.command == "drill":
        from services.drill.main import run_drill

        sys.exit(run_drill(args))
    if args.command == "server":
        from services.dev import run_server

        sys.exit(run_server(args.config, insecure_bus=args.insecure_bus))
    from shared.pid1 import run_as_init, should_be_init

    if should_be_init():  # PID 1 of a container: reap orphans, forward signals (shared/pid1.py)
        command = sys.argv[1:] if argv is None else argv
        sys.exit(run_as_init([sys.executable, "-m", "services.cli", *command]))
    # Only a service process needs the bus and the service's own modules.
    from shared.runner import pass_start_gate, run_service

    pass_start_gate(args.service)
    settings = load_settings(
        args.config, nats_url=args.nats_url, insecure_bus=True if args.insecure_bus else None
    )
    # Before anything connects with credentials: refuse a bus that admits anyone.
    from shared.bus_guard import require_closed_bus
    from shared.runner import nats_options

    asyncio.run(require_closed_bus(settings, nats_options(settings).get("tls")))
    options: dict[str, object] = {}
    if args.service == "crypto":
        options["processes"] = args.processes
    if args.service == "client":
        options.update(simulate=args.simulate, datacenter=args.datacenter)
    _use_uvloop()
    asyncio.run(run_service(args.service, settings, health_addr=args.health_addr, options=options))


if __name__ == "__main__":
    main()

"""The one table of NATS users and subject permissions: what each service may publish and
subscribe to. `trellis dev` renders it into its generated nats.conf (services/dev_nats.py) and
deploy/nats/secure.conf is the same table rendered for the cluster "trellis" (a unit test keeps
them equal). `{c}` is the cluster name (subjects, `{c}.x`) and `{b}` its bucket form (`{c}-x`).

NATS permissions are defence in depth: the receivers check control messages themselves and the
secrets API is end-to-end encrypted (docs/bus-security.md)."""

from __future__ import annotations

from dataclasses import dataclass

# JetStream clients: the API, acks, flow control of ordered consumers, replies to inboxes.
_JS = ["$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "_INBOX.>"]


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool = True
    doc: str = ""


TABLE: dict[str, Permissions] = {
    "gateway": Permissions(
        publish=("{c}.api.>", "{c}.echo"),
        subscribe=("{c}.secrets.state", "_INBOX.>"),
        allow_responses=False,
        doc="sends API envelopes (and the benchmark echo); hears the secrets state",
    ),
    "secrets": Permissions(
        publish=(
            "{c}.secrets.>",
            "{c}.crypto.cmd",
            "{c}.plugin.>",
            "{c}.replication.dr",
            "$KV.{b}-secrets.>",
            "$KV.{b}-leader.>",
            "$KV.{b}-dr.>",
            *_JS,
        ),
        subscribe=(
            "{c}.api.secrets",
            "{c}.api.secrets.>",
            "{c}.echo",
            "{c}.secrets.>",
            "{c}.plugin.>",
            "_INBOX.>",
            # Copies of direct changes to their bucket's stream: the read cache turns off.
            "$JS.API.STREAM.*.KV_{b}-secrets",
            "$JS.API.STREAM.MSG.DELETE.KV_{b}-secrets",
        ),
        doc="only secrets replicas see seal traffic; only they call crypto workers and plugins",
    ),
    "crypto": Permissions(
        publish=(),
        subscribe=("{c}.crypto.cmd",),
        doc="answers crypto commands, nothing else",
    ),
    "replication": Permissions(
        publish=("{c}.secrets.seal.sealed", "$KV.{b}-secrets.>", "$KV.{b}-dr.>", *_JS),
        subscribe=("{c}.replication.dr", "_INBOX.>"),
        doc="DR control from the secrets replicas; the DR channel itself is HTTPS",
    ),
    "workspace": Permissions(
        publish=(
            "{c}_workspace.>",
            "{c}.secrets.datakey",
            # Remote runs: plans and applies are submitted to the scheduler as jobs.
            "{c}.api.scheduler",
            "{c}.api.scheduler.session",
            "{c}.api.scheduler.batch",
            "$O.{c}_workspace_snapshots.>",
            "$O.{c}_workspace_states.>",
            "$KV.{c}_leases.>",
            *_JS,
        ),
        subscribe=(
            "{c}.api.workspace",
            "{c}.api.workspace.session",
            "{c}.api.workspace.batch",  # micro-batched envelopes (shared/bus_batch.py)
            "_INBOX.>",
        ),
        doc="its API, its log, its snapshots, its data keys, run jobs to the scheduler",
    ),
    "scheduler": Permissions(
        publish=(
            "{c}.sched.>",
            # Secrets for tasks: tokens and template reads through the sealed secrets API.
            "{c}.api.secrets",
            "{c}.api.secrets.session",
            "{c}.api.secrets.batch",
            "{c}_sched.>",
            "{c}.secrets.datakey",
            "$O.{c}_sched_snapshots.>",
            "$KV.{c}_sched_leader.>",
            *_JS,
        ),
        subscribe=(
            "{c}.api.scheduler",
            "{c}.api.scheduler.session",
            "{c}.api.scheduler.batch",
            "{c}.sched.>",
            "_INBOX.>",
        ),
        doc="its API, its RPC subjects, its log and snapshots, its data keys (Variables), "
        "task secrets through the secrets API",
    ),
    "client": Permissions(
        # `.session`: the handshake of its sealed channel to the scheduler (api_session.py).
        publish=("{c}.sched.node.>", "{c}.sched.alloc.>", "{c}.api.scheduler.session", "_INBOX.>"),
        # Only the requests addressed to a node (its files, its figures): never the other
        # nodes' RPCs, which carry their node secrets and task-secret requests.
        # `replica.up`: a scheduler replica started, poll it now (services/scheduler/wire.py).
        subscribe=(
            "{c}.sched.node.fs.>",
            "{c}.sched.node.stats.>",
            "{c}.sched.replica.up",
            "_INBOX.>",
        ),
        doc="client nodes talk to the scheduler's RPC subjects only",
    ),
    "plugin": Permissions(
        publish=("{c}.plugin.*.storage", "_INBOX.>"),
        subscribe=("{c}.plugin.*.call", "{c}.plugin.*.hello", "_INBOX.>"),
        doc="plugin processes: their calls and their storage requests, nothing else",
    ),
}

USERS: tuple[str, ...] = tuple(TABLE)


def subjects_for(user: str, cluster: str) -> Permissions:
    perm = TABLE[user]
    bucket = cluster.replace(".", "-")

    def fill(items: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(s.replace("{c}", cluster).replace("{b}", bucket) for s in items)

    return Permissions(fill(perm.publish), fill(perm.subscribe), perm.allow_responses, perm.doc)


def _quote(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{s}"' for s in items) + "]"


def authorization_block(cluster: str, passwords: dict[str, str]) -> str:
    """nats.conf's `authorization` block: one user per service. A password value starting with
    `$` is a variable reference (secure.conf reads them from the environment), else a literal."""
    lines = ["authorization {", "  users = ["]
    for user in USERS:
        if user not in passwords:
            continue
        perm = subjects_for(user, cluster)
        pw = passwords[user]
        pw_text = pw if pw.startswith("$") else '"' + pw.replace('"', "") + '"'
        responses = ", allow_responses: true" if perm.allow_responses else ""
        lines.append(f"    # {user}: {perm.doc}")
        lines.append(
            f"    {{ user: {user}, password: {pw_text},\n"
            f"      permissions: {{ publish: {_quote(perm.publish)},\n"
            f"                     subscribe: {_quote(perm.subscribe)}{responses} }} }}"
        )
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


SECURE_CONF_HEAD = """\
# NATS for a production Trellis node: each service has its own user and may only publish and
# subscribe where its job needs it. Generated from the table in shared/nats_permissions.py
# (python -m shared.nats_permissions > deploy/nats/secure.conf; tests/unit/test_nats_table.py
# keeps them equal); `trellis dev` renders the same table into its own nats.conf.
# Passwords come from the environment:
#   TRELLIS_NATS_GATEWAY_PASSWORD, ..._SECRETS_, ..._CRYPTO_, ..._REPLICATION_, ..._WORKSPACE_,
#   ..._SCHEDULER_, ..._CLIENT_, ..._PLUGIN_PASSWORD
# and each service gets its own credentials file (TRELLIS_NATS_CREDENTIALS_FILE, JSON
# {"user", "password"}, mode 0600) or TRELLIS_NATS_USER / TRELLIS_NATS_PASSWORD. For TLS add a
# `tls {}` block (cert_file, key_file, ca_file, verify: true) and give services
# TRELLIS_NATS_TLS_CA. JetStream clients need `$JS.API.>` and inbox replies; "allow_responses"
# lets a service answer requests without a blanket publish permission.
# These permissions are defence in depth: receivers check control messages themselves and the
# secrets API is encrypted end to end (docs/bus-security.md).

max_payload: 64MB
jetstream {
  store_dir: "./data/secure"
  sync_interval: always
}

"""


def render_secure_conf() -> str:
    """deploy/nats/secure.conf (regenerate: python -m shared.nats_permissions)."""
    refs = {u: f"$TRELLIS_NATS_{u.upper()}_PASSWORD" for u in USERS}
    return SECURE_CONF_HEAD + authorization_block("trellis", refs)


if __name__ == "__main__":
    print(render_secure_conf(), end="")

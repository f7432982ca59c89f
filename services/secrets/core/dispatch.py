"""The HTTP pipeline of the secrets service: envelope in, envelope out.

parse -> seal check -> namespace -> mount -> path -> fields -> create/update -> token -> ACL ->
handler -> leases / login tokens / wrapping -> JSON. Every failure becomes the documented status
with an `errors` body; anything unexpected is logged and answered 500 without internals. A GET,
POST or PUT without a query seen before with the same token skips the lookups before the handler
by its plan (core/plans.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import msgspec
import nats.errors
import structlog

from services.secrets.auth.token_params import addr_allowed
from services.secrets.core.namespaces import ROOT
from services.secrets.core.plans import Plan, copyable
from services.secrets.core.tokens import TokenEntry, random_b62
from services.secrets.errors import (
    SecretsError,
    bad_request,
    permission_denied,
    sealed,
    unsupported_operation,
)
from services.secrets.framework.durations import parse_duration
from services.secrets.framework.help import help_document
from services.secrets.framework.path import Op
from services.secrets.framework.request import AuthSpec, Request, Response
from services.secrets.identity.access import link_login, token_identity_policies
from shared import jsonbody
from shared.errors import ServiceError
from shared.messages import HttpRequest, HttpResponse
from shared.storage import KeyTooLong

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.mounts import MountEntry
    from services.secrets.core.namespaces import Namespace
    from services.secrets.framework.backend import Backend, Routed

log = structlog.get_logger("secrets")

JSON = {"Content-Type": "application/json"}
FORM = "application/x-www-form-urlencoded"
_enc = msgspec.json.Encoder()

# What a sealed (or uninitialised) service still answers.
SEALED_OK = {
    "sys/init",
    "sys/seal-status",
    "sys/unseal",
    "sys/health",
    "sys/leader",
    "sys/replication/dr/status",
    "sys/internal/specs/openapi",
    "sys/internal/readiness",
}

# DR replication paths answer while sealed (a secondary always is); each checks its own auth.
DR_PREFIX = "sys/replication/dr/"


def _dr_secondary_ok(path: str) -> bool:
    # sys/leader as Vault Enterprise's DR secondaries serve it: `bao status` asks it.
    return path.startswith(DR_PREFIX) or path.rstrip("/") in (
        "sys/health",
        "sys/seal-status",
        "sys/leader",
        "sys/internal/readiness",
    )


_METHODS = {
    "GET": Op.READ,
    "HEAD": Op.READ,
    "LIST": Op.LIST,
    "POST": Op.UPDATE,
    "PUT": Op.UPDATE,
    "DELETE": Op.DELETE,
    "PATCH": Op.PATCH,
}


def error_response(status: int, messages: list[str]) -> HttpResponse:
    return HttpResponse(status=status, headers=JSON, body=_enc.encode({"errors": messages}))


def header(env: HttpRequest, *names: str) -> str:
    for n in names:
        v = env.headers.get(n)
        if v:
            return v
    return ""


def client_token(env: HttpRequest) -> str:
    tok = header(env, "x-svc-token", "x-vault-token")
    if tok:
        return tok
    auth = env.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return ""


def _parse_body(env: HttpRequest) -> dict[str, Any]:
    if not env.body or not env.body.strip():
        return {}
    content_type = env.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == FORM and env.body.lstrip()[:1] not in (b"{", b"["):
        # An HTML form's POST (an OIDC provider's response_mode=form_post), as Vault reads it.
        # curl labels JSON bodies as forms too, so a body that opens like JSON is JSON.
        form = parse_qs(env.body.decode("utf-8", "replace"), keep_blank_values=True)
        return {k: ",".join(v) for k, v in form.items()}
    try:
        # The shared policy. Integers past 64 bits stay exact (KV data round-trips them, where
        # OpenBao would round them to floats); typed fields refuse them as OpenBao does.
        data = jsonbody.decode(env.body, wide_ints="keep")
    except jsonbody.BodyError as exc:
        # OpenBao's two wordings: complexity limits, and everything else.
        if exc.problem is jsonbody.Problem.DEPTH:
            raise bad_request(f"refused JSON input due to high complexity: {exc.detail}") from None
        raise bad_request(f"failed to decode JSON input: {exc.detail}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise bad_request("failed to decode JSON input: the body must be a JSON object")
    return data


async def handle_http(core: Core, env: HttpRequest) -> HttpResponse:
    try:
        if core.reloading is not None or core.seal.transitions or core.applying:
            await core.settle()  # another replica changed the mounts or the seal just now
        if env.method in PLANNED and not env.query:
            planned = await _run_planned(core, env)
            if planned is not None:
                return planned
        return await _handle(core, env)
    except SecretsError as exc:
        return error_response(exc.code, [exc.message] if exc.message else [])
    except ServiceError as exc:
        return error_response(exc.code, [exc.message])
    except KeyTooLong as exc:
        return error_response(400, [str(exc)])
    except (nats.errors.Error, TimeoutError) as exc:
        # Storage is in a leader election or unreachable: nothing was acknowledged; retry.
        log.warning("storage unavailable", error=type(exc).__name__)
        return error_response(503, ["storage is unavailable for a moment; retry the request"])
    except Exception:
        log.exception("request failed", path=env.path, method=env.method)
        return error_response(500, ["internal error"])


# The methods a plan answers: a plain read, and the writes a plan re-checks per body.
PLANNED = frozenset({"GET", "POST", "PUT"})


async def _handle(core: Core, env: HttpRequest) -> HttpResponse:
    raw_path = unquote(env.path)
    if not raw_path.startswith("/v1/"):
        return error_response(404, [f"no handler for {raw_path}: every route starts with /v1/"])
    path = raw_path[4:]
    method = env.method.upper()
    op = _METHODS.get(method)
    if op is None:
        raise unsupported_operation()
    query = parse_qs(env.query, keep_blank_values=True) if env.query else {}
    want_help = query.get("help", [""])[0] in ("1", "true")
    # Go's ParseBool, as Vault reads ?list= (hvac's client.list sends list=True).
    if op is Op.READ and query.get("list", [""])[0] in ("1", "t", "T", "true", "TRUE", "True"):
        op = Op.LIST
    is_write = method in ("POST", "PUT", "PATCH")
    data = (
        _parse_body(env)
        if is_write
        else {
            k: (v[0] if len(v) == 1 else v) for k, v in query.items() if k not in ("list", "help")
        }
    )

    # A DR secondary (sealed: it holds its primary's ciphertext) answers only these (issue 5).
    if core.dr_mode == "secondary" and not _dr_secondary_ok(path):
        raise SecretsError(
            400,
            "this cluster is a DR secondary: it serves only "
            "sys/replication/dr/*, sys/health, sys/seal-status and sys/leader",
        )
    # Before unseal only a few system paths answer, all in the root namespace.
    sealed_now = core.sealed
    ns_header = ""
    if sealed_now:
        if path.rstrip("/") not in SEALED_OK and not path.startswith(DR_PREFIX):
            raise sealed()
        ns, ns_path = ROOT, path
    else:
        ns_header = header(env, "x-svc-namespace", "x-vault-namespace")
        try:
            ns, ns_path = core.namespaces.resolve(ns_header, path)
        except SecretsError:
            await core.refresh_namespaces()  # created on another replica a moment ago?
            ns, ns_path = core.namespaces.resolve(ns_header, path)

    table = core.table(ns)
    mount = table.match(ns_path) if not sealed_now else None
    if mount is None and not sealed_now and await core.refresh_if_stale(ns):
        table = core.table(ns)
        mount = table.match(ns_path)
    if sealed_now:
        backend: Backend = core.sealed_system_backend()
        mount_path = "sys/"
    elif mount is None:
        raise SecretsError(404, f"no handler for route {ns_path!r}: no mount at this path")
    else:
        backend = table.backends[mount.path]
        mount_path = mount.path
    rel = ns_path[len(mount_path) :] if ns_path.startswith(mount_path) else ""

    token_id = client_token(env)
    req = _request(core, env, backend, op, rel, mount_path, mount, ns, data, token_id)
    req.query = query

    if want_help:
        entry = await _authenticate(core, token_id, env.remote_addr)
        if entry is None:
            raise permission_denied()
        # As OpenBao: help for a mount's root, or for a path one of its routes serves.
        if rel.strip("/") and backend.route(rel) is None:
            raise SecretsError(404, f"unsupported path: {ns_path}")
        doc = help_document(backend, rel, mount_path, ns)
        return HttpResponse(status=200, headers=JSON, body=_enc.encode(doc))

    routed = backend.route(rel)
    if routed is None:
        raise SecretsError(404, f"unsupported path: {ns_path}")
    fields, unknown = backend.decode(routed, data)
    if op in (Op.CREATE, Op.UPDATE):
        op = await backend.resolve_op(routed, op, req, fields)
        req.op = op
    spec = backend.operation(routed, op)
    if core.dr_mode == "secondary" and not spec.unauthenticated:
        raise SecretsError(
            400,
            "this cluster is a DR secondary: it accepts no client tokens "
            "(operations on it take a DR operation token)",
        )

    if not spec.unauthenticated:
        entry = await _authenticate(core, token_id, env.remote_addr)
        if entry is None and ns_path == "sys/wrapping/unwrap" and not data.get("token"):
            # As Vault: a client token that is a spent or unknown wrapping token is a 400.
            raise bad_request("wrapping token is not valid or does not exist")
        if entry is None:
            raise permission_denied()
        acl_path = _acl_path(core, entry, ns, ns_path)
        token_ns = _token_ns(core, entry)
        policies = entry.policies
        if entry.entity_id:  # read now: a group's new policy applies to tokens already issued
            policies = [*policies, *await token_identity_policies(core, token_ns, entry)]
        acl = await core.policies.acl(token_ns, policies)
        decision = acl.check(acl_path, op.capability, data if is_write else None)
        if not decision.allowed or (spec.sudo and not decision.sudo):
            raise permission_denied()
        req.capabilities = acl.capability_set(acl_path)
        used = await core.tokens.use(entry)
        if used is None:
            raise permission_denied()
        req.token = used
        if (
            env.method in PLANNED
            and not env.query
            and not ns_header
            and len(core.namespaces.by_path) == 1
            and mount is not None
            and used is entry
            and entry.num_uses == 0
            and not entry.entity_id
            and (is_write or (not unknown and copyable(fields)))
        ):
            core.plans.put(
                env.method,
                env.path,
                token_id,
                Plan(
                    table=table,
                    generation=table.generation,
                    paths=backend.paths,
                    backend=backend,
                    mount=mount,
                    rel=rel,
                    routed=routed,
                    fields=None if is_write else fields,
                    entry=entry,
                    acl=acl,
                    capabilities=req.capabilities,
                    acl_path=acl_path,
                ),
            )
    elif token_id and not sealed_now:
        req.token = await _authenticate(core, token_id, env.remote_addr)

    resp = await backend.call(routed, op, req, fields)
    if req.token is not None and req.token.num_uses == -1:
        await core.tokens.revoke_tree(req.token)  # that was its last use
    _warn_unknown(resp, routed, unknown)
    return await _render(core, env, req, backend, resp)


async def _run_planned(core: Core, env: HttpRequest) -> HttpResponse | None:
    """A request answered by its plan (core/plans.py); None: the full pipeline decides (and
    plans it again). A write goes through the same steps as in `_handle`, in the same order,
    minus the lookups the plan settled. The token is checked first, from the token cache: that
    check has no effect and sends any doubt to the full pipeline, so the order still holds."""
    if core.sealed or core.dr_mode == "secondary" or len(core.namespaces.by_path) != 1:
        return None
    headers = env.headers
    if headers.get("x-svc-namespace") or headers.get("x-vault-namespace"):
        return None
    token_id = client_token(env)
    plan = core.plans.get(env.method, env.path, token_id, core.tables.get(ROOT.id))
    if plan is None:
        return None
    # The token and its ACL as the cache holds them (no storage read, no coroutine): anything
    # but the plan's own objects sends the request down the full pipeline, which reads them.
    entry = core.tokens.cached(token_id)
    if (
        entry is not plan.entry
        or entry.num_uses != 0
        or not addr_allowed(env.remote_addr, entry.bound_cidrs)
        or core.policies.known_acl(ROOT, entry.policies) is not plan.acl
    ):
        return None
    backend, mount, routed = plan.backend, plan.mount, plan.routed
    write = env.method != "GET"
    if write:
        data = _parse_body(env)
        fields, unknown = backend.decode(routed, data)
    else:
        data, fields, unknown = {}, plan.fields_for(), []
    op = Op.UPDATE if write else Op.READ
    req = _request(core, env, backend, op, plan.rel, mount.path, mount, ROOT, data, token_id)
    req.capabilities = plan.capabilities
    if write:  # a GET's plan was made past its ACL check, which holds while its ACL does
        req.op = await backend.resolve_op(routed, req.op, req, fields)
        spec = backend.operation(routed, req.op)
        if spec.unauthenticated:
            return None
        decision = plan.acl.check(plan.acl_path, req.op.capability, data)
        if not decision.allowed or (spec.sudo and not decision.sudo):
            raise permission_denied()
    req.token = entry
    resp = await backend.call(routed, req.op, req, fields)
    _warn_unknown(resp, routed, unknown)
    return await _render(core, env, req, backend, resp)


def _request(
    core: Core,
    env: HttpRequest,
    backend: Backend,
    op: Op,
    rel: str,
    mount_path: str,
    mount: MountEntry | None,
    ns: Namespace,
    data: dict[str, Any],
    token_id: str,
) -> Request:
    """The engine's view of a request, the same on the full and the planned path."""
    return Request(
        op=op,
        path=rel,
        mount_path=mount_path,
        namespace=ns,
        data=data,
        headers=env.headers,
        storage=backend.storage,
        core=core,
        mount=mount,
        client_token=token_id,
        request_id=env.request_id,
        remote_addr=env.remote_addr,
        client_certs=env.client_certs,
    )


def _warn_unknown(resp: Response, routed: Routed, unknown: list[str]) -> None:
    if unknown and not routed.path.arbitrary_input:
        resp.warnings.append(
            f"Endpoint ignored these unrecognized parameters: [{' '.join(unknown)}]"
        )


async def _authenticate(core: Core, token_id: str, remote_addr: str) -> TokenEntry | None:
    if not token_id:
        return None
    entry = await core.tokens.lookup(token_id)
    if entry is None or entry.num_uses < 0:
        return None
    # A token bound to CIDRs (token_bound_cidrs of its login) works only from them, as Vault.
    if not addr_allowed(remote_addr, entry.bound_cidrs):
        return None
    return entry


def _token_ns(core: Core, entry: TokenEntry) -> Namespace:
    return core.namespaces.by_id.get(entry.namespace_id, ROOT)


def _acl_path(core: Core, entry: TokenEntry, ns: Namespace, ns_path: str) -> str:
    """Policies of a token apply relative to the token's own namespace; a token cannot reach
    outside it."""
    tns = _token_ns(core, entry)
    full = ns.path + ns_path
    if not full.startswith(tns.path):
        raise permission_denied()
    return full[len(tns.path) :]


def _wrap_ttl(env: HttpRequest) -> int:
    raw = env.headers.get("x-svc-wrap-ttl") or env.headers.get("x-vault-wrap-ttl")
    if not raw:
        return 0
    try:
        return parse_duration(raw)
    except ValueError:
        raise bad_request(f"invalid wrap TTL {raw!r}") from None


async def _render(
    core: Core, env: HttpRequest, req: Request, backend: Backend, resp: Response
) -> HttpResponse:
    if resp.raw is not None:
        return HttpResponse(
            status=resp.raw.status,
            body=resp.raw.body,
            headers={"Content-Type": resp.raw.content_type},
        )
    body: dict[str, Any] = {
        "request_id": env.request_id,
        "lease_id": "",
        "renewable": False,
        "lease_duration": 0,
        "data": resp.data,
        "wrap_info": None,
        "warnings": resp.warnings or None,
        "auth": None,
    }
    if req.mount is not None:
        body["mount_type"] = req.mount.type
    if resp.lease is not None:
        lease = resp.lease
        mount_default = req.mount.config.default_lease_ttl if req.mount else 0
        mount_max = req.mount.config.max_lease_ttl if req.mount else 0
        default_ttl, max_ttl = core.tokens.ttl_limits(mount_default, mount_max)
        ttl = min(lease.ttl or default_ttl, lease.max_ttl or max_ttl, max_ttl)
        entry = await core.expiration.register(
            path=req.full_path,
            namespace_id=req.namespace.id,
            mount_path=req.mount_path,
            secret_type=lease.secret_type,
            internal=lease.internal,
            ttl=ttl,
            max_ttl=lease.max_ttl or max_ttl,
            renewable=lease.renewable,
            token=core.tokens.hash(req.token.id) if req.token else "",
        )
        body.update(lease_id=entry.lease_id, lease_duration=ttl, renewable=lease.renewable)
    wrapped_accessor = ""
    if isinstance(resp.auth, AuthSpec):
        body["auth"] = await _login(core, req, resp.auth)
        wrapped_accessor = body["auth"]["accessor"]
    elif resp.auth is not None:
        body["auth"] = resp.auth
        wrapped_accessor = resp.auth.get("accessor", "")
    body.update(resp.extra)
    if resp.data_at_top and isinstance(resp.data, dict):
        for k, v in resp.data.items():
            body.setdefault(k, v)
    wrap_ttl = _wrap_ttl(env)
    if wrap_ttl and (resp.data is not None or body["auth"] is not None):
        info = await core.wrapping.wrap(
            req.namespace, body, wrap_ttl, req.full_path, wrapped_accessor
        )
        body = {
            "request_id": env.request_id,
            "lease_id": "",
            "renewable": False,
            "lease_duration": 0,
            "data": None,
            "wrap_info": info,
            "warnings": None,
            "auth": None,
        }
    elif (
        resp.data is None
        and body["auth"] is None
        and not resp.warnings
        and resp.status is None
        and not resp.extra
    ):
        return HttpResponse(status=204)
    return HttpResponse(status=resp.status or 200, headers=JSON, body=_enc.encode(body))


async def _login(core: Core, req: Request, spec: AuthSpec) -> dict[str, Any]:
    """Turn a login result into a token (an orphan, as Vault's logins are)."""
    mount = req.mount
    default_ttl, max_ttl = core.tokens.ttl_limits(
        mount.config.default_lease_ttl if mount else 0, mount.config.max_lease_ttl if mount else 0
    )
    explicit = spec.explicit_max_ttl
    if spec.period:
        cap = explicit
        ttl = min(spec.period, explicit) if explicit else spec.period
    else:
        cap = min(v for v in (spec.max_ttl, explicit, max_ttl) if v)
        ttl = min(spec.ttl or default_ttl, cap)
        cap = cap if (spec.max_ttl or explicit) else 0
    policies = sorted(set(spec.policies) | (set() if spec.no_default_policy else {"default"}))
    if "root" in spec.policies:
        policies = ["root"]
    # Vault names a login token after the mount it came from: `<mount path>-<name>`.
    source = req.mount_path.removeprefix("auth/").replace("/", "-")
    entity_id, identity_policies = "", []
    if spec.alias_name and mount is not None:
        entity_id, identity_policies = await link_login(
            core,
            req.namespace,
            mount.accessor,
            spec.alias_name,
            spec.alias_metadata,
            spec.group_aliases,
        )
    entry = TokenEntry(
        id=core.tokens.new_id(req.namespace),
        accessor=random_b62(),
        policies=policies,
        meta=spec.metadata or None,
        display_name=f"{source}{spec.display_name}".rstrip("-"),
        path=req.full_path,
        creation_time=time.time(),
        ttl=ttl,
        explicit_max_ttl=cap,
        period=spec.period,
        num_uses=spec.num_uses,
        renewable=spec.renewable,
        orphan=True,
        namespace_id=req.namespace.id,
        internal={k: str(v) for k, v in spec.internal.items()},
        bound_cidrs=list(spec.bound_cidrs),
        entity_id=entity_id,
    )
    if login_token_kind(spec.token_type, mount.config.token_type if mount else "") == "batch":
        if "root" in policies:
            raise bad_request("batch tokens cannot be root tokens")
        await core.tokens.create_batch(entry)
    else:
        await core.tokens.create(entry)
    return auth_block(entry, identity_policies)


def login_token_kind(role_kind: str, mount_kind: str) -> str:
    """The kind of a login's token: a mount tuned to `service` or `batch` decides; otherwise
    the auth method's role (token_type), whose `default` defers to the mount's default-*."""
    if mount_kind in ("service", "batch"):
        return mount_kind
    if role_kind in ("service", "batch"):
        return role_kind
    if role_kind == "default-batch" or (
        role_kind in ("", "default") and mount_kind == "default-batch"
    ):
        return "batch"
    return "service"


def auth_block(entry: TokenEntry, identity_policies: list[str] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {
        "client_token": entry.id,
        "accessor": entry.accessor,
        "policies": sorted({*entry.policies, *identity_policies})
        if identity_policies
        else entry.policies,
        "token_policies": entry.policies,
        "metadata": entry.meta,
        "lease_duration": entry.ttl,
        "renewable": entry.renewable,
        "entity_id": entry.entity_id,
        "token_type": entry.type,
        "orphan": entry.orphan,
        "mfa_requirement": None,
        "num_uses": max(entry.num_uses, 0),
    }
    # OpenBao leaves the key out when the token has no entity policies.
    if identity_policies:
        block["identity_policies"] = identity_policies
    return block

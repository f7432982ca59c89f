"""Policies (Sentinel or OPA), their upload and download, and policy sets with their versions
and relationships."""

from __future__ import annotations

import io
import tarfile
from typing import Any

from services.workspace import render
from services.workspace.context import Req
from services.workspace.jsonapi import (
    ApiError,
    Attrs,
    data_list,
    data_object,
    ids_of,
    not_found,
    present,
    relationship_ids,
    respond,
)
from services.workspace.model import Policy, PolicySet
from services.workspace.query import bool_param, include_param
from services.workspace.validate import (
    check_name,
    check_relative_path,
    check_repo_identifier,
    new_id,
)
from shared.messages import HttpResponse

KINDS = ("sentinel", "opa")
LEVELS = {
    "sentinel": ("advisory", "soft-mandatory", "hard-mandatory"),
    "opa": ("advisory", "mandatory"),
}
MAX_POLICY_BYTES = 10 * 1024 * 1024
SET_INCLUDES = {
    "projects",
    "workspaces",
    "policies",
    "newest_version",
    "current_version",
    "workspace_exclusions",
    "project_exclusions",
}


def _manager(r: Req, org_name: str) -> Any:
    org, acc = r.org(org_name)
    r.require(acc, "manage-policies", "organization")
    return org


def _kind(a: Attrs) -> str:
    kind = a.str("kind")
    if not present(kind):
        return "sentinel"
    if kind not in KINDS:
        raise ApiError(422, "kind must be sentinel or opa", a.pointer("kind"))
    return kind


def _level(a: Attrs, kind: str, required: bool) -> Any:
    level = a.str("enforcement-level")
    enforce = a.attrs.get("enforce")
    if (
        not present(level)
        and isinstance(enforce, list)
        and enforce
        and isinstance(enforce[0], dict)
    ):
        level = enforce[0].get("mode", level)  # the older `enforce: [{path, mode}]` form
    if not present(level):
        if required:
            raise ApiError(422, "enforcement-level is required", a.pointer("enforcement-level"))
        return level
    if level not in LEVELS[kind]:
        raise ApiError(
            422,
            f"enforcement-level of a {kind} policy must be one of {', '.join(LEVELS[kind])}",
            a.pointer("enforcement-level"),
        )
    return level


# --- policies ---


async def create_policy(r: Req) -> HttpResponse:
    org = _manager(r, r.params["org"])
    data = data_object(r.http.body, "policies")
    a = Attrs(data["attributes"])
    name = check_name(a.required_str("name"), a.pointer("name"))
    kind = _kind(a)
    p: dict[str, Any] = {
        "id": new_id("pol"),
        "org_id": org.id,
        "name": name,
        "kind": kind,
        "enforcement_level": _level(a, kind, True),
    }
    desc = a.str("description", nullable=True)
    if present(desc):
        p["description"] = desc
    query = a.str("query")
    if kind == "opa":
        if not present(query) or not query:
            raise ApiError(422, "query is required for an OPA policy", a.pointer("query"))
        p["query"] = query
    sets = relationship_ids(data["relationships"], "policy-sets", "policy-sets", many=True)
    p["policy_set_ids"] = sets if present(sets) else []
    pid = await r.write("policy.create", p)
    return respond(201, {"data": render.policy(r.state, r.state.policies[pid])})


async def list_policies(r: Req) -> HttpResponse:
    org = _manager(r, r.params["org"])
    name = (r.query.get("search[name]") or "").lower()
    kind = r.query.get("filter[kind]")
    items = sorted(
        (
            p
            for p in r.state.policies.values()
            if p.org_id == org.id and name in p.name.lower() and (kind is None or p.kind == kind)
        ),
        key=lambda p: p.name,
    )
    return respond(200, r.list_doc(items, lambda p: render.policy(r.state, p)))


def _policy(r: Req) -> Policy:
    pol = r.state.policies.get(r.params["id"])
    if pol is None:
        raise not_found("policy")
    _, acc = r.org_by_id(pol.org_id)
    r.require(acc, "manage-policies", "policy")
    return pol


async def show_policy(r: Req) -> HttpResponse:
    return respond(200, {"data": render.policy(r.state, _policy(r))})


async def update_policy(r: Req) -> HttpResponse:
    pol = _policy(r)
    a = Attrs(data_object(r.http.body, "policies")["attributes"])
    changes: dict[str, Any] = {}
    desc = a.str("description", nullable=True)
    if present(desc):
        changes["description"] = desc
    level = _level(a, pol.kind, False)
    if present(level):
        changes["enforcement_level"] = level
    query = a.str("query")
    if present(query):
        if pol.kind != "opa":
            raise ApiError(422, "query is only valid for OPA policies", a.pointer("query"))
        changes["query"] = query
    await r.write("policy.update", {"id": pol.id, "changes": changes})
    return respond(200, {"data": render.policy(r.state, pol)})


async def delete_policy(r: Req) -> HttpResponse:
    pol = _policy(r)
    await r.write("policy.delete", {"id": pol.id})
    return respond(204)


async def upload_policy(r: Req) -> HttpResponse:
    pol = _policy(r)
    if len(r.http.body) > MAX_POLICY_BYTES:
        raise ApiError(413, "policy code is limited to 10 MB")
    await r.write("policy.upload", {"id": pol.id, "content": r.http.body})
    return respond(200)


async def download_policy(r: Req) -> HttpResponse:
    pol = _policy(r)
    if pol.content is None:
        raise not_found("policy code")
    return HttpResponse(status=200, headers={"content-type": "text/plain"}, body=pol.content)


# --- policy sets ---


def _set_vcs(raw: dict[str, Any], r: Req, *, create: bool) -> dict[str, Any]:
    a = Attrs(raw, "/data/attributes/vcs-repo")
    out: dict[str, Any] = {}
    for key, field in (
        ("identifier", "identifier"),
        ("oauth-token-id", "oauth_token_id"),
        ("vcs-app-installation-id", "vcs_app_installation_id"),
        ("github-app-installation-id", "vcs_app_installation_id"),
        ("branch", "branch"),
    ):
        v = a.str(key, nullable=True)
        if present(v):
            out[field] = v or ("" if key == "branch" else None)
    sub = a.bool("ingress-submodules")
    if present(sub):
        out["ingress_submodules"] = sub
    if create and not out.get("identifier"):
        raise ApiError(422, "vcs-repo.identifier is required", a.pointer("identifier"))
    if out.get("identifier"):
        check_repo_identifier(out["identifier"], a.pointer("identifier"))
    if out.get("oauth_token_id") and out.get("vcs_app_installation_id"):
        raise ApiError(
            422,
            "oauth-token-id is not allowed with vcs-app-installation-id",
            a.pointer("oauth-token-id"),
        )
    if create and not out.get("oauth_token_id") and not out.get("vcs_app_installation_id"):
        raise ApiError(
            422,
            "vcs-repo needs oauth-token-id or vcs-app-installation-id",
            a.pointer("oauth-token-id"),
        )
    if out.get("vcs_app_installation_id") and r.who.kind not in ("user", "admin"):
        raise ApiError(
            422, "vcs-app-installation-id needs a user token", a.pointer("vcs-app-installation-id")
        )
    return out


def _policies_path(a: Attrs) -> Any:
    if "policies-path" not in a:
        return present  # a sentinel meaning "absent" that is never a valid value
    v = a.attrs["policies-path"]
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise ApiError(422, "policies-path must be a path string", a.pointer("policies-path"))
    return check_relative_path(v, a.pointer("policies-path"))


async def create_set(r: Req) -> HttpResponse:
    org = _manager(r, r.params["org"])
    data = data_object(r.http.body, "policy-sets")
    a, rels = Attrs(data["attributes"]), data["relationships"]
    kind = _kind(a)
    f: dict[str, Any] = {
        "id": new_id("polset"),
        "org_id": org.id,
        "kind": kind,
        "name": check_name(a.required_str("name"), a.pointer("name")),
    }
    desc = a.str("description", nullable=True)
    if present(desc):
        f["description"] = desc
    glob = a.bool("global")
    f["is_global"] = bool(present(glob) and glob)
    over = a.bool("overridable")
    if present(over):
        if over and kind != "opa":
            raise ApiError(
                422, "overridable is only valid for opa policy sets", a.pointer("overridable")
            )
        f["overridable"] = over
    vcs_raw = a.obj("vcs-repo", nullable=True)
    if present(vcs_raw) and vcs_raw is not None:
        f["vcs_repo"] = _set_vcs(vcs_raw, r, create=True)
    path = _policies_path(a)
    if path is not present and path is not None:
        if "vcs_repo" not in f:
            raise ApiError(
                422, "policies-path is only valid with a VCS repository", a.pointer("policies-path")
            )
        f["policies_path"] = path
    policies = relationship_ids(rels, "policies", "policies", many=True)
    policies = policies if present(policies) else []
    if policies and "vcs_repo" in f:
        raise ApiError(
            422,
            "vcs-repo and individual policies are mutually exclusive",
            "/data/relationships/policies",
        )
    for rel, field in (("projects", "project_ids"), ("workspaces", "workspace_ids")):
        ids = relationship_ids(rels, rel, rel, many=True)
        if present(ids) and ids:
            if f["is_global"]:
                raise ApiError(
                    422,
                    f"{rel} cannot be attached to a global policy set",
                    f"/data/relationships/{rel}",
                )
            f[field] = list(dict.fromkeys(ids))
    sid = await r.write(
        "polset.create", {"fields": f, "policy_ids": policies, "version_id": new_id("polsetver")}
    )
    return respond(201, {"data": render.policy_set(r.state, r.state.policy_sets[sid])})


def _set_includes(r: Req, sets: list[PolicySet]) -> list[dict[str, Any]] | None:
    inc = include_param(r.query, sorted(SET_INCLUDES))
    if not inc:
        return None
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(doc: dict[str, Any]) -> None:
        if doc["id"] not in seen:
            seen.add(doc["id"])
            out.append(doc)

    st = r.state
    for ps in sets:
        if "policies" in inc:
            for pid in ps.policy_ids:
                add(render.policy(st, st.policies[pid]))
        if "projects" in inc:
            for pid in ps.project_ids:
                if pid in st.projects:
                    add(render.project(st, st.projects[pid]))
        if "workspaces" in inc:
            for wid in ps.workspace_ids:
                if wid in st.workspaces:
                    w = st.workspaces[wid]
                    add(render.workspace(st, w, r.ws_caps(w)))
        for key, vid in (
            ("newest_version", ps.newest_version_id),
            ("current_version", ps.current_version_id),
        ):
            if key in inc and vid and vid in st.versions:
                add(render.policy_set_version(st.versions[vid]))
    return out


async def list_sets(r: Req) -> HttpResponse:
    org = _manager(r, r.params["org"])
    versioned = bool_param(r.query, "filter[versioned]")
    kind = r.query.get("filter[kind]")
    if kind is not None and kind not in KINDS:
        raise ApiError(422, "filter[kind] must be sentinel or opa", title="invalid query parameter")
    name = (r.query.get("search[name]") or "").lower()
    items = []
    for ps in sorted(r.state.policy_sets.values(), key=lambda p: p.name):
        is_versioned = ps.vcs_repo is not None or bool(ps.version_ids)
        if ps.org_id != org.id or name not in ps.name.lower():
            continue
        if versioned is not None and is_versioned != versioned:
            continue
        if kind is not None and ps.kind != kind:
            continue
        items.append(ps)
    doc = r.list_doc(items, lambda p: render.policy_set(r.state, p))
    included = _set_includes(r, r.page().slice(items))
    if included is not None:
        doc["included"] = included
    return respond(200, doc)


def _set(r: Req) -> PolicySet:
    ps = r.state.policy_sets.get(r.params["id"])
    if ps is None:
        raise not_found("policy set")
    _, acc = r.org_by_id(ps.org_id)
    r.require(acc, "manage-policies", "policy set")
    return ps


async def show_set(r: Req) -> HttpResponse:
    ps = _set(r)
    doc: dict[str, Any] = {"data": render.policy_set(r.state, ps)}
    included = _set_includes(r, [ps])
    if included is not None:
        doc["included"] = included
    return respond(200, doc)


async def update_set(r: Req) -> HttpResponse:
    ps = _set(r)
    data = data_object(r.http.body, "policy-sets")
    a, rels = Attrs(data["attributes"]), data["relationships"]
    changes: dict[str, Any] = {}
    name = a.str("name")
    if present(name):
        changes["name"] = check_name(name, a.pointer("name"))
    desc = a.str("description", nullable=True)
    if present(desc):
        changes["description"] = desc
    glob = a.bool("global")
    if present(glob):
        changes["is_global"] = glob
    over = a.bool("overridable")
    if present(over):
        if over and ps.kind != "opa":
            raise ApiError(
                422, "overridable is only valid for opa policy sets", a.pointer("overridable")
            )
        changes["overridable"] = over
    if "kind" in a and a.attrs["kind"] != ps.kind:
        raise ApiError(422, "the kind of a policy set cannot change", a.pointer("kind"))
    vcs: Any = None
    raw = a.obj("vcs-repo", nullable=True)
    if present(raw):
        vcs = "remove" if raw is None else _set_vcs(raw, r, create=False)
    path = _policies_path(a)
    if path is not present:
        changes["policies_path"] = path
    for rel, field in (("projects", "project_ids"), ("workspaces", "workspace_ids")):
        ids = relationship_ids(rels, rel, rel, many=True)
        if present(ids):
            changes[field] = list(dict.fromkeys(ids))  # an empty array clears
    await r.write("polset.update", {"id": ps.id, "changes": changes, "vcs": vcs})
    return respond(200, {"data": render.policy_set(r.state, ps)})


async def delete_set(r: Req) -> HttpResponse:
    ps = _set(r)
    await r.write("polset.delete", {"id": ps.id})
    return respond(204)


def _rel_writer(rel: str, op: str) -> Any:
    type_ = rel

    async def handler(r: Req) -> HttpResponse:
        ps = _set(r)
        ids = ids_of(data_list(r.http.body, type_))
        await r.write("polset.rel", {"id": ps.id, "rel": rel, "op": op, "ids": ids})
        return respond(204)

    handler.__name__ = f"{op}_{rel}"
    return handler


add_policies = _rel_writer("policies", "add")
remove_policies = _rel_writer("policies", "remove")
add_projects = _rel_writer("projects", "add")
remove_projects = _rel_writer("projects", "remove")
add_workspaces = _rel_writer("workspaces", "add")
remove_workspaces = _rel_writer("workspaces", "remove")


# --- policy set versions ---


async def create_version(r: Req) -> HttpResponse:
    ps = _set(r)
    vid = await r.write("version.create", {"id": new_id("polsetver"), "policy_set_id": ps.id})
    return respond(201, {"data": render.policy_set_version(r.state.versions[vid])})


def _version(r: Req) -> Any:
    v = r.state.versions.get(r.params["id"])
    if v is None:
        raise not_found("policy set version")
    r.params["id"] = v.policy_set_id
    _set(r)
    return v


async def show_version(r: Req) -> HttpResponse:
    return respond(200, {"data": render.policy_set_version(_version(r))})


def check_tarball(body: bytes) -> str | None:
    """None for a readable tar.gz, else what is wrong with it (the version errors)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
            tar.getmembers()
    except (tarfile.TarError, OSError, EOFError) as exc:
        return f"the upload is not a valid tar.gz archive: {exc}"
    return None


async def upload_version(r: Req) -> HttpResponse:
    v = _version(r)
    await r.write("version.upload", {"id": v.id, "error": check_tarball(r.http.body)})
    return respond(200)

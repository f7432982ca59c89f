"""The workspace state machine: every write is an entry of the replicated log, applied here in
order on every replica. Apply is deterministic (time from the entry, ids chosen by the writer)
and does the checks that depend on state (unique names, references that must exist, lock
holders), so concurrent writers on different replicas get one consistent answer. An ApplyError
leaves the state exactly as it was: each op checks everything before changing anything.

Payloads are msgpack maps; the handler that writes an op has already checked their shape.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from services.workspace.model import (
    Organization,
    Policy,
    PolicySet,
    PolicySetVersion,
    Project,
    StateOutput,
    StateVersion,
    Tag,
    Team,
    TeamAccess,
    Token,
    User,
    Variable,
    VariableSet,
    VcsInstallation,
    VcsRepo,
    Workspace,
)
from services.workspace.runs_model import ConfigurationVersion, Run
from services.workspace.state_runs import RunsState
from shared.replog import ApplyError, LogEntry

_dec = msgspec.msgpack.Decoder()


def _taken(what: str = "Name") -> ApplyError:
    return ApplyError(422, f"{what} has already been taken")


class _Snapshot(msgspec.Struct, kw_only=True):
    users: list[User] = []
    orgs: list[Organization] = []
    projects: list[Project] = []
    workspaces: list[Workspace] = []
    tags: list[Tag] = []
    policies: list[Policy] = []
    policy_sets: list[PolicySet] = []
    versions: list[PolicySetVersion] = []
    teams: list[Team] = []
    team_access: list[TeamAccess] = []
    tokens: list[Token] = []
    vcs: list[VcsInstallation] = []
    state_versions: list[StateVersion] = []
    variables: list[Variable] = []
    varsets: list[VariableSet] = []
    cvs: list[ConfigurationVersion] = []
    runs: list[Run] = []


_snap_dec = msgspec.msgpack.Decoder(_Snapshot)
_enc = msgspec.msgpack.Encoder()


class WorkspaceState(RunsState):
    """All records plus the indexes reads need; see the module docstring."""

    def __init__(self) -> None:
        self.index = 0
        self.users: dict[str, User] = {}
        self.user_by_name: dict[str, str] = {}
        self.orgs: dict[str, Organization] = {}
        self.org_by_name: dict[str, str] = {}
        self.projects: dict[str, Project] = {}
        self.workspaces: dict[str, Workspace] = {}
        self.ws_by_name: dict[tuple[str, str], str] = {}
        # Per organization, (name, id, lowercase name) kept sorted: lists come out by name
        # without sorting per read, and name searches need no per-read lowercasing.
        self.ws_sorted: dict[str, list[tuple[str, str, str]]] = {}
        self.tags: dict[str, Tag] = {}
        self.tag_by_name: dict[tuple[str, str], str] = {}
        self.tag_count: dict[str, int] = {}
        self.tag_ws: dict[str, set[str]] = {}  # tag id -> workspace ids (tag searches)
        self.policies: dict[str, Policy] = {}
        self.policy_sets: dict[str, PolicySet] = {}
        self.versions: dict[str, PolicySetVersion] = {}
        self.teams: dict[str, Team] = {}
        self.team_access: dict[str, TeamAccess] = {}
        self.tokens: dict[str, Token] = {}
        self.token_by_digest: dict[str, str] = {}
        self.vcs: dict[str, VcsInstallation] = {}
        self.state_versions: dict[str, StateVersion] = {}
        self.sv_by_ws: dict[str, list[str]] = {}  # workspace id -> versions, oldest first
        self.output_sv: dict[str, str] = {}  # output id -> state version id
        self.variables: dict[str, Variable] = {}
        self.vars_by_ws: dict[str, list[str]] = {}  # workspace id -> variables, in creation order
        self.varsets: dict[str, VariableSet] = {}
        self.vars_by_set: dict[str, list[str]] = {}  # variable set id -> its variables
        self._init_runs()
        self._ops: dict[str, Callable[[dict[str, Any], float], Any]] = {
            name[4:].replace("__", "."): getattr(self, name)
            for name in dir(self)
            if name.startswith("_op_")
        }

    # --- StateMachine protocol ---

    def apply(self, index: int, entry: LogEntry) -> Any:
        op = self._ops.get(entry.type)
        if op is None:
            raise ApplyError(400, f"unknown operation {entry.type}")
        try:
            payload = _dec.decode(entry.payload)
        except msgspec.DecodeError:
            raise ApplyError(400, "undecodable payload") from None
        result = op(payload, entry.time)
        self.index = index
        return result

    def snapshot(self) -> bytes:
        return _enc.encode(
            _Snapshot(
                users=list(self.users.values()),
                orgs=list(self.orgs.values()),
                projects=list(self.projects.values()),
                workspaces=list(self.workspaces.values()),
                tags=list(self.tags.values()),
                policies=list(self.policies.values()),
                policy_sets=list(self.policy_sets.values()),
                versions=list(self.versions.values()),
                teams=list(self.teams.values()),
                team_access=list(self.team_access.values()),
                tokens=list(self.tokens.values()),
                vcs=list(self.vcs.values()),
                state_versions=list(self.state_versions.values()),
                variables=list(self.variables.values()),
                varsets=list(self.varsets.values()),
                cvs=list(self.cvs.values()),
                runs=list(self.runs.values()),
            )
        )

    def restore(self, data: bytes, index: int) -> None:
        snap = _snap_dec.decode(data)
        self.__init__()  # type: ignore[misc]
        self.index = index
        for u in snap.users:
            self.users[u.id] = u
            self.user_by_name[u.username] = u.id
        for o in snap.orgs:
            self.orgs[o.id] = o
            self.org_by_name[o.name] = o.id
        self.projects = {p.id: p for p in snap.projects}
        for t in snap.tags:
            self.tags[t.id] = t
            self.tag_by_name[(t.org_id, t.name)] = t.id
            self.tag_count[t.id] = 0
            self.tag_ws[t.id] = set()
        for w in snap.workspaces:
            self._index_ws(w)
            for tid in w.tag_ids:
                self.tag_count[tid] = self.tag_count.get(tid, 0) + 1
                self.tag_ws.setdefault(tid, set()).add(w.id)
        self.policies = {p.id: p for p in snap.policies}
        self.policy_sets = {p.id: p for p in snap.policy_sets}
        self.versions = {v.id: v for v in snap.versions}
        self.teams = {t.id: t for t in snap.teams}
        self.team_access = {a.id: a for a in snap.team_access}
        for tok in snap.tokens:
            self.tokens[tok.id] = tok
            self.token_by_digest[tok.digest] = tok.id
        self.vcs = {v.id: v for v in snap.vcs}
        self.varsets = {v.id: v for v in snap.varsets}
        for sv in snap.state_versions:
            self._index_sv(sv)
        for var in snap.variables:
            self._index_var(var)
        for cv in snap.cvs:
            self._index_cv(cv)
        for run in sorted(snap.runs, key=lambda r: (r.workspace_id, r.seq)):
            self._index_run(run)

    # --- lookups used by handlers ---

    def org_named(self, name: str) -> Organization | None:
        oid = self.org_by_name.get(name)
        return self.orgs.get(oid) if oid else None

    def workspace_named(self, org_id: str, name: str) -> Workspace | None:
        wid = self.ws_by_name.get((org_id, name))
        return self.workspaces.get(wid) if wid else None

    def org_workspaces(self, org_id: str) -> Iterable[Workspace]:
        for _, wid, _ in self.ws_sorted.get(org_id, ()):
            yield self.workspaces[wid]

    def org_tags(self, org_id: str) -> list[Tag]:
        return [t for t in self.tags.values() if t.org_id == org_id]

    def team_named(self, org_id: str, name: str) -> Team | None:
        for t in self.teams.values():
            if t.org_id == org_id and t.name == name:
                return t
        return None

    def access_for(self, team_id: str, ws_id: str) -> TeamAccess | None:
        for a in self.team_access.values():
            if a.team_id == team_id and a.workspace_id == ws_id:
                return a
        return None

    # --- helpers ---

    def _index_ws(self, w: Workspace) -> None:
        self.workspaces[w.id] = w
        self.ws_by_name[(w.org_id, w.name)] = w.id
        bisect.insort(self.ws_sorted.setdefault(w.org_id, []), (w.name, w.id, w.name.lower()))

    def _unindex_ws(self, w: Workspace) -> None:
        self.ws_by_name.pop((w.org_id, w.name), None)
        lst = self.ws_sorted.get(w.org_id, [])
        key = (w.name, w.id, w.name.lower())
        i = bisect.bisect_left(lst, key)
        if i < len(lst) and lst[i] == key:
            lst.pop(i)

    def _org(self, org_id: str) -> Organization:
        org = self.orgs.get(org_id)
        if org is None:
            raise ApplyError(404, "organization not found")
        return org

    def _ws(self, ws_id: str) -> Workspace:
        ws = self.workspaces.get(ws_id)
        if ws is None:
            raise ApplyError(404, "workspace not found")
        return ws

    def _get(self, table: dict[str, Any], key: str, what: str) -> Any:
        rec = table.get(key)
        if rec is None:
            raise ApplyError(404, f"{what} not found")
        return rec

    @staticmethod
    def _check_new_id(table: dict[str, Any], key: str) -> None:
        if key in table:
            raise ApplyError(409, "id collision; retry")  # writer-chosen ids: vanishingly rare

    # --- users, tokens, VCS installations ---

    def _op_user__create(self, p: dict[str, Any], t: float) -> str:
        if p["username"] in self.user_by_name:
            raise _taken("Username")
        self._check_new_id(self.users, p["id"])
        self.users[p["id"]] = User(
            id=p["id"], username=p["username"], email=p.get("email", ""), created_at=t
        )
        self.user_by_name[p["username"]] = p["id"]
        return p["id"]

    def _op_token__create(self, p: dict[str, Any], t: float) -> str:
        kind, owner = p["kind"], p["owner_id"]
        if kind == "user":
            self._get(self.users, owner, "user")
        elif kind == "team":
            self._get(self.teams, owner, "team")
        elif kind == "run":
            self._ws(owner)  # a run token belongs to its run's workspace
        else:
            self._org(owner)
        self._check_new_id(self.tokens, p["id"])
        desc = p.get("description")
        same_owner = [k for k in self.tokens.values() if k.kind == kind and k.owner_id == owner]
        if p.get("replace"):
            # Organization tokens and legacy team tokens: one per owner, a new one replaces it.
            for old in same_owner:
                if kind == "organization" or old.description is None:
                    self._drop_token(old.id)
        elif kind == "team" and desc is not None and any(k.description == desc for k in same_owner):
            raise _taken("Description")
        tok = Token(
            id=p["id"],
            kind=kind,
            owner_id=owner,
            digest=p["digest"],
            created_at=t,
            description=desc,
            expired_at=p.get("expired_at"),
            created_by=p.get("created_by"),
        )
        self.tokens[tok.id] = tok
        self.token_by_digest[tok.digest] = tok.id
        return tok.id

    def _drop_token(self, token_id: str) -> None:
        tok = self.tokens.pop(token_id, None)
        if tok is not None:
            self.token_by_digest.pop(tok.digest, None)

    def _op_token__delete(self, p: dict[str, Any], t: float) -> None:
        self._get(self.tokens, p["id"], "token")
        self._drop_token(p["id"])

    def _op_vcs__create(self, p: dict[str, Any], t: float) -> str:
        if any(v.installation_id == p["installation_id"] for v in self.vcs.values()):
            raise _taken("Installation id")
        self._check_new_id(self.vcs, p["id"])
        self.vcs[p["id"]] = msgspec.convert(p, VcsInstallation)
        return p["id"]

    def _op_vcs__delete(self, p: dict[str, Any], t: float) -> None:
        self._get(self.vcs, p["id"], "installation")
        del self.vcs[p["id"]]

    # --- organizations and projects ---

    def _op_org__create(self, p: dict[str, Any], t: float) -> str:
        if p["name"] in self.org_by_name:
            raise _taken()
        self._check_new_id(self.orgs, p["id"])
        org = Organization(
            id=p["id"],
            name=p["name"],
            email=p["email"],
            created_at=t,
            owners_team_id=p["owners_team_id"],
            default_project_id=p["default_project_id"],
        )
        self.orgs[org.id] = org
        self.org_by_name[org.name] = org.id
        creator = p.get("creator_user_id")
        self.teams[org.owners_team_id] = Team(
            id=org.owners_team_id,
            org_id=org.id,
            name="owners",
            created_at=t,
            visibility="organization",
            user_ids=[creator] if creator and creator in self.users else [],
        )
        self.projects[org.default_project_id] = Project(
            id=org.default_project_id, org_id=org.id, name="Default Project", created_at=t
        )
        return org.id

    def _op_org__update(self, p: dict[str, Any], t: float) -> None:
        org = self._org(p["org_id"])
        changes = p["changes"]
        new_name = changes.get("name", org.name)
        if new_name != org.name and new_name in self.org_by_name:
            raise _taken()
        if new_name != org.name:
            del self.org_by_name[org.name]
            self.org_by_name[new_name] = org.id
        for k, v in changes.items():
            setattr(org, k, v)

    def _op_org__delete(self, p: dict[str, Any], t: float) -> None:
        org = self._org(p["org_id"])
        for vs in [v for v in self.varsets.values() if v.org_id == org.id]:
            self._drop_varset(vs)
        for w in list(self.workspaces.values()):
            if w.org_id == org.id:
                self._delete_ws(w)
        for table in (self.projects, self.tags, self.policies, self.policy_sets, self.teams):
            for k in [k for k, v in table.items() if v.org_id == org.id]:
                del table[k]
                self.tag_count.pop(k, None)
                self.tag_ws.pop(k, None)
        self.tag_by_name = {k: v for k, v in self.tag_by_name.items() if k[0] != org.id}
        self.versions = {
            k: v for k, v in self.versions.items() if v.policy_set_id in self.policy_sets
        }
        for tok in list(self.tokens.values()):
            if (tok.kind == "organization" and tok.owner_id == org.id) or (
                tok.kind == "team" and tok.owner_id not in self.teams
            ):
                self._drop_token(tok.id)
        del self.org_by_name[org.name]
        del self.orgs[org.id]
        self.ws_sorted.pop(org.id, None)

    def _op_project__create(self, p: dict[str, Any], t: float) -> str:
        self._org(p["org_id"])
        if any(x.org_id == p["org_id"] and x.name == p["name"] for x in self.projects.values()):
            raise _taken()
        self._check_new_id(self.projects, p["id"])
        self.projects[p["id"]] = Project(
            id=p["id"],
            org_id=p["org_id"],
            name=p["name"],
            description=p.get("description") or "",
            created_at=t,
        )
        return p["id"]

    def _op_project__update(self, p: dict[str, Any], t: float) -> None:
        prj: Project = self._get(self.projects, p["id"], "project")
        name = p["changes"].get("name", prj.name)
        if name != prj.name and any(
            x.org_id == prj.org_id and x.name == name for x in self.projects.values()
        ):
            raise _taken()
        for k, v in p["changes"].items():
            setattr(prj, k, v)

    def _op_project__delete(self, p: dict[str, Any], t: float) -> None:
        prj: Project = self._get(self.projects, p["id"], "project")
        if self.orgs[prj.org_id].default_project_id == prj.id:
            raise ApplyError(422, "the default project cannot be deleted")
        if any(w.project_id == prj.id for w in self.workspaces.values()):
            raise ApplyError(422, "project still contains workspaces")
        for ps in self.policy_sets.values():
            if prj.id in ps.project_ids:
                ps.project_ids.remove(prj.id)
        del self.projects[prj.id]

    # --- workspaces ---

    def _check_ws(self, w: Workspace) -> None:
        """Rules on the merged record (create, or an update on top of the current values)."""
        if w.execution_mode == "agent" and not w.agent_pool_id:
            raise ApplyError(422, "agent-pool-id is required when execution-mode is agent")
        if w.execution_mode != "agent" and w.agent_pool_id:
            raise ApplyError(
                422, f"agent-pool-id must not be set when execution-mode is {w.execution_mode}"
            )
        prj = self.projects.get(w.project_id)
        if prj is None or prj.org_id != w.org_id:
            raise ApplyError(422, "project not found")

    def _resolve_tags(
        self, org_id: str, items: list[dict[str, str]], create: bool
    ) -> tuple[list[str], list[Tag]]:
        """Tag ids for `items` ({id} or {name, new_id}); new tags are returned, not stored."""
        ids: list[str] = []
        new: list[Tag] = []
        pending = {}
        for it in items:
            if "id" in it:
                tag = self.tags.get(it["id"])
                if tag is None or tag.org_id != org_id:
                    raise ApplyError(422, f"tag {it['id']} not found")
                ids.append(tag.id)
                continue
            tid = self.tag_by_name.get((org_id, it["name"])) or pending.get(it["name"])
            if tid is None:
                if not create:
                    continue  # removing an unknown name is a no-op
                self._check_new_id(self.tags, it["new_id"])
                tid = pending[it["name"]] = it["new_id"]
                new.append(Tag(id=tid, org_id=org_id, name=it["name"], created_at=0.0))
            ids.append(tid)
        return ids, new

    def _add_tags(self, w: Workspace, ids: list[str], new: list[Tag], t: float) -> None:
        for tag in new:
            tag.created_at = t
            self.tags[tag.id] = tag
            self.tag_by_name[(tag.org_id, tag.name)] = tag.id
            self.tag_count[tag.id] = 0
            self.tag_ws[tag.id] = set()
        for tid in ids:
            if tid not in w.tag_ids:
                w.tag_ids.append(tid)
                self.tag_count[tid] = self.tag_count.get(tid, 0) + 1
                self.tag_ws.setdefault(tid, set()).add(w.id)

    def _remove_tags(self, w: Workspace, ids: Iterable[str]) -> None:
        for tid in ids:
            if tid in w.tag_ids:
                w.tag_ids.remove(tid)
                self.tag_count[tid] -= 1
                self.tag_ws[tid].discard(w.id)
                if self.tag_count[tid] <= 0:
                    # A tag on no workspace leaves the organization's list.
                    tag = self.tags.pop(tid)
                    self.tag_by_name.pop((tag.org_id, tag.name), None)
                    del self.tag_count[tid]
                    del self.tag_ws[tid]

    def _op_ws__create(self, p: dict[str, Any], t: float) -> str:
        fields = p["fields"]
        org = self._org(fields["org_id"])
        if (org.id, fields["name"]) in self.ws_by_name:
            raise _taken()
        self._check_new_id(self.workspaces, fields["id"])
        fields.setdefault("project_id", org.default_project_id)
        w = msgspec.convert(
            {**fields, "created_at": t, "updated_at": t, "latest_change_at": t}, Workspace
        )
        self._check_ws(w)
        ids, new = self._resolve_tags(org.id, p.get("tags", []), create=True)
        self._index_ws(w)
        self._add_tags(w, ids, new, t)
        return w.id

    def _op_ws__update(self, p: dict[str, Any], t: float) -> None:
        w = self._ws(p["id"])
        changes = dict(p["changes"])
        if changes.get("project_id") is None:
            changes.pop("project_id", None)
        # Leaving agent mode drops the pool unless the same update names one.
        if changes.get("execution_mode", "agent") != "agent" and "agent_pool_id" not in changes:
            changes["agent_pool_id"] = None
        vcs = p.get("vcs")  # None: unchanged; "remove"; or a dict of keys to change
        new_vcs = w.vcs_repo
        if vcs == "remove":
            new_vcs = None
        elif isinstance(vcs, dict):
            if w.vcs_repo is None:
                if not vcs.get("identifier") or not vcs.get("oauth_token_id"):
                    raise ApplyError(
                        422,
                        "vcs-repo needs oauth-token-id and identifier on a workspace "
                        "without a repository",
                    )
                new_vcs = msgspec.convert(vcs, VcsRepo)
            else:
                new_vcs = msgspec.structs.replace(w.vcs_repo, **vcs)
        merged = msgspec.structs.replace(w, **changes, vcs_repo=new_vcs)
        if merged.name != w.name and (w.org_id, merged.name) in self.ws_by_name:
            raise _taken()
        self._check_ws(merged)
        tag_ids, new_tags = self._resolve_tags(w.org_id, p.get("tags", []), create=True)
        self._unindex_ws(w)
        for k, v in changes.items():
            setattr(w, k, v)
        w.vcs_repo = new_vcs
        w.updated_at = w.latest_change_at = t
        self._index_ws(w)
        self._add_tags(w, tag_ids, new_tags, t)

    def _delete_ws(self, w: Workspace) -> None:
        self._remove_tags(w, list(w.tag_ids))
        self._unindex_ws(w)
        del self.workspaces[w.id]
        for other in self.workspaces.values():
            if w.id in other.consumer_ids:
                other.consumer_ids.remove(w.id)
        for ps in self.policy_sets.values():
            if w.id in ps.workspace_ids:
                ps.workspace_ids.remove(w.id)
        for k in [k for k, a in self.team_access.items() if a.workspace_id == w.id]:
            del self.team_access[k]
        for sv_id in self.sv_by_ws.pop(w.id, []):
            sv = self.state_versions.pop(sv_id)
            for o in sv.outputs:
                self.output_sv.pop(o.id, None)
        for var_id in self.vars_by_ws.pop(w.id, []):
            self.variables.pop(var_id, None)
        self._drop_runs(w.id)
        for tok in [k for k in self.tokens.values() if k.kind == "run" and k.owner_id == w.id]:
            self._drop_token(tok.id)
        for vs in self.varsets.values():
            if w.id in vs.workspace_ids:
                vs.workspace_ids.remove(w.id)

    def _op_ws__delete(self, p: dict[str, Any], t: float) -> None:
        w = self._ws(p["id"])
        if p.get("safe") and w.locked:
            raise ApplyError(409, "workspace is locked")
        self._delete_ws(w)

    def _op_ws__lock(self, p: dict[str, Any], t: float) -> None:
        w = self._ws(p["id"])
        if w.locked:
            raise ApplyError(409, "workspace already locked")
        w.locked, w.locked_by, w.lock_reason = True, tuple(p["by"]), p.get("reason") or ""
        w.updated_at = t

    def _op_ws__unlock(self, p: dict[str, Any], t: float) -> None:
        w = self._ws(p["id"])
        if not w.locked:
            raise ApplyError(409, "workspace already unlocked")
        if not p.get("force") and w.locked_by != tuple(p["by"]):
            kind = {"users": "User", "teams": "Team", "runs": "Run"}.get(
                w.locked_by[0] if w.locked_by else "", "Organization"
            )
            raise ApplyError(
                409, f"workspace is locked by {kind} {w.locked_by[1] if w.locked_by else ''}"
            )
        w.locked, w.locked_by, w.lock_reason = False, None, ""
        w.updated_at = t

    def _op_ws__consumers(self, p: dict[str, Any], t: float) -> None:
        w = self._ws(p["id"])
        if w.global_remote_state:
            raise ApplyError(
                422,
                "remote state consumers can only be managed on workspaces "
                "whose global-remote-state is false",
            )
        for cid in p["ids"]:
            c = self.workspaces.get(cid)
            if c is None or c.org_id != w.org_id:
                raise ApplyError(422, f"workspace {cid} not found")
            if cid == w.id and p["op"] != "remove":
                raise ApplyError(422, "a workspace cannot be a remote state consumer of itself")
        if p["op"] == "replace":
            w.consumer_ids = list(dict.fromkeys(p["ids"]))
        elif p["op"] == "add":
            w.consumer_ids += [c for c in dict.fromkeys(p["ids"]) if c not in w.consumer_ids]
        else:
            w.consumer_ids = [c for c in w.consumer_ids if c not in p["ids"]]

    def _op_ws__tags(self, p: dict[str, Any], t: float) -> None:
        w = self._ws(p["id"])
        add = p["op"] == "add"
        ids, new = self._resolve_tags(w.org_id, p["items"], create=add)
        if add:
            self._add_tags(w, ids, new, t)
        else:
            self._remove_tags(w, ids)

    def _op_tags__delete(self, p: dict[str, Any], t: float) -> None:
        self._org(p["org_id"])
        for tid in p["ids"]:
            tag = self.tags.get(tid)
            if tag is None or tag.org_id != p["org_id"]:
                raise ApplyError(422, f"tag {tid} not found")
        for w in list(self.workspaces.values()):
            if w.org_id == p["org_id"]:
                self._remove_tags(w, [x for x in p["ids"] if x in w.tag_ids])

    def _op_tag__workspaces(self, p: dict[str, Any], t: float) -> None:
        tag: Tag = self._get(self.tags, p["tag_id"], "tag")
        targets = []
        for wid in p["ids"]:
            w = self.workspaces.get(wid)
            if w is None or w.org_id != tag.org_id:
                raise ApplyError(422, f"workspace {wid} not found")
            targets.append(w)
        for w in targets:
            self._add_tags(w, [tag.id], [], t)

    # --- policies and policy sets ---

    def _check_policy_refs(self, org_id: str, kind: str, ids: list[str]) -> None:
        for pid in ids:
            pol = self.policies.get(pid)
            if pol is None or pol.org_id != org_id:
                raise ApplyError(422, f"policy {pid} not found")
            if pol.kind != kind:
                raise ApplyError(422, f"policy {pid} is a {pol.kind} policy, the set is {kind}")

    def _check_refs(self, org_id: str, projects: list[str], workspaces: list[str]) -> None:
        for pid in projects:
            prj = self.projects.get(pid)
            if prj is None or prj.org_id != org_id:
                raise ApplyError(422, f"project {pid} not found")
        for wid in workspaces:
            w = self.workspaces.get(wid)
            if w is None or w.org_id != org_id:
                raise ApplyError(422, f"workspace {wid} not found")

    def _op_policy__create(self, p: dict[str, Any], t: float) -> str:
        self._org(p["org_id"])
        if any(x.org_id == p["org_id"] and x.name == p["name"] for x in self.policies.values()):
            raise _taken()
        set_ids = p.pop("policy_set_ids", [])
        for sid in set_ids:
            ps = self.policy_sets.get(sid)
            if ps is None or ps.org_id != p["org_id"]:
                raise ApplyError(422, f"policy set {sid} not found")
            if ps.vcs_repo is not None:
                raise ApplyError(422, f"policy set {sid} is backed by a VCS repository")
            if ps.kind != p["kind"]:
                raise ApplyError(422, f"policy set {sid} is a {ps.kind} set")
        self._check_new_id(self.policies, p["id"])
        pol = msgspec.convert({**p, "created_at": t, "updated_at": t}, Policy)
        self.policies[pol.id] = pol
        for sid in set_ids:
            self._link_policy(self.policy_sets[sid], pol.id, t)
        return pol.id

    def _link_policy(self, ps: PolicySet, pid: str, t: float) -> None:
        if pid not in ps.policy_ids:
            ps.policy_ids.append(pid)
            self.policies[pid].policy_set_ids.append(ps.id)
            ps.updated_at = t

    def _unlink_policy(self, ps: PolicySet, pid: str, t: float) -> None:
        if pid in ps.policy_ids:
            ps.policy_ids.remove(pid)
            self.policies[pid].policy_set_ids.remove(ps.id)
            ps.updated_at = t

    def _op_policy__update(self, p: dict[str, Any], t: float) -> None:
        pol: Policy = self._get(self.policies, p["id"], "policy")
        for k, v in p["changes"].items():
            setattr(pol, k, v)
        pol.updated_at = t

    def _op_policy__upload(self, p: dict[str, Any], t: float) -> None:
        pol: Policy = self._get(self.policies, p["id"], "policy")
        pol.content = p["content"]
        pol.updated_at = t

    def _op_policy__delete(self, p: dict[str, Any], t: float) -> None:
        pol: Policy = self._get(self.policies, p["id"], "policy")
        for sid in list(pol.policy_set_ids):
            self._unlink_policy(self.policy_sets[sid], pol.id, t)
        del self.policies[pol.id]

    def _op_polset__create(self, p: dict[str, Any], t: float) -> str:
        f = p["fields"]
        self._org(f["org_id"])
        if any(x.org_id == f["org_id"] and x.name == f["name"] for x in self.policy_sets.values()):
            raise _taken()
        inst = (f.get("vcs_repo") or {}).get("vcs_app_installation_id")
        if inst and inst not in self.vcs:
            raise ApplyError(422, "vcs-app-installation-id not found")
        self._check_policy_refs(f["org_id"], f["kind"], p.get("policy_ids", []))
        self._check_refs(f["org_id"], f.get("project_ids", []), f.get("workspace_ids", []))
        self._check_new_id(self.policy_sets, f["id"])
        ps = msgspec.convert({**f, "created_at": t, "updated_at": t}, PolicySet)
        self.policy_sets[ps.id] = ps
        for pid in p.get("policy_ids", []):
            self._link_policy(ps, pid, t)
        if ps.vcs_repo is not None and p.get("version_id"):
            # A VCS set gets a version to ingest; nothing fetches from VCS here, so it stays
            # pending and the set has no current (ready) version yet.
            self._new_version(ps, p["version_id"], "github", t, ps.vcs_repo.identifier)
        return ps.id

    def _new_version(
        self, ps: PolicySet, vid: str, source: str, t: float, identifier: str | None = None
    ) -> None:
        self._check_new_id(self.versions, vid)
        self.versions[vid] = PolicySetVersion(
            id=vid,
            policy_set_id=ps.id,
            source=source,
            status="pending",
            created_at=t,
            updated_at=t,
            status_timestamps={"pending-at": t},
            ingress_attributes={"commit-sha": None, "commit-url": None, "identifier": identifier}
            if identifier
            else None,
        )
        ps.version_ids.append(vid)
        ps.newest_version_id = vid

    def _op_polset__update(self, p: dict[str, Any], t: float) -> None:
        ps: PolicySet = self._get(self.policy_sets, p["id"], "policy set")
        changes = dict(p["changes"])
        name = changes.get("name", ps.name)
        if name != ps.name and any(
            x.org_id == ps.org_id and x.name == name for x in self.policy_sets.values()
        ):
            raise _taken()
        vcs = p.get("vcs")
        new_vcs = ps.vcs_repo
        if vcs == "remove":
            new_vcs = None
        elif isinstance(vcs, dict):
            if ps.vcs_repo is None:
                if ps.policy_ids:
                    raise ApplyError(
                        422, "a policy set with individual policies cannot get a VCS repository"
                    )
                if not vcs.get("identifier"):
                    raise ApplyError(422, "vcs-repo.identifier is required")
                new_vcs = msgspec.convert(vcs, VcsRepo)
            else:
                new_vcs = msgspec.structs.replace(ps.vcs_repo, **vcs)
        is_global = changes.get("is_global", ps.is_global)
        if is_global and (changes.get("project_ids") or changes.get("workspace_ids")):
            raise ApplyError(422, "projects and workspaces cannot be attached to a global set")
        if changes.get("policies_path") and new_vcs is None:
            raise ApplyError(422, "policies-path is only valid with a VCS repository")
        self._check_refs(
            ps.org_id, changes.get("project_ids", []), changes.get("workspace_ids", [])
        )
        for k, v in changes.items():
            setattr(ps, k, v)
        ps.vcs_repo = new_vcs
        if new_vcs is None:
            ps.policies_path = None
        if is_global:
            ps.project_ids, ps.workspace_ids = [], []  # a global set applies everywhere
        ps.updated_at = t

    def _op_polset__delete(self, p: dict[str, Any], t: float) -> None:
        ps: PolicySet = self._get(self.policy_sets, p["id"], "policy set")
        for pid in list(ps.policy_ids):
            self._unlink_policy(ps, pid, t)
        for vid in ps.version_ids:
            self.versions.pop(vid, None)
        del self.policy_sets[ps.id]

    def _op_polset__rel(self, p: dict[str, Any], t: float) -> None:
        ps: PolicySet = self._get(self.policy_sets, p["id"], "policy set")
        rel, add, ids = p["rel"], p["op"] == "add", p["ids"]
        if rel == "policies":
            if ps.vcs_repo is not None:
                raise ApplyError(
                    422,
                    "policies cannot be attached to or detached from a "
                    "policy set backed by a VCS repository",
                )
            self._check_policy_refs(ps.org_id, ps.kind, ids)
            for pid in ids:
                (self._link_policy if add else self._unlink_policy)(ps, pid, t)
            return
        if ps.is_global and add:
            raise ApplyError(422, f"{rel} cannot be attached to a global policy set")
        if rel == "projects":
            self._check_refs(ps.org_id, ids, [])
            target = ps.project_ids
        else:
            self._check_refs(ps.org_id, [], ids)
            target = ps.workspace_ids
        for x in ids:
            if add and x not in target:
                target.append(x)
            elif not add and x in target:
                target.remove(x)
        ps.updated_at = t

    def _op_version__create(self, p: dict[str, Any], t: float) -> str:
        ps: PolicySet = self._get(self.policy_sets, p["policy_set_id"], "policy set")
        if ps.vcs_repo is not None:
            raise ApplyError(422, "versions of a VCS-backed policy set come from its repository")
        self._new_version(ps, p["id"], "tfe-api", t)
        return p["id"]

    def _op_version__upload(self, p: dict[str, Any], t: float) -> None:
        v: PolicySetVersion = self._get(self.versions, p["id"], "policy set version")
        if v.status != "pending":
            raise ApplyError(422, f"policy set version is already {v.status}")
        v.updated_at = t
        if p.get("error"):
            v.status, v.error = "errored", p["error"]
            v.status_timestamps["errored-at"] = t
            return
        v.status = "ready"
        v.status_timestamps["ready-at"] = t
        self.policy_sets[v.policy_set_id].current_version_id = v.id

    # --- teams and access ---

    def _op_team__create(self, p: dict[str, Any], t: float) -> str:
        self._org(p["org_id"])
        if self.team_named(p["org_id"], p["name"]):
            raise _taken()
        self._check_new_id(self.teams, p["id"])
        self.teams[p["id"]] = msgspec.convert({**p, "created_at": t}, Team)
        return p["id"]

    def _op_team__update(self, p: dict[str, Any], t: float) -> None:
        team: Team = self._get(self.teams, p["id"], "team")
        changes = p["changes"]
        if team.name == "owners" and ("name" in changes or "organization_access" in changes):
            raise ApplyError(422, "the owners team cannot be renamed or restricted")
        if (
            "name" in changes
            and changes["name"] != team.name
            and self.team_named(team.org_id, changes["name"])
        ):
            raise _taken()
        if "organization_access" in changes:
            changes = {
                **changes,
                "organization_access": {
                    **team.organization_access,
                    **changes["organization_access"],
                },
            }
        for k, v in changes.items():
            setattr(team, k, v)

    def _op_team__delete(self, p: dict[str, Any], t: float) -> None:
        team: Team = self._get(self.teams, p["id"], "team")
        if self.orgs[team.org_id].owners_team_id == team.id:
            raise ApplyError(422, "the owners team cannot be deleted")
        del self.teams[team.id]
        for k in [k for k, a in self.team_access.items() if a.team_id == team.id]:
            del self.team_access[k]
        for tok in list(self.tokens.values()):
            if tok.kind == "team" and tok.owner_id == team.id:
                self._drop_token(tok.id)

    def _op_team__members(self, p: dict[str, Any], t: float) -> None:
        team: Team = self._get(self.teams, p["id"], "team")
        ids = []
        for name in p["usernames"]:
            uid = self.user_by_name.get(name)
            if uid is None:
                raise ApplyError(422, f"user {name} not found")
            ids.append(uid)
        if p["op"] == "add":
            team.user_ids += [u for u in dict.fromkeys(ids) if u not in team.user_ids]
        else:
            if self.orgs[team.org_id].owners_team_id == team.id and not [
                u for u in team.user_ids if u not in ids
            ]:
                raise ApplyError(422, "the owners team must keep at least one member")
            team.user_ids = [u for u in team.user_ids if u not in ids]

    def _op_access__create(self, p: dict[str, Any], t: float) -> str:
        team: Team = self._get(self.teams, p["team_id"], "team")
        w = self.workspaces.get(p["workspace_id"])
        if w is None or w.org_id != team.org_id:
            raise ApplyError(422, "workspace not found")
        if self.access_for(team.id, w.id):
            raise ApplyError(422, "Team has already been taken for this workspace")
        self._check_new_id(self.team_access, p["id"])
        self.team_access[p["id"]] = msgspec.convert({**p, "created_at": t}, TeamAccess)
        return p["id"]

    def _op_access__update(self, p: dict[str, Any], t: float) -> None:
        a: TeamAccess = self._get(self.team_access, p["id"], "team access")
        for k, v in p["changes"].items():
            setattr(a, k, v)

    def _op_access__delete(self, p: dict[str, Any], t: float) -> None:
        self._get(self.team_access, p["id"], "team access")
        del self.team_access[p["id"]]

    # --- state versions ---

    def _index_sv(self, sv: StateVersion) -> None:
        self.state_versions[sv.id] = sv
        self.sv_by_ws.setdefault(sv.workspace_id, []).append(sv.id)
        for o in sv.outputs:
            self.output_sv[o.id] = sv.id

    def lock_refusal(self, w: Workspace, holder: tuple[str, str]) -> ApplyError | None:
        if not w.locked:
            return ApplyError(409, "the workspace must be locked by you to create a state version")
        if w.locked_by != holder:
            kind = {"users": "User", "teams": "Team", "runs": "Run"}.get(
                w.locked_by[0] if w.locked_by else "", "Organization"
            )
            return ApplyError(
                409, f"workspace is locked by {kind} {w.locked_by[1] if w.locked_by else ''}"
            )
        return None

    def current_state(self, ws_id: str) -> StateVersion | None:
        w = self.workspaces.get(ws_id)
        if w is None or w.current_state_version_id is None:
            return None
        return self.state_versions.get(w.current_state_version_id)

    def _check_successor(self, w: Workspace, serial: int, lineage: str, md5: str) -> None:
        """A new state must continue the current one: same lineage, no lower serial, and the
        same serial only for the same content (Terraform re-sending what it wrote)."""
        cur = self.current_state(w.id)
        if cur is None:
            return
        if lineage and cur.lineage and lineage != cur.lineage:
            raise ApplyError(
                409,
                f"lineage {lineage!r} does not match the current state's lineage "
                f"{cur.lineage!r}; use force to replace the state",
            )
        if serial < cur.serial or (serial == cur.serial and md5 != cur.md5):
            raise ApplyError(
                409,
                f"serial {serial} must be greater than the current state's serial {cur.serial}",
            )

    def _op_sv__create(self, p: dict[str, Any], t: float) -> str:
        w = self._ws(p["workspace_id"])
        refusal = self.lock_refusal(w, tuple(p["by"]))
        if refusal is not None:
            raise refusal
        if not p.get("force"):
            self._check_successor(w, p["serial"], p.get("lineage", ""), p["md5"])
        self._check_new_id(self.state_versions, p["id"])
        sv = StateVersion(
            id=p["id"],
            workspace_id=w.id,
            created_at=t,
            serial=p["serial"],
            lineage=p.get("lineage", ""),
            md5=p["md5"],
            status=p["status"],
            upload_digest=p.get("upload_digest", ""),
            size=p.get("size", 0),
            state_format=p.get("state_format", 4),
            terraform_version=p.get("terraform_version", ""),
            resource_count=p.get("resource_count", 0),
            resources_json=p.get("resources_json", b"[]"),
            outputs=[msgspec.convert(o, StateOutput) for o in p.get("outputs", [])],
            sealed_values=p.get("sealed_values", b""),
            values_in_blob=p.get("values_in_blob", False),
            created_by=tuple(p["by"]),
            run_id=p.get("run_id"),
            resources_processed=p["status"] == "finalized",
        )
        self._index_sv(sv)
        if sv.status == "finalized":
            w.current_state_version_id = sv.id
            w.latest_change_at = t
        return sv.id

    def _op_sv__finalize(self, p: dict[str, Any], t: float) -> None:
        """The upload of a pending version arrived: it becomes the workspace's current state."""
        sv: StateVersion = self._get(self.state_versions, p["id"], "state version")
        if sv.status != "pending":
            raise ApplyError(409, "the state of this version has already been uploaded")
        w = self._ws(sv.workspace_id)
        if not p.get("force"):
            self._check_successor(w, sv.serial, sv.lineage, sv.md5)
        sv.status = "finalized"
        sv.upload_digest = ""
        sv.resources_processed = True
        for key in ("size", "state_format", "terraform_version", "resource_count"):
            setattr(sv, key, p[key])
        sv.resources_json = p["resources_json"]
        sv.outputs = [msgspec.convert(o, StateOutput) for o in p["outputs"]]
        for o in sv.outputs:
            self.output_sv[o.id] = sv.id
        sv.sealed_values = p["sealed_values"]
        sv.values_in_blob = p.get("values_in_blob", False)
        w.current_state_version_id = sv.id
        w.latest_change_at = t

    # --- variables ---

    def _index_var(self, v: Variable) -> None:
        self.variables[v.id] = v
        if v.workspace_id:
            self.vars_by_ws.setdefault(v.workspace_id, []).append(v.id)
        if v.varset_id:
            self.vars_by_set.setdefault(v.varset_id, []).append(v.id)

    def _check_var_key(self, v: Variable) -> None:
        siblings = (
            self.vars_by_ws.get(v.workspace_id, [])
            if v.workspace_id
            else self.vars_by_set.get(v.varset_id or "", [])
        )
        for other_id in siblings:
            other = self.variables[other_id]
            if other.id != v.id and other.key == v.key and other.category == v.category:
                raise _taken("Key")

    def _op_var__create(self, p: dict[str, Any], t: float) -> str:
        if p.get("varset_id"):
            self._get(self.varsets, p["varset_id"], "variable set")
        else:
            self._ws(p["workspace_id"])
        self._check_new_id(self.variables, p["id"])
        v = msgspec.convert({**p, "created_at": t}, Variable)
        self._check_var_key(v)
        self._index_var(v)
        return v.id

    def _op_var__update(self, p: dict[str, Any], t: float) -> None:
        v: Variable = self._get(self.variables, p["id"], "variable")
        changes = dict(p["changes"])
        if v.sensitive and changes.get("sensitive") is False:
            raise ApplyError(422, "a sensitive variable cannot be made non-sensitive")
        merged = msgspec.structs.replace(v, **changes)
        self._check_var_key(merged)
        for k, val in changes.items():
            setattr(v, k, val)

    def _op_var__delete(self, p: dict[str, Any], t: float) -> None:
        v: Variable = self._get(self.variables, p["id"], "variable")
        del self.variables[v.id]
        if v.workspace_id:
            self.vars_by_ws[v.workspace_id].remove(v.id)
        if v.varset_id:
            self.vars_by_set[v.varset_id].remove(v.id)

    # --- variable sets ---

    def _check_varset_targets(self, org_id: str, ws_ids: list[str], prj_ids: list[str]) -> None:
        for wid in ws_ids:
            w = self.workspaces.get(wid)
            if w is None or w.org_id != org_id:
                raise ApplyError(422, f"workspace {wid} not found")
        for pid in prj_ids:
            prj = self.projects.get(pid)
            if prj is None or prj.org_id != org_id:
                raise ApplyError(422, f"project {pid} not found")

    def _varset_name_taken(self, org_id: str, name: str, own_id: str) -> bool:
        return any(
            v.org_id == org_id and v.name == name and v.id != own_id for v in self.varsets.values()
        )

    def _op_varset__create(self, p: dict[str, Any], t: float) -> str:
        self._org(p["org_id"])
        if self._varset_name_taken(p["org_id"], p["name"], p["id"]):
            raise _taken()
        self._check_varset_targets(
            p["org_id"], p.get("workspace_ids", []), p.get("project_ids", [])
        )
        self._check_new_id(self.varsets, p["id"])
        vs = msgspec.convert({**p, "created_at": t, "updated_at": t}, VariableSet)
        vs.workspace_ids = list(dict.fromkeys(vs.workspace_ids))
        vs.project_ids = list(dict.fromkeys(vs.project_ids))
        self.varsets[vs.id] = vs
        return vs.id

    def _op_varset__update(self, p: dict[str, Any], t: float) -> None:
        vs: VariableSet = self._get(self.varsets, p["id"], "variable set")
        changes = p["changes"]
        if "name" in changes and self._varset_name_taken(vs.org_id, changes["name"], vs.id):
            raise _taken()
        self._check_varset_targets(
            vs.org_id, changes.get("workspace_ids", []), changes.get("project_ids", [])
        )
        for k, v in changes.items():
            setattr(vs, k, list(dict.fromkeys(v)) if isinstance(v, list) else v)
        vs.updated_at = t

    def _drop_varset(self, vs: VariableSet) -> None:
        for var_id in self.vars_by_set.pop(vs.id, []):
            self.variables.pop(var_id, None)
        del self.varsets[vs.id]

    def _op_varset__delete(self, p: dict[str, Any], t: float) -> None:
        self._drop_varset(self._get(self.varsets, p["id"], "variable set"))

    def _op_varset__rel(self, p: dict[str, Any], t: float) -> None:
        """Attach or detach workspaces or projects; attaching twice or detaching an absent one
        is a no-op."""
        vs: VariableSet = self._get(self.varsets, p["id"], "variable set")
        if p["rel"] == "workspaces":
            self._check_varset_targets(vs.org_id, p["ids"], [])
            target = vs.workspace_ids
        else:
            self._check_varset_targets(vs.org_id, [], p["ids"])
            target = vs.project_ids
        for x in p["ids"]:
            if p["op"] == "add" and x not in target:
                target.append(x)
            elif p["op"] == "remove" and x in target:
                target.remove(x)
        vs.updated_at = t

    def varsets_for(self, w: Workspace) -> list[VariableSet]:
        """The sets that apply to a workspace: global ones, and those attached to it or to its
        project."""
        return [
            vs
            for vs in self.varsets.values()
            if vs.org_id == w.org_id
            and (vs.is_global or w.id in vs.workspace_ids or w.project_id in vs.project_ids)
        ]

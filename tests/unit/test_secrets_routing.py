"""The secrets service's routing steps, each answered from tables built once: the mount of a
path (longest prefix), the backend path a request lands on, and the namespace of a request."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from services.secrets.core.barrier import Barrier
from services.secrets.core.mounts import MountTable, new_entry
from services.secrets.core.namespaces import ROOT, Namespace, NamespaceStore
from services.secrets.framework.backend import Backend
from services.secrets.framework.path import Op, Operation, Path
from services.secrets.framework.request import Request, Response
from shared.storage import MemoryStorage


async def _answer(req: Request, fields: Any) -> Response:
    return Response()


def _path(*templates: str) -> Path:
    return Path(templates, {Op.READ: Operation(_answer)})


class Two(Backend):
    def build_paths(self) -> list[Path]:
        return [_path("config"), _path("roles/{name}"), _path("data/{path*}")]


def _backend() -> Two:
    return Two(None, None, Barrier(MemoryStorage()).view(""))


def test_routes_stay_the_same_when_asked_again() -> None:
    b = _backend()
    for _ in range(2):
        got = b.route("roles/web")
        assert got is not None and got.path.templates == ("roles/{name}",)
        assert got.captures == {"name": "web"}
        assert b.route("roles/web.") is None  # a parameter ending in a period
        assert b.route("nothing/here") is None
        data = b.route("data/a/b")
        assert data is not None and data.captures == {"path": "a/b"}


def test_routes_follow_rebuilt_paths() -> None:
    # KV rebuilds its paths when a tune changes its version: old routes must not survive.
    b = _backend()
    assert b.route("config") is not None and b.route("other") is None
    b.paths = [_path("other")]
    assert b.route("config") is None
    got = b.route("other")
    assert got is not None and got.path.templates == ("other",)


def _reference_mount(mounts: list[str], path: str) -> str | None:
    best = None
    for mp in mounts:
        if (path.startswith(mp) or path == mp[:-1]) and (best is None or len(mp) > len(best)):
            best = mp
    return best


_seg = st.sampled_from(["a", "b", "auth", "token", "kv", "x"])
_mount = st.lists(_seg, min_size=1, max_size=3).map(lambda s: "/".join(s) + "/")
_req = st.lists(_seg | st.just(""), min_size=1, max_size=4).map("/".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_mount, min_size=1, max_size=8, unique=True), st.lists(_req, max_size=10))
def test_mount_match_is_the_longest_prefix(mounts: list[str], paths: list[str]) -> None:
    table = MountTable()
    backend = _backend()
    for mp in mounts:
        table.set(new_entry(mp, "kv"), backend)
    for path in [*paths, *mounts, *(mp[:-1] for mp in mounts)]:
        got = table.match(path)
        assert (got.path if got else None) == _reference_mount(mounts, path)
    removed = mounts[0]
    table.remove(removed)
    for path in [*paths, removed, removed[:-1]]:
        got = table.match(path)
        assert (got.path if got else None) == _reference_mount(mounts[1:], path)


def test_namespaces_resolve_with_and_without_children() -> None:
    store = NamespaceStore(Barrier(MemoryStorage()))
    assert store.resolve("", "team/kv/data/x") == (ROOT, "team/kv/data/x")
    team = Namespace(id="t1", path="team/")
    store.by_path["team/"] = team
    store.by_id["t1"] = team
    assert store.resolve("", "team/kv/data/x") == (team, "kv/data/x")
    assert store.resolve("team", "kv/data/x") == (team, "kv/data/x")
    assert store.resolve("", "kv/data/x") == (ROOT, "kv/data/x")

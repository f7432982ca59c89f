"""A token lookup's data rendered once per entry (services/secrets/auth/token_lookup.py) is the
JSON of building it afresh, with the TTL of the moment, and follows a renewal."""

from __future__ import annotations

import time

import msgspec
import pytest

from services.secrets.auth.token import lookup_data
from services.secrets.auth.token_lookup import LookupRenderer
from services.secrets.core.tokens import TokenEntry


def fresh(entry: TokenEntry, include_id: bool) -> dict:
    return lookup_data(entry, include_id=include_id)


def renderer() -> LookupRenderer:
    return LookupRenderer(fresh)


def entry(**kw: object) -> TokenEntry:
    now = time.time()
    base: dict = {
        "id": "hvs.render-test-token",
        "accessor": "acc-render-test",
        "policies": ["default", "p1"],
        "creation_time": now,
        "ttl": 3600,
        "expire_time": now + 3600,
    }
    return TokenEntry(**{**base, **kw})


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"meta": {"team": 'a"b'}, "period": 600, "role": "r1"},
        {"ttl": 0, "expire_time": 0.0, "policies": ["root"], "display_name": "root"},
        {"num_uses": 3, "orphan": True, "entity_id": ""},
    ],
)
@pytest.mark.parametrize("include_id", [True, False])
def test_same_json_as_built_afresh(kw: dict, include_id: bool) -> None:
    e = entry(**kw)
    r = renderer()
    for _ in range(2):  # the miss, then the hit
        got = msgspec.json.decode(msgspec.json.encode(r.render(e, include_id=include_id)))
        assert got == fresh(e, include_id)
        assert list(got) == list(fresh(e, include_id))  # the same key order


def test_ttl_is_of_the_moment_and_renewal_is_seen() -> None:
    e = entry(expire_time=time.time() + 100)
    r = renderer()
    first = msgspec.json.decode(msgspec.json.encode(r.render(e, include_id=True)))
    assert 98 <= first["ttl"] <= 100
    e.expire_time = time.time() + 5000  # what TokenStore.renew does in place
    renewed = msgspec.json.decode(msgspec.json.encode(r.render(e, include_id=True)))
    assert 4998 <= renewed["ttl"] <= 5000
    assert renewed["expire_time"] == fresh(e, True)["expire_time"] != first["expire_time"]


def test_entries_are_told_apart() -> None:
    r = renderer()
    a, b = entry(id="hvs.render-a", accessor="acc-a"), entry(id="hvs.render-b", accessor="acc-b")
    for e in (a, b, a):
        got = msgspec.json.decode(msgspec.json.encode(r.render(e, include_id=True)))
        assert (got["id"], got["accessor"]) == (e.id, e.accessor)

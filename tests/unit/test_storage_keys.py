"""Storage key escaping: any path becomes a valid NATS KV key and comes back unchanged."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from shared.storage import decode_key, encode_key

VALID = re.compile(r"^[-/_=.A-Za-z0-9]+$")


@given(st.lists(st.text(min_size=0, max_size=12), min_size=1, max_size=6))
def test_round_trip_and_valid(segments: list[str]) -> None:
    path = "/".join(segments)
    key = encode_key(path)
    assert VALID.match(key)
    assert not key.startswith(".") and not key.endswith(".") and ".." not in key
    assert decode_key(key) == path


def test_prefix_structure_is_kept() -> None:
    assert encode_key("logical/abc/data/x y") == "logical.abc.data.x=20y"
    assert encode_key("a.b/c") == "a=2Eb.c"

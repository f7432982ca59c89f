"""Transit's direct field decoding agrees with the generic decoder on every body it takes, and
leaves every body that needs coercion, a warning or an error to the generic decoder."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest

from services.secrets.engines.transit.fastfields import exact_types, plain_fields
from services.secrets.engines.transit.paths_crypt import CryptItem, DatakeyFields, EncryptFields
from services.secrets.engines.transit.paths_keys import CreateFields
from services.secrets.engines.transit.paths_sign import SignFields
from services.secrets.framework.fields import FieldError, decode_fields

STRUCTS = [EncryptFields, CryptItem, SignFields, DatakeyFields, CreateFields]
# Values of every JSON kind a client may send, typed and weakly typed.
VALUES: list[Any] = [
    "eHh4",
    "",
    "12",
    "true",
    0,
    3,
    -1,
    2**63,
    -(2**63) - 1,
    1.0,
    1.5,
    True,
    False,
    None,
    [],
    ["a"],
    {"a": 1},
]


def generic(struct: type[msgspec.Struct], raw: dict[str, Any], captures: dict[str, str]) -> Any:
    try:
        fields, unknown = decode_fields(struct, raw, captures)
    except FieldError as exc:
        return ("error", str(exc))
    return fields, unknown


@pytest.mark.parametrize("struct", STRUCTS, ids=lambda s: s.__name__)
def test_agrees_with_generic_decoder_or_declines(struct: type[msgspec.Struct]) -> None:
    names = [f.encode_name for f in msgspec.structs.fields(struct)] + ["unknown_param"]
    captures = {"name": "k1"} if "name" in names else {}
    if struct is DatakeyFields:
        captures["plaintext"] = "wrapped"
    taken = 0
    bodies: list[dict[str, Any]] = [{}]
    bodies += [{n: v} for n, v in itertools.product(names, VALUES)]
    bodies += [{a: "eHh4", b: 2} for a, b in itertools.combinations(names, 2)]
    for body in bodies:
        fast = plain_fields(struct, body, captures)
        if fast is None:
            continue
        taken += 1
        # Whatever it builds is what the generic decoder builds, with nothing to warn about.
        assert (fast, []) == generic(struct, body, captures), body
    assert taken > 0  # it does take the plain bodies


def test_declines_what_needs_the_generic_decoder() -> None:
    captures = {"name": "k1"}
    for body in (
        {"key_version": "2"},  # weakly typed integer
        {"key_version": 2**64},  # beyond Go's int
        {"key_version": True},  # a boolean is not an integer here
        {"convergent_encryption": "true"},  # weakly typed boolean
        {"plaintext": None},  # null means the default
        {"plaintext": "eHh4", "colour": "blue"},  # unknown: a warning
        {"name": "other"},  # the URL's capture wins over the body
        {"batch_input": [{"plaintext": "eHh4"}]},  # a container field
    ):
        assert plain_fields(EncryptFields, body, captures) is None, body
    # A missing required field keeps the generic decoder's wording.
    assert plain_fields(EncryptFields, {"plaintext": "eHh4"}, {}) is None
    # Annotated fields (durations) carry their own parsing.
    assert "auto_rotate_period" not in exact_types(CreateFields)


def test_plain_body_builds_the_struct() -> None:
    got = plain_fields(EncryptFields, {"plaintext": "eHh4", "key_version": 2}, {"name": "k1"})
    assert got == EncryptFields(name="k1", plaintext="eHh4", key_version=2)

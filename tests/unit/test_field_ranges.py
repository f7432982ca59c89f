"""Numbers past what a secrets field holds are a 400 naming the field, never an overflow deep
in a handler: Go's int is 64 bits and time.Duration is int64 nanoseconds (OpenBao refuses
both the same way)."""

from __future__ import annotations

import msgspec
import pytest

from services.secrets.framework.durations import MAX_SECONDS, parse_duration
from services.secrets.framework.fields import Duration, FieldError, decode_fields


class Fields(msgspec.Struct, kw_only=True):
    ttl: Duration = 0
    num_uses: int = 0


@pytest.mark.parametrize(
    "raw",
    [
        {"ttl": MAX_SECONDS + 1},
        {"ttl": 1e300},
        {"ttl": "9" * 400 + "h"},  # float("9" * 400) is inf
        {"ttl": "99999999999999999999h"},
        {"num_uses": 2**63},
        {"num_uses": -(2**63) - 1},
        {"num_uses": 1e300},
        {"num_uses": "9223372036854775808"},
        {"num_uses": "9" * 5000},
    ],
)
def test_out_of_range_is_a_field_error(raw: dict[str, object]) -> None:
    with pytest.raises(FieldError) as err:
        decode_fields(Fields, raw, {})
    assert next(iter(raw)) in str(err.value)


def test_the_limits_themselves_are_accepted() -> None:
    fields, _ = decode_fields(Fields, {"ttl": MAX_SECONDS, "num_uses": 2**63 - 1}, {})
    assert fields.ttl == MAX_SECONDS and fields.num_uses == 2**63 - 1  # type: ignore[attr-defined]


def test_parse_duration_refuses_infinity_in_units() -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_duration("1" + "0" * 400 + "s")


class Opts(msgspec.Struct, kw_only=True):
    opts: dict[str, str] = {}


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', '{"a": 1e999}', '{"a":' * 10_000 + "1" + "}" * 10_000, '{"a": "x"'],
)
def test_a_map_given_as_a_json_string_obeys_the_body_policy(text: str) -> None:
    with pytest.raises(FieldError, match="opts"):
        decode_fields(Opts, {"opts": text}, {})

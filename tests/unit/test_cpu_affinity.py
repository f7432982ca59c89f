"""`--cpu-affinity` specs: CPU lists as Linux writes them, kind=cpus pairs checked against the
CPUs this process may use, and `auto` only on a 2-CPU host."""

from __future__ import annotations

import pytest

from shared.cpu_affinity import auto, parse, parse_cpus

TWO = frozenset({0, 1})


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0", {0}), ("0-3", {0, 1, 2, 3}), ("0,2", {0, 2}), ("1-2,5", {1, 2, 5}), (" 3 ", {3})],
)
def test_cpu_lists(text: str, cpus: set[int]) -> None:
    assert parse_cpus(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "3-1", "0;1", "1.5", "0,,1"])
def test_a_malformed_cpu_list_says_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpus(text)


def test_off_and_empty_pin_nothing() -> None:
    assert parse("off", TWO) == {} == parse("", TWO)


def test_auto_splits_two_cpus_between_the_gateways_and_the_secrets_path() -> None:
    layout = parse("auto", frozenset({2, 5}))
    assert layout == {"gateway": {2}, "secrets": {5}, "nats": {5}}


@pytest.mark.parametrize("usable", [{0}, {0, 1, 2}, {0, 1, 2, 3}])
def test_auto_pins_nothing_on_a_host_of_another_size(usable: set[int]) -> None:
    assert auto(frozenset(usable)) == {}


def test_pairs() -> None:
    layout = parse("gateway=0; secrets=1;nats=0-1", TWO)
    assert layout == {"gateway": {0}, "secrets": {1}, "nats": {0, 1}}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gateway", "not a kind=cpus pair"),
        ("vault=0", "kinds: client, crypto, gateway"),
        ("gateway=x", "not a CPU list"),
        ("secrets=7", r"CPUs \[7\] are not usable here \(usable: \[0, 1\]\)"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(spec, TWO)


def test_where_nothing_can_be_pinned_off_and_auto_pin_nothing_and_a_layout_is_refused() -> None:
    # usable_cpus() is empty where the platform has no sched_getaffinity (macOS).
    assert parse("off", frozenset()) == {} == parse("auto", frozenset())
    with pytest.raises(ValueError, match=r"CPUs \[0\] are not usable here \(usable: \[\]\)"):
        parse("gateway=0", frozenset())

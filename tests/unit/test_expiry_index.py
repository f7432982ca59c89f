"""The expiry leader's in-memory schedule: what is due, in which order, and what stays."""

from __future__ import annotations

import random

from services.secrets.core.expiration import _slot
from services.secrets.core.expiry_index import ExpiryIndex, due_second


def test_names_parse_to_the_second_they_fall_due() -> None:
    name = _slot(1_700_000_000.2, "lease/a")
    assert due_second(name) == 1_700_000_001  # rounded up: due once that second has passed
    assert due_second("000000000001/000000000075-abc") == 75


def test_a_name_that_does_not_parse_is_due_at_once() -> None:
    index = ExpiryIndex()
    index.add("-00001/-000000000060-abc")
    index.add(_slot(500, "x"))
    assert index.due(0) == ["-00001/-000000000060-abc"]


def test_only_due_names_in_due_order() -> None:
    index = ExpiryIndex()
    rng = random.Random(7)
    dues = [rng.randrange(1000, 2000) for _ in range(300)]
    names = [_slot(d, f"ref-{i}") for i, d in enumerate(dues)]
    for name in rng.sample(names, len(names)):
        index.add(name)
    got = index.due(1500)
    expected = sorted((n for n, d in zip(names, dues, strict=True) if d <= 1500), key=due_second)
    assert [due_second(n) for n in got] == [due_second(n) for n in expected]
    assert set(got) == set(expected)
    assert len(index) == len(names)


def test_due_names_stay_until_discarded() -> None:
    index = ExpiryIndex()
    first, second = _slot(10, "a"), _slot(10, "b")
    index.add(first)
    index.add(second)
    assert index.due(10) == sorted([first, second])
    index.discard(first)  # handled; the other one failed and must come back
    assert index.due(11) == [second]
    index.discard(second)
    assert index.due(12) == [] and len(index) == 0


def test_discard_then_add_in_the_same_second() -> None:
    index = ExpiryIndex()
    name = _slot(20, "a")
    index.add(name)
    index.discard(name)
    assert name not in index
    index.add(name)
    index.add(name)  # twice: still one name, offered once
    assert index.due(20) == [name]


def test_future_names_are_not_offered() -> None:
    index = ExpiryIndex()
    for i in range(1000):
        index.add(_slot(10_000 + i, f"ref-{i}"))
    assert index.due(9_999) == []
    assert index.due(10_000) == [_slot(10_000, "ref-0")]


def test_clear_forgets_everything() -> None:
    index = ExpiryIndex()
    index.add(_slot(5, "a"))
    index.clear()
    assert index.due(100) == [] and len(index) == 0
    index.add(_slot(6, "b"))
    assert index.due(100) == [_slot(6, "b")]

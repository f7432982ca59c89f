"""Shamir secret sharing: Vault's share format, recovery from any threshold subset, validation."""

from __future__ import annotations

import itertools
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.secrets.shamir import combine, split


def _ref_mul(a: int, b: int) -> int:
    """Bit-by-bit GF(2^8) multiply with the AES polynomial, independent of the module's tables."""
    product = 0
    while b:
        if b & 1:
            product ^= a
        a <<= 1
        if a & 0x100:
            a ^= 0x11B
        b >>= 1
    return product


def _ref_eval(coeffs: list[int], x: int) -> int:
    y = 0
    for coeff in reversed(coeffs):
        y = _ref_mul(y, x) ^ coeff
    return y


def test_reference_multiply_matches_fips_197() -> None:
    # FIPS-197 section 4.2 example, and the well-known inverse pair {53}{CA} = {01}.
    assert _ref_mul(0x57, 0x83) == 0xC1
    assert _ref_mul(0x53, 0xCA) == 0x01


def test_combine_known_vector() -> None:
    # f(x) = 0x42 + 0x57 x: f(1) = 0x15, f(0x83) = 0x42 ^ 0xC1 = 0x83. Value byte, then x byte.
    assert combine([b"\x15\x01", b"\x83\x83"]) == b"\x42"
    assert combine([b"\x83\x83", b"\x15\x01"]) == b"\x42"


@settings(max_examples=50, deadline=None)
@given(
    secret=st.binary(min_size=1, max_size=48),
    coeffs=st.lists(st.binary(min_size=48, max_size=48), min_size=1, max_size=4),
    xs=st.lists(st.integers(1, 255), min_size=5, max_size=5, unique=True),
)
def test_combine_matches_reference_field(secret: bytes, coeffs: list[bytes], xs: list[int]) -> None:
    """Shares computed with the slow reference arithmetic combine to the secret: same field."""
    threshold = len(coeffs) + 1
    shares = []
    for x in xs[:threshold]:
        ys = bytes(_ref_eval([s, *(c[i] for c in coeffs)], x) for i, s in enumerate(secret))
        shares.append(ys + bytes([x]))
    assert combine(shares) == secret


def test_share_format_for_a_32_byte_key() -> None:
    key = os.urandom(32)
    shares = split(key, 5, 3)
    assert len(shares) == 5
    assert all(isinstance(share, bytes) and len(share) == 33 for share in shares)
    xs = [share[-1] for share in shares]
    assert len(set(xs)) == 5
    assert all(1 <= x <= 255 for x in xs)
    assert all(len(share.hex()) == 66 for share in shares)


def test_x_coordinates_are_random() -> None:
    # 20 draws of 5 x values from 1..255 all coinciding would be astronomically unlikely.
    draws = {tuple(s[-1] for s in split(b"k", 5, 2)) for _ in range(20)}
    assert len(draws) > 1


def test_shares_evaluate_a_polynomial_with_the_secret_as_intercept() -> None:
    """Any 2 shares of a 2-of-n split define the same line, and its value at 0 is the secret."""
    secret = os.urandom(16)
    shares = split(secret, 6, 2)
    for a, b in itertools.combinations(shares, 2):
        assert combine([a, b]) == secret


@settings(max_examples=60, deadline=None)
@given(
    secret=st.binary(min_size=1, max_size=64),
    parts_threshold=st.integers(2, 12).flatmap(
        lambda parts: st.tuples(st.just(parts), st.integers(2, parts))
    ),
    data=st.data(),
)
def test_any_threshold_subset_recovers(
    secret: bytes, parts_threshold: tuple[int, int], data: st.DataObject
) -> None:
    parts, threshold = parts_threshold
    shares = split(secret, parts, threshold)
    assert len(shares) == parts
    assert {len(share) for share in shares} == {len(secret) + 1}
    size = data.draw(st.integers(threshold, parts), label="subset size")
    subset = data.draw(st.permutations(shares), label="order")[:size]
    assert combine(subset) == secret


def test_every_subset_of_a_5_of_3_split_recovers() -> None:
    secret = os.urandom(32)
    shares = split(secret, 5, 3)
    for size in (3, 4, 5):
        for subset in itertools.combinations(shares, size):
            assert combine(list(subset)) == secret


def test_max_parts() -> None:
    secret = os.urandom(32)
    shares = split(secret, 255, 2)
    assert sorted(share[-1] for share in shares) == list(range(1, 256))
    assert combine(shares[100:102]) == secret
    assert combine(shares) == secret


def test_accepts_bytes_like_inputs() -> None:
    secret = bytearray(os.urandom(8))
    shares = split(secret, 3, 2)
    assert combine([bytearray(shares[0]), memoryview(shares[2])]) == bytes(secret)


def test_split_and_combine_are_fast() -> None:
    key = os.urandom(32)
    rounds = 200
    # Best of several batches, so a busy machine does not make the test flaky.
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            combine(split(key, 5, 3)[:3])
        best = min(best, (time.perf_counter() - start) / rounds)
    assert best < 1e-3


@pytest.mark.parametrize(
    ("secret", "parts", "threshold", "message"),
    [
        (b"", 3, 2, "empty"),
        (b"k", 3, 1, "threshold must be at least 2"),
        (b"k", 1, 1, "threshold must be at least 2"),
        (b"k", 3, 0, "threshold must be at least 2"),
        (b"k", 2, 3, "less than threshold"),
        (b"k", 256, 3, "cannot exceed 255"),
    ],
)
def test_split_validation(secret: bytes, parts: int, threshold: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split(secret, parts, threshold)


def test_combine_needs_two_shares() -> None:
    share = split(b"secret", 3, 2)[0]
    with pytest.raises(ValueError, match="at least 2 shares"):
        combine([share])
    with pytest.raises(ValueError, match="at least 2 shares"):
        combine([])


def test_combine_rejects_short_shares() -> None:
    with pytest.raises(ValueError, match="at least 2 bytes"):
        combine([b"\x01", b"\x02"])
    with pytest.raises(ValueError, match="at least 2 bytes"):
        combine([b"", b""])


def test_combine_rejects_unequal_lengths() -> None:
    a = split(b"secret", 3, 2)
    b = split(b"longer secret", 3, 2)
    with pytest.raises(ValueError, match="same length"):
        combine([a[0], b[1]])


def test_combine_rejects_duplicate_x() -> None:
    shares = split(b"secret", 3, 2)
    with pytest.raises(ValueError, match="duplicate"):
        combine([shares[0], shares[0]])
    # Same x but different values is still a duplicate coordinate.
    forged = bytes(b ^ 0xFF for b in shares[0][:-1]) + shares[0][-1:]
    with pytest.raises(ValueError, match="duplicate"):
        combine([shares[0], forged, shares[1]])

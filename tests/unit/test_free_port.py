"""free_port: listener ports come from below the kernel's ephemeral range, which outgoing
connections draw their source ports from, and are free when handed out."""

from __future__ import annotations

import socket

import pytest

from shared import localnet


def test_ports_come_from_below_the_ephemeral_range_and_are_free() -> None:
    low = localnet._ephemeral_low()
    ports = {localnet.free_port() for _ in range(50)}
    assert len(ports) > 40  # drawn at random, not one port over and over
    for port in ports:
        if low > localnet._LOW_PORT + 1_000:
            assert localnet._LOW_PORT <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing holds it


def test_without_a_known_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(localnet, "_ephemeral_low", lambda: 0)
    port = localnet.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))

"""services/port_guard.py on real sockets: a taken port fails the check, a held port admits
the node's own SO_REUSEPORT gateways but not a second supervisor, and takes no connections."""

from __future__ import annotations

import socket

import pytest

from services import port_guard


def _gateway_listener(addr: str) -> socket.socket:
    """What a gateway with gateway_processes > 1 binds (aiohttp reuse_address + reuse_port)."""
    host, port = port_guard.split_addr(addr)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def test_port_0_becomes_a_concrete_free_port() -> None:
    addrs, held = port_guard.claim(["127.0.0.1:0", "127.0.0.1:0"], hold=False)
    assert held == []
    ports = [port_guard.split_addr(a)[1] for a in addrs]
    assert all(ports) and all(a.startswith("127.0.0.1:") for a in addrs)


def test_a_listening_port_is_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(SystemExit, match=f"{addr}: address already in use"):
            port_guard.claim(["127.0.0.1:0", addr], hold=True)


def test_held_ports_admit_our_gateways_only() -> None:
    addrs, held = port_guard.claim(["127.0.0.1:0"], hold=True)
    gateways: list[socket.socket] = []
    try:
        gateways = [_gateway_listener(addrs[0]) for _ in range(2)]
        # A second supervisor (same user) checking the same port is refused...
        with pytest.raises(SystemExit, match="address already in use"):
            port_guard.claim(addrs, hold=True)
        for g in gateways:
            g.close()
        # ...also while no gateway listens (all of ours restarting).
        with pytest.raises(SystemExit, match="address already in use"):
            port_guard.claim(addrs, hold=False)
        gateways = [_gateway_listener(addrs[0])]
        # The held socket takes no connections: every one reaches the gateway.
        gateways[0].settimeout(5)
        for _ in range(20):
            with socket.create_connection(port_guard.split_addr(addrs[0]), timeout=5):
                conn, _ = gateways[0].accept()
                conn.close()
    finally:
        for g in gateways:
            g.close()
        port_guard.release(held)
    # Released: free again for anyone.
    assert port_guard.claim(addrs, hold=False)[0] == addrs


def test_time_wait_leftovers_neither_block_nor_break_the_hold() -> None:
    """Connections an earlier run closed first linger in TIME_WAIT on the port: the check
    passes, the hold falls back to SO_REUSEADDR, and the gateways still bind and guard."""
    earlier = _gateway_listener("127.0.0.1:0")
    addr = f"127.0.0.1:{earlier.getsockname()[1]}"
    clients = []
    for _ in range(3):
        clients.append(socket.create_connection(port_guard.split_addr(addr), timeout=5))
        conn, _ = earlier.accept()
        conn.close()  # the server side closes first: TIME_WAIT on the listener's port
    earlier.close()
    addrs, held = port_guard.claim([addr], hold=True)
    try:
        gateway = _gateway_listener(addr)
        with pytest.raises(SystemExit, match="address already in use"):
            port_guard.claim(addrs, hold=True)
        gateway.close()
    finally:
        port_guard.release(held)
        for c in clients:
            c.close()

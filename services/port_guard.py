"""Listener ports that several gateway processes share (SO_REUSEPORT) without letting a second,
foreign `trellis dev` or `trellis server` of the same user join them.

Linux lets any socket of the same user with SO_REUSEPORT bind a port that SO_REUSEPORT sockets
hold, and then splits the connections among them: a second `trellis dev` on the same ports would
silently serve half the clients from another cluster. So the supervisor first binds each port
without SO_REUSEPORT (fails while anyone listens there: "address in use", as with one gateway),
then keeps an SO_REUSEPORT socket bound, never listening, for its whole life: its own gateways
(SO_REUSEPORT, same user) still bind beside it, while another supervisor's first check fails,
also while none of our gateways listens (starting, restarting). A bound socket that does not
listen is in no accept group, so it takes no connections.

The held socket has no SO_REUSEADDR: with it, the other check (which needs SO_REUSEADDR to
pass over TIME_WAIT connections of an earlier run) would pass while no gateway listens. Those
TIME_WAIT connections also keep a socket without SO_REUSEADDR off the port for up to a minute;
then the held socket has both options and guards only while a gateway listens."""

from __future__ import annotations

import contextlib
import errno
import socket


def split_addr(addr: str) -> tuple[str, int]:
    """Host and port of "host:port" (an empty host: every IPv4 address)."""
    host, _, port = addr.rpartition(":")
    return host or "0.0.0.0", int(port)


def _sockets(host: str, port: int, *, reuse_addr: bool, share: bool) -> list[socket.socket]:
    """Bound sockets for every address `host` resolves to, as asyncio's create_server binds
    them (AI_PASSIVE, IPv6 only on IPv6 sockets)."""
    out: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            out.append(sock)
            if reuse_addr:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if share:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except BaseException:
        for sock in out:
            sock.close()
        raise
    return out


def claim(addrs: list[str], *, hold: bool) -> tuple[list[str], list[socket.socket]]:
    """Check that each "host:port" is free (SystemExit naming it if not); port 0 becomes a
    concrete free port, since processes can only share a port they all name. `hold`: keep an
    SO_REUSEPORT socket bound on each (close them once the gateways are stopped). Returns the
    concrete addresses and the held sockets."""
    concrete: list[str] = []
    held: list[socket.socket] = []
    try:
        for addr in addrs:
            host, port = split_addr(addr)
            try:
                # TIME_WAIT connections of an earlier run do not make the port "in use".
                probe = _sockets(host, port, reuse_addr=True, share=False)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise SystemExit(f"{addr}: address already in use") from None
                raise SystemExit(f"{addr}: {exc.strerror or exc}") from None
            port = port or probe[0].getsockname()[1]
            for sock in probe:
                sock.close()
            if hold:
                try:
                    held += _sockets(host, port, reuse_addr=False, share=True)
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE:
                        raise
                    held += _sockets(host, port, reuse_addr=True, share=True)
            concrete.append(f"{addr.rpartition(':')[0]}:{port}")
    except BaseException:
        release(held)
        raise
    return concrete, held


def release(held: list[socket.socket]) -> None:
    for sock in held:
        with contextlib.suppress(OSError):
            sock.close()

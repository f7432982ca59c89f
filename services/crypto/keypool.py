"""RSA keys generated ahead of demand in a crypto worker, so that a request does not wait on key
generation (tens of milliseconds for 2048 bits, about a second for 4096) when a key is ready.

A size's pool starts filling only after a request first asks for that size (a worker that never
issues RSA keys never spends CPU on them), then is topped up in the background, one key at a time
in a thread: OpenSSL releases the GIL while it searches for primes, so the worker's event loop
keeps serving requests meanwhile. Keys live only in this process's memory, are never persisted,
and each leaves the pool exactly once (`take` pops it).
"""

from __future__ import annotations

import asyncio
import collections
import threading

from cryptography.hazmat.primitives.asymmetric import rsa

# Keys kept ready per size: enough for a short burst, little enough that an idle worker holds
# few (refilling costs the same CPU as generating on demand, just earlier; a 4096-bit key costs
# about a second, and SSH CAs ask for one once).
TARGETS = {2048: 4, 3072: 1, 4096: 1}


def generate_rsa(bits: int) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


class KeyPool:
    def __init__(self, targets: dict[int, int] | None = None) -> None:
        self.targets = dict(TARGETS if targets is None else targets)
        self._keys: dict[int, collections.deque[rsa.RSAPrivateKey]] = {
            bits: collections.deque() for bits in self.targets
        }
        self._wanted: set[int] = set()  # sizes asked for at least once
        self._lock = threading.Lock()  # take() runs on the loop, put() in the refill thread
        # Set by the one running refill task (an Event belongs to the loop that made it).
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def take(self, bits: int) -> rsa.RSAPrivateKey | None:
        """A ready key of `bits`, removed from the pool (None when none is ready), and a nudge to
        the refill task."""
        if bits not in self.targets:
            return None
        with self._lock:
            self._wanted.add(bits)
            keys = self._keys[bits]
            key = keys.popleft() if keys else None
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)
        return key

    def ready(self, bits: int) -> int:
        with self._lock:
            return len(self._keys.get(bits, ()))

    def _put(self, bits: int, key: rsa.RSAPrivateKey) -> None:
        with self._lock:
            self._keys[bits].append(key)

    def _short(self) -> int | None:
        """A wanted size below its target, if any."""
        with self._lock:
            for bits in sorted(self._wanted):
                if len(self._keys[bits]) < self.targets[bits]:
                    return bits
        return None

    async def run(self) -> None:
        """Top the wanted sizes up until cancelled. Only one refill task runs at a time (several
        in-process workers share the pool): a second call returns at once."""
        if self._wake is not None:
            return
        wake = self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        try:
            while True:
                bits = self._short()
                if bits is None:
                    wake.clear()
                    if self._short() is None:
                        await wake.wait()
                    continue
                self._put(bits, await asyncio.to_thread(generate_rsa, bits))
        finally:
            self._wake = self._loop = None


# The worker process's pool; its refill task is started by the crypto service.
POOL = KeyPool()

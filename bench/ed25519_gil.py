"""Whether `cryptography`'s Ed25519 signing releases the GIL, which decides whether a thread
pool could sign beside the secrets service's event loop.

    python bench/ed25519_gil.py [--seconds 2]

One thread signs in a loop and records each call's start and end; the main thread runs pure
Python and records when it runs. Python bytecode runs only with the GIL held, so a main-thread
step strictly inside a sign call means that call released the GIL. The answer does not depend
on the machine's load (a throughput comparison of one and two signing threads does). A few
calls overlap even when the GIL is held: the interpreter's forced switch (every 5 ms) can fall
between the timestamp and the call.
"""

from __future__ import annotations

import argparse
import bisect
import threading
import time

from cryptography.hazmat.primitives.asymmetric import ed25519


def probe(seconds: float) -> tuple[int, int, int]:
    """(sign calls, main-thread steps, sign calls the main thread ran Python inside)."""
    key = ed25519.Ed25519PrivateKey.generate()
    message = b"x" * 64
    now = time.perf_counter_ns
    spans: list[tuple[int, int]] = []
    steps: list[int] = []
    stop = threading.Event()

    def signer() -> None:
        while not stop.is_set():
            start = now()
            key.sign(message)
            spans.append((start, now()))

    thread = threading.Thread(target=signer)
    thread.start()
    end = now() + int(seconds * 1e9)
    while (t := now()) < end:
        steps.append(t)
    stop.set()
    thread.join()
    inside = sum(bisect.bisect_left(steps, e) > bisect.bisect_right(steps, s) for s, e in spans)
    return len(spans), len(steps), inside


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    calls, steps, inside = probe(ap.parse_args().seconds)
    share = inside / calls if calls else 0.0
    print(
        f"{calls} sign calls, {steps} main-thread steps; the main thread ran Python inside "
        f"{inside} calls ({share:.1%}): the GIL is {'released' if share > 0.5 else 'held'} "
        "while signing"
    )


if __name__ == "__main__":
    main()

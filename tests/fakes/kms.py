"""A KMS-compatible endpoint on loopback for the `cloudakms` managed keys: moto's server mode
in its own process. `python -m tests.fakes.kms` prints `listening on <port>` and exits when its
stdin closes."""

from __future__ import annotations

import sys

from moto.server import ThreadedMotoServer


def main() -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    print(f"listening on {port}", flush=True)
    sys.stdin.read()  # until the test that started us goes away
    server.stop()


if __name__ == "__main__":
    main()

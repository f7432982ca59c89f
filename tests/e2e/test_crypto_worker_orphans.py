"""The crypto service's extra worker processes end with it: after kill -9 of the service (its
workers cannot be told), the supervisor ends its process group, orphaned worker included, and
the restarted service starts its own, so a crash never leaves more workers serving than
`--crypto-processes` (two by default on 2 CPUs)."""

from __future__ import annotations

import os
import signal

import pytest

from services.supervisor import child_role, direct_children
from tests.procs import descendants, proc_state, start_dev, until

pytestmark = pytest.mark.e2e


def _alive(pid: int) -> bool:
    return proc_state(pid) not in ("", "Z")


def _crypto_processes(dev_pid: int) -> list[int]:
    return [p for p in descendants(dev_pid) if child_role(p) == "crypto" and _alive(p)]


def test_kill_9_of_the_crypto_service_leaves_no_orphan_worker() -> None:
    d = start_dev("--services", "crypto", "--crypto-processes", "2")
    try:
        (service,) = [p for p in direct_children(d.proc.pid) if child_role(p) == "crypto"]
        (worker,) = until(lambda: [p for p in direct_children(service) if _alive(p)], 30)
        os.kill(service, signal.SIGKILL)
        until(lambda: not _alive(worker), 20, "the orphaned crypto worker ending")

        def replaced() -> bool:
            now = _crypto_processes(d.proc.pid)
            return len(now) == 2 and service not in now and worker not in now

        until(replaced, 30, "a new crypto service with one worker of its own")
    finally:
        d.stop()

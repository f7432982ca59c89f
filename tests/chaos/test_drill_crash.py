"""`trellis drill crash` through the CLI, as an operator runs it: a real `trellis dev` under
load, each service and then nats-server killed with kill -9 in turn; the drill prints each
victim's time to recovery, and exits 0 only if every one came back and no acknowledged write
was lost."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from services.drill.crash import RECOVERY_LIMIT, VICTIMS
from tests.procs import ROOT

pytestmark = [pytest.mark.nats, pytest.mark.timeout(420)]


def test_crash_drill_prints_each_recovery(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            *(sys.executable, "-m", "services.cli", "drill", "crash"),
            *("--interval", "0.5", "--clients", "4", "--workdir", str(tmp_path)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    back = dict(re.findall(r"^note: (\w+): back in ([0-9.]+)s$", out.stdout, re.MULTILINE))
    assert set(back) == set(VICTIMS), out.stdout
    assert all(0 < float(s) < RECOVERY_LIMIT for s in back.values()), back
    # The load's own figures: acknowledged writes, all re-read, none lost.
    acked = re.search(r"acknowledged writes re-read: (\d+)", out.stdout)
    assert acked and int(acked.group(1)) > 0, out.stdout
    assert re.search(r"lost: 0\b", out.stdout), out.stdout
    # The supervisor of that `trellis dev` said what it did, in its log.
    said = (tmp_path / "dev" / "logs" / "supervisor.log").read_text()
    for victim in VICTIMS:
        assert re.search(rf"{victim}(#\d+)? restarted", said), said[-3000:]

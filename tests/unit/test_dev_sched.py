"""`trellis dev`'s process tree under SCHED_BATCH (services/dev_sched.py): the policy is set on
the caller and inherited by what it starts, and nothing else changes."""

from __future__ import annotations

import os
import subprocess
import sys

from services.dev_launch import ROOT

# A stand-in for `trellis dev`: ask for the policy, then start a child that reports its own.
PARENT = """
import os, subprocess, sys
from services.dev_sched import batch_scheduling
applied = batch_scheduling()
child = subprocess.run(
    [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
    capture_output=True, text=True, check=True,
)
print(applied, os.sched_getscheduler(0), child.stdout.strip())
"""


def test_the_policy_is_set_and_inherited_by_children() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PARENT],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["True", str(os.SCHED_BATCH), str(os.SCHED_BATCH)]

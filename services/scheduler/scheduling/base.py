"""What every scheduler type shares: its inputs, and stopping a job that is gone or stopped."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from services.scheduler.scheduling.plan import Plan
from services.scheduler.state.tables import Tables, client_terminal

NOT_NEEDED = "alloc not needed due to job update"


class BaseScheduler:
    def __init__(
        self,
        state: Tables,
        ev: dict[str, Any],
        *,
        now: int,
        new_id: Callable[[], str],
        rng: random.Random | None = None,
    ) -> None:
        self.s = state
        self.ev = ev
        self.now = now
        self.new_id = new_id
        self.rng = rng or random.Random()

    def inputs(self) -> tuple[Plan, dict[str, Any] | None, list[dict[str, Any]]]:
        """A fresh plan for this evaluation, the job (None once deregistered), its allocs."""
        ns, job_id = self.ev["Namespace"], self.ev["JobID"]
        plan = Plan(ns, job_id, self.ev["ID"])
        return plan, self.s.jobs.get(f"{ns}\x00{job_id}"), self.s.job_allocs(ns, job_id)

    @staticmethod
    def stop_running(plan: Plan, allocs: list[dict[str, Any]]) -> Plan:
        for a in allocs:
            if a["DesiredStatus"] == "run" and not client_terminal(a):
                plan.stop.append({"ID": a["ID"], "DesiredDescription": NOT_NEEDED})
        return plan

"""The system scheduler (system and sysbatch): one allocation of each group on every feasible
ready node; allocations on down nodes are lost, on nodes no longer fit they are stopped."""

from __future__ import annotations

import asyncio
from typing import Any

from services.scheduler.placement.placer import Placer, feasible_nodes, fit_on
from services.scheduler.scheduling.base import NOT_NEEDED, BaseScheduler
from services.scheduler.scheduling.generic import LOST, UPDATING, destructive
from services.scheduler.scheduling.plan import Plan, new_alloc
from services.scheduler.state.tables import Tables, client_terminal

CHUNK = 256


class SystemScheduler(BaseScheduler):
    def __init__(self, state: Tables, ev: dict[str, Any], **kw: Any) -> None:
        super().__init__(state, ev, **kw)
        self.sysbatch = ev["Type"] == "sysbatch"

    async def compute(self) -> Plan:
        plan, job, allocs = self.inputs()
        ns, job_id = plan.namespace, plan.job_id
        live = [a for a in allocs if a["DesiredStatus"] == "run" and not client_terminal(a)]
        if job is None or job.get("Stop"):
            return self.stop_running(plan, live)
        placer = Placer(
            list(self.s.nodes.values()), list(self.s.allocs.values()), job, rng=self.rng
        )
        steps = 0
        for tg in job.get("TaskGroups") or []:
            plan.queued.setdefault(tg["Name"], 0)
            eligible = {n["ID"]: n for n in feasible_nodes(placer, tg)}
            by_node: dict[str, list[dict[str, Any]]] = {}
            for a in allocs:
                if a["TaskGroup"] == tg["Name"]:
                    by_node.setdefault(a["NodeID"], []).append(a)
            for node_id, mine in by_node.items():
                node = self.s.nodes.get(node_id)
                for a in mine:
                    if a["DesiredStatus"] != "run" or client_terminal(a):
                        continue
                    if node is None or node.get("Status") == "down":
                        plan.stop.append(
                            {"ID": a["ID"], "DesiredDescription": LOST, "ClientStatus": "lost"}
                        )
                    elif node_id not in eligible and node.get("Status") == "ready":
                        plan.stop.append({"ID": a["ID"], "DesiredDescription": NOT_NEEDED})
                        placer.release(a)
            for node_id, node in eligible.items():
                steps += 1
                if steps % CHUNK == 0:
                    await asyncio.sleep(0)
                mine = by_node.get(node_id, [])
                running = [
                    a for a in mine if a["DesiredStatus"] == "run" and not client_terminal(a)
                ]
                if self.sysbatch and any(
                    a["ClientStatus"] == "complete" and a["JobVersion"] == job["Version"]
                    for a in mine
                ):
                    continue
                prev = None
                if running:
                    a = running[0]
                    if a["JobVersion"] == job["Version"]:
                        continue
                    old = self.s.job_version(ns, job_id, a["JobVersion"])
                    old_tg = next(
                        (g for g in (old or {}).get("TaskGroups") or [] if g["Name"] == tg["Name"]),
                        None,
                    )
                    if not destructive(old_tg, tg):
                        plan.update.append({"ID": a["ID"], "JobVersion": job["Version"]})
                        continue
                    plan.stop.append({"ID": a["ID"], "DesiredDescription": UPDATING})
                    placer.release(a)
                    prev = a
                ok, metrics = fit_on(placer, node, tg)
                if not ok:
                    plan.fail(tg["Name"], metrics)
                    plan.queued[tg["Name"]] += 1
                    continue
                alloc = new_alloc(
                    self.new_id(),
                    job,
                    tg,
                    f"{job_id}.{tg['Name']}[0]",
                    node,
                    self.ev["ID"],
                    metrics,
                )
                if prev is not None:
                    alloc["PreviousAllocation"] = prev["ID"]
                plan.place.append(alloc)
        return plan

"""Client nodes: register, heartbeat, and run allocations with task drivers (raw_exec, mock);
`run_client` is what `trellis run client` calls."""

from services.scheduler.client.agent import ClientAgent, NodeConfig, run_client

__all__ = ["ClientAgent", "NodeConfig", "run_client"]

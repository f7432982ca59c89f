"""Placement: pure functions over a state view. Feasibility (pools, datacenters, constraints,
drivers), resource fit, and ranking (bin packing, anti-affinity, affinity, spread)."""

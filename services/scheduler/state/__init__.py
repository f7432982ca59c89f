"""The scheduler's replicated state: in-memory tables (jobs, versions, submissions, evals,
allocs, deployments, nodes, ACLs) and the deterministic apply of log entries to them."""

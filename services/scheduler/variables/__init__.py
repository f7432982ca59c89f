"""Nomad Variables: encrypted key/value items at paths per namespace, with check-and-set,
locks, and ACL capabilities by path. Values are sealed under the barrier's data key."""

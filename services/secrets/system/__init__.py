"""The `sys/` backend: seal and init, mounts, policies, namespaces, leases, wrapping, help specs,
and the other system endpoints, one file per area."""

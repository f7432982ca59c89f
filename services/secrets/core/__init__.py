"""The secrets core: barrier and seal, namespaces, mounts and the router, tokens, policies,
leases, response wrapping, and the HTTP dispatcher that ties them together."""

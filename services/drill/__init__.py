"""`trellis drill <name>`: scripted scale, chaos, NATS failover and network drills that start
their own loopback cluster, drive load through the gateway, inject a fault and print a report."""

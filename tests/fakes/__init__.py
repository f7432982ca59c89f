"""Local emulators of third-party APIs the tests talk to (a cloud-database provider's admin
API, a key vault), each small and loopback-only."""

"""The gateway: aiohttp listeners (one per API) that forward each HTTP request over the bus to the
service that owns the API and write back its answer. Transport concerns only."""

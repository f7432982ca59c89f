"""The transit engine: encryption, signing and HMAC as a service with named, versioned keys
kept under the barrier (Vault's `transit`)."""

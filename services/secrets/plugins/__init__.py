"""External plugins: the catalog (registered binaries with their SHA-256), the runner that
verifies and starts them, and the backend proxy that forwards a mount's requests to them."""

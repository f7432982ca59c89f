"""Auth methods: token, userpass, approle; their login paths answer without a token."""

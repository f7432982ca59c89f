"""Auth methods: token, userpass, approle; their login paths answer without a token.
Credentials compare on their exact bytes, in constant time (exact.py)."""

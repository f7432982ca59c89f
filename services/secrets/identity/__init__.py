"""The identity store (`identity/`): entities, aliases, groups, and lookups over them."""

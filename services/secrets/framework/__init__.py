"""The declarative path framework of the secrets service: typed field structs, path templates,
operations and help; one dispatcher validates, and help and OpenAPI come from the same tables."""

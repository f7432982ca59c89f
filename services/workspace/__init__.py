"""The workspace management API (HCP Terraform's JSON:API v2) on the replicated log:
`service.WorkspaceService` runs it; state.py applies writes, handlers/ serve each resource."""

"""The cloud-database key engine (`dbcloud`): roles that mint programmatic API keys at the
provider's admin API, each key leased and deleted at the provider when its lease ends."""

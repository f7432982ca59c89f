"""Secrets engines: kv, cubbyhole, ssh, pki, dbcloud, each mountable anywhere."""

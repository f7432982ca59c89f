"""Key ceremonies (keyring rotation, OpenBao's authenticated root-key rotation without completing
it), batch tokens, and the small differences hvac found: wrap with an empty body, `generic`
mounts, PKI tidy with no body, sys/rekey/backup (issue 21)."""

from __future__ import annotations

from tests.conformance.steps import S, Step, setup

MAX_OPS = 3865470566


def steps(u: str) -> list[Step]:
    gen = f"c-gen-{u}"
    pki = f"c-pki-t-{u}"
    w = {"X-Vault-Wrap-TTL": "5m"}
    return [
        # keyring rotation
        S("keys.status", "GET", "sys/key-status"),
        S("keys.rotate", "PUT", "sys/rotate"),
        S("keys.rotate.keyring", "POST", "sys/rotate/keyring"),
        S("keys.status.after", "GET", "sys/key-status"),
        S("keys.rotate.notoken", "PUT", "sys/rotate", token=None),
        S("keys.config.read", "GET", "sys/rotate/config"),
        S("keys.config.write", "PUT", "sys/rotate/config", {"max_operations": 2000000}),
        S("keys.config.interval", "PUT", "sys/rotate/config", {"interval": "48h"}),
        S("keys.config.read.set", "GET", "sys/rotate/config"),
        S("keys.config.badops", "PUT", "sys/rotate/config", {"max_operations": 10}),
        S("keys.config.badinterval", "PUT", "sys/rotate/config", {"interval": "1h"}),
        S("keys.config.keyring", "GET", "sys/rotate/keyring/config"),
        setup(
            "keys.config.reset",
            "PUT",
            "sys/rotate/config",
            {"max_operations": MAX_OPS, "interval": 0, "enabled": True},
        ),
        # OpenBao's authenticated rekey (`bao operator rotate-keys`), short of completing it.
        S("rootrot.status", "GET", "sys/rotate/root/init"),
        S("rootrot.update.none", "PUT", "sys/rotate/root/update", {"key": "00" * 33, "nonce": "x"}),
        S("rootrot.verify.none", "GET", "sys/rotate/root/verify"),
        S("rootrot.init.zero", "PUT", "sys/rotate/root/init", {"secret_shares": 0}),
        S(
            "rootrot.init.lowt",
            "PUT",
            "sys/rotate/root/init",
            {"secret_shares": 2, "secret_threshold": 1},
        ),
        S(
            "rootrot.init.hight",
            "PUT",
            "sys/rotate/root/init",
            {"secret_shares": 2, "secret_threshold": 3},
        ),
        S(
            "rootrot.init",
            "PUT",
            "sys/rotate/root/init",
            {"secret_shares": 3, "secret_threshold": 2},
            save={"rnonce": ("data", "nonce")},
        ),
        S("rootrot.status.started", "GET", "sys/rotate/root/init"),
        S("rootrot.init.again", "PUT", "sys/rotate/root/init", {"secret_shares": 1}),
        S("rootrot.update.badnonce", "PUT", "sys/rotate/root/update", {"key": "00", "nonce": "x"}),
        S("rootrot.update.nokey", "PUT", "sys/rotate/root/update", {"nonce": "{rnonce}"}),
        S("rootrot.verify.unstarted", "GET", "sys/rotate/root/verify"),
        S("rootrot.backup", "GET", "sys/rotate/root/backup"),
        S("rootrot.backup.delete", "DELETE", "sys/rotate/root/backup"),
        S("rootrot.cancel", "DELETE", "sys/rotate/root/init"),
        S("rootrot.status.cancelled", "GET", "sys/rotate/root/init"),
        S("rekey.backup", "GET", "sys/rekey/backup"),
        # batch tokens
        S(
            "batch.create",
            "POST",
            "auth/token/create",
            {"type": "batch", "ttl": "5m", "policies": ["default"]},
            save={"bt": ("auth", "client_token")},
        ),
        S("batch.lookup-self", "GET", "auth/token/lookup-self", token="{bt}"),
        S("batch.lookup", "POST", "auth/token/lookup", {"token": "{bt}"}),
        S("batch.renew-self", "POST", "auth/token/renew-self", {}, token="{bt}"),
        S("batch.renew", "POST", "auth/token/renew", {"token": "{bt}"}),
        S("batch.revoke", "POST", "auth/token/revoke", {"token": "{bt}"}),
        S("batch.revoke-self", "POST", "auth/token/revoke-self", {}, token="{bt}"),
        S("batch.create.child", "POST", "auth/token/create", {}, token="{bt}"),
        S("batch.cubbyhole", "POST", "cubbyhole/c-b", {"a": "b"}, token="{bt}"),
        S("batch.revoke-orphan", "POST", "auth/token/revoke-orphan", {"token": "{bt}"}),
        S(
            "batch.create.orphan",
            "POST",
            "auth/token/create-orphan",
            {"type": "batch", "policies": ["default"]},
        ),
        S("batch.create.root", "POST", "auth/token/create", {"type": "batch"}),
        S(
            "batch.create.period",
            "POST",
            "auth/token/create",
            {"type": "batch", "policies": ["default"], "period": "1h"},
        ),
        S(
            "batch.create.uses",
            "POST",
            "auth/token/create",
            {"type": "batch", "policies": ["default"], "num_uses": 3},
        ),
        S("batch.denied", "GET", "sys/mounts", token="{bt}"),
        # hvac's other differences
        S("wrap.wrap.empty", "POST", "sys/wrapping/wrap", {}, headers=w),
        S("wrap.wrap.nobody", "POST", "sys/wrapping/wrap", headers=w),
        S("generic.mount", "POST", f"sys/mounts/{gen}", {"type": "generic"}),
        S("generic.write", "POST", f"{gen}/foo", {"a": "b"}),
        S("generic.read", "GET", f"{gen}/foo"),
        S("generic.list", "LIST", f"{gen}"),
        setup("generic.unmount", "DELETE", f"sys/mounts/{gen}"),
        setup("pkit.mount", "POST", f"sys/mounts/{pki}", {"type": "pki"}),
        S("pkit.tidy.nobody", "POST", f"{pki}/tidy"),
        S("pkit.tidy.empty", "POST", f"{pki}/tidy", {}),
        setup("pkit.unmount", "DELETE", f"sys/mounts/{pki}"),
    ]

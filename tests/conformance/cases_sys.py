"""sys: health, seal status, leader, mounts, auth, policies, capabilities, tools, internal/ui."""

from __future__ import annotations

from tests.conformance.steps import Raw, S, Step, setup


def steps(u: str) -> list[Step]:
    kv = f"c-kv-{u}"
    pol = f"c-pol-{u}"
    hcl = f'path "{kv}/*" {{ capabilities = ["read", "list"] }}'
    return [
        # seal, health, leader: unauthenticated and raw (not the envelope)
        S("sys.health", "GET", "sys/health", token=None),
        S("sys.health.standbyok", "GET", "sys/health?standbyok=true", token=None),
        S("sys.seal-status", "GET", "sys/seal-status", token=None),
        S("sys.init.read", "GET", "sys/init", token=None),
        S("sys.init.again", "POST", "sys/init", {"secret_shares": 1, "secret_threshold": 1}),
        S("sys.leader", "GET", "sys/leader", token=None),
        S("sys.unseal.nokey", "POST", "sys/unseal", {}, token=None),
        S("sys.seal.notoken", "POST", "sys/seal", token=None),
        # mounts
        S("sys.mounts.list", "GET", "sys/mounts", pick=("data", "secret/")),
        S("sys.mounts.list.cubbyhole", "GET", "sys/mounts", pick=("data", "cubbyhole/")),
        S("sys.mounts.notoken", "GET", "sys/mounts", token=None),
        S("sys.mounts.badtoken", "GET", "sys/mounts", token="not-a-token"),
        S("sys.mounts.enable", "POST", f"sys/mounts/{kv}", {"type": "kv", "description": "x"}),
        S("sys.mounts.enable.again", "POST", f"sys/mounts/{kv}", {"type": "kv"}),
        S("sys.mounts.enable.badtype", "POST", f"sys/mounts/c-bad-{u}", {"type": "nope"}),
        S("sys.mounts.enable.notype", "POST", f"sys/mounts/c-bad-{u}", {}),
        S("sys.mounts.enable.malformed", "POST", f"sys/mounts/c-bad-{u}", Raw("{not json")),
        S(
            "sys.mounts.enable.badtypes",
            "POST",
            f"sys/mounts/c-bad-{u}",
            {"type": "kv", "config": {"default_lease_ttl": "forever"}},
        ),
        S("sys.mounts.read", "GET", f"sys/mounts/{kv}"),
        S("sys.mounts.tune.read", "GET", f"sys/mounts/{kv}/tune"),
        S(
            "sys.mounts.tune",
            "POST",
            f"sys/mounts/{kv}/tune",
            {"default_lease_ttl": "1h", "max_lease_ttl": "2h"},
        ),
        S("sys.mounts.tune.over", "POST", f"sys/mounts/{kv}/tune", {"default_lease_ttl": "3h"}),
        S("sys.mounts.tune.read2", "GET", f"sys/mounts/{kv}/tune"),
        S("sys.mounts.tune.missing", "GET", f"sys/mounts/c-none-{u}/tune"),
        S("sys.mounts.wrongmethod", "PATCH", "sys/mounts", {}),
        S(
            "sys.remount",
            "POST",
            "sys/remount",
            {"from": kv, "to": f"{kv}-m"},
            save={"mig": ("data", "migration_id")},
        ),
        S("sys.remount.status", "GET", "sys/remount/status/{mig}"),
        S(
            "sys.remount.status.unknown",
            "GET",
            "sys/remount/status/8f1d2c71-0000-0000-0000-000000000000",
        ),
        S(
            "sys.remount.missing",
            "POST",
            "sys/remount",
            {"from": f"c-none-{u}", "to": f"c-none2-{u}"},
        ),
        S("sys.mounts.disable", "DELETE", f"sys/mounts/{kv}-m"),
        S("sys.mounts.disable.missing", "DELETE", f"sys/mounts/c-none-{u}"),
        S(
            "sys.mounts.enable.kv2",
            "POST",
            f"sys/mounts/{kv}",
            {"type": "kv", "options": {"version": "2"}},
        ),
        # auth methods
        S("sys.auth.list", "GET", "sys/auth", pick=("data", "token/")),
        S("sys.auth.enable", "POST", f"sys/auth/c-up-{u}", {"type": "userpass"}),
        S("sys.auth.enable.again", "POST", f"sys/auth/c-up-{u}", {"type": "userpass"}),
        S("sys.auth.enable.badtype", "POST", f"sys/auth/c-bad-{u}", {"type": "nope"}),
        S("sys.auth.read", "GET", f"sys/auth/c-up-{u}"),
        S("sys.auth.tune.read", "GET", f"sys/auth/c-up-{u}/tune"),
        S("sys.auth.tune", "POST", f"sys/auth/c-up-{u}/tune", {"default_lease_ttl": "30m"}),
        S("sys.auth.disable", "DELETE", f"sys/auth/c-up-{u}"),
        # policies
        S("sys.policy.write", "PUT", f"sys/policies/acl/{pol}", {"policy": hcl}),
        S("sys.policy.read", "GET", f"sys/policies/acl/{pol}"),
        S("sys.policy.list", "LIST", "sys/policies/acl"),
        S("sys.policy.legacy.read", "GET", f"sys/policy/{pol}"),
        S("sys.policy.legacy.list", "GET", "sys/policy"),
        S("sys.policy.write.bad", "PUT", f"sys/policies/acl/c-badpol-{u}", {"policy": "path {"}),
        S("sys.policy.write.empty", "PUT", f"sys/policies/acl/c-badpol-{u}", {}),
        S("sys.policy.read.missing", "GET", f"sys/policies/acl/c-none-{u}"),
        S("sys.policy.delete.root", "DELETE", "sys/policies/acl/root"),
        S("sys.policy.write.root", "PUT", "sys/policies/acl/root", {"policy": hcl}),
        S("sys.policy.read.default", "GET", "sys/policies/acl/default"),
        # capabilities
        setup(
            "sys.caps.token",
            "POST",
            "auth/token/create",
            {"policies": [pol], "ttl": "1h"},
            save={"ctok": ("auth", "client_token"), "cacc": ("auth", "accessor")},
        ),
        S(
            "sys.caps",
            "POST",
            "sys/capabilities",
            {"token": "{ctok}", "paths": [f"{kv}/x", "sys/mounts"]},
        ),
        S("sys.caps.one", "POST", "sys/capabilities", {"token": "{ctok}", "path": f"{kv}/x"}),
        S("sys.caps.self", "POST", "sys/capabilities-self", {"paths": [f"{kv}/x"]}, token="{ctok}"),
        S(
            "sys.caps.accessor",
            "POST",
            "sys/capabilities-accessor",
            {"accessor": "{cacc}", "paths": [f"{kv}/x"]},
        ),
        S("sys.caps.badtoken", "POST", "sys/capabilities", {"token": "nope", "paths": ["a"]}),
        S("sys.caps.denied", "GET", "sys/mounts", token="{ctok}"),
        S(
            "sys.caps.denied.write",
            "POST",
            f"sys/mounts/c-deny-{u}",
            {"type": "kv"},
            token="{ctok}",
        ),
        S("sys.policy.delete", "DELETE", f"sys/policies/acl/{pol}"),
        # tools
        S("sys.tools.random", "POST", "sys/tools/random", {}),
        S("sys.tools.random.url", "POST", "sys/tools/random/16", {"format": "hex"}),
        S("sys.tools.random.get", "GET", "sys/tools/random/16"),
        S("sys.tools.random.badformat", "POST", "sys/tools/random", {"format": "base32"}),
        S("sys.tools.random.zero", "POST", "sys/tools/random", {"bytes": 0}),
        S("sys.tools.random.badtype", "POST", "sys/tools/random", {"bytes": "many"}),
        S("sys.tools.hash", "POST", "sys/tools/hash", {"input": "aGVsbG8="}),
        S(
            "sys.tools.hash.url",
            "POST",
            "sys/tools/hash/sha2-512",
            {"input": "aGVsbG8=", "format": "base64"},
        ),
        S("sys.tools.hash.badalg", "POST", "sys/tools/hash/md5", {"input": "aGVsbG8="}),
        # internal/ui
        S("sys.ui.mounts", "GET", "sys/internal/ui/mounts", pick=("data",)),
        S("sys.ui.mounts.notoken", "GET", "sys/internal/ui/mounts", token=None, pick=("data",)),
        S("sys.ui.mount", "GET", f"sys/internal/ui/mounts/{kv}/app"),
        S("sys.ui.mount.secret", "GET", "sys/internal/ui/mounts/secret/a/b"),
        S("sys.ui.mount.none", "GET", f"sys/internal/ui/mounts/c-none-{u}/x"),
        S("sys.ui.mount.notoken", "GET", f"sys/internal/ui/mounts/{kv}/app", token=None),
        S("sys.ui.mount.denied", "GET", "sys/internal/ui/mounts/secret/x", token="{ctok}"),
        S("sys.ui.mount.allowed", "GET", f"sys/internal/ui/mounts/{kv}/x", token="{ctok}"),
        # unknown paths and methods
        S("sys.unknown", "GET", f"sys/no-such-path-{u}"),
        S("sys.unknown.mount", "GET", f"c-no-mount-{u}/x"),
        # path help (`bao path-help`): a served path, a mount's root, an unknown path
        S("sys.help", "GET", "sys/mounts?help=1"),
        S("sys.help.root", "GET", "sys/?help=1"),
        S("sys.help.unknown", "GET", f"sys/no-such-path-{u}?help=1"),
        S("sys.help.unknown.token", "GET", f"auth/token/no-such-path-{u}?help=1"),
        S("sys.help.notoken", "GET", "sys/mounts?help=1", token=None),
        # audit devices: OpenBao manages them in its config only, Trellis has none
        S("sys.audit.list", "GET", "sys/audit"),
        S("sys.audit.enable", "POST", f"sys/audit/c-{u}", {"type": "file", "options": {}}),
        S("sys.audit.disable", "DELETE", f"sys/audit/c-{u}"),
        S("sys.audit.hash", "POST", f"sys/audit-hash/c-{u}", {"input": "x"}),
        setup("sys.kv.cleanup", "DELETE", f"sys/mounts/{kv}"),
    ]

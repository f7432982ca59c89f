"""Wrapping, leases, namespaces and password policies."""

from __future__ import annotations

from tests.conformance.steps import S, Step, setup


def steps(u: str) -> list[Step]:
    ns = f"cns{u}"
    pp = f"c-pp-{u}"
    pp_hcl = (
        'length = 20\nrule "charset" {\n  charset = "abcdefghij0123456789"\n  min-chars = 2\n}\n'
    )
    w = {"X-Vault-Wrap-TTL": "5m"}
    return [
        # wrapping
        S(
            "wrap.wrap",
            "POST",
            "sys/wrapping/wrap",
            {"a": "b"},
            headers=w,
            save={"wt": ("wrap_info", "token")},
        ),
        S("wrap.wrap.nottl", "POST", "sys/wrapping/wrap", {"a": "b"}),
        S("wrap.lookup", "POST", "sys/wrapping/lookup", {"token": "{wt}"}, token=None),
        S(
            "wrap.rewrap",
            "POST",
            "sys/wrapping/rewrap",
            {"token": "{wt}"},
            save={"wt2": ("wrap_info", "token")},
        ),
        S("wrap.unwrap.old", "POST", "sys/wrapping/unwrap", {"token": "{wt}"}),
        S("wrap.unwrap", "POST", "sys/wrapping/unwrap", {"token": "{wt2}"}),
        S("wrap.unwrap.again", "POST", "sys/wrapping/unwrap", {"token": "{wt2}"}),
        S("wrap.unwrap.bogus", "POST", "sys/wrapping/unwrap", {"token": "hvs.bogus"}),
        S("wrap.lookup.bogus", "POST", "sys/wrapping/lookup", {"token": "hvs.bogus"}),
        S("wrap.cubby", "POST", "cubbyhole/c-w", {"x": "y"}),
        S("wrap.read", "GET", "cubbyhole/c-w", headers=w, save={"wt3": ("wrap_info", "token")}),
        S("wrap.unwrap.self", "POST", "sys/wrapping/unwrap", {}, token="{wt3}"),
        S("wrap.unwrap.self.again", "POST", "sys/wrapping/unwrap", {}, token="{wt3}"),
        S(
            "wrap.token.create",
            "POST",
            "auth/token/create",
            {"ttl": "5m"},
            headers=w,
            save={"wt4": ("wrap_info", "token")},
        ),
        S("wrap.unwrap.auth", "POST", "sys/wrapping/unwrap", {"token": "{wt4}"}),
        S("wrap.badttl", "GET", "cubbyhole/c-w", headers={"X-Vault-Wrap-TTL": "soon"}),
        setup("wrap.cubby.clean", "DELETE", "cubbyhole/c-w"),
        S(
            "wrap.wrap.nested",
            "POST",
            "sys/wrapping/wrap",
            {"a": {"b": [1, 2]}},
            headers={"X-Vault-Wrap-TTL": "90"},
            save={"wt5": ("wrap_info", "token")},
        ),
        S("wrap.lookup.nottoken", "POST", "sys/wrapping/lookup", {}, token=None),
        S("wrap.unwrap.nested", "POST", "sys/wrapping/unwrap", {"token": "{wt5}"}),
        S(
            "wrap.login",
            "POST",
            "auth/token/create",
            {"ttl": "5m"},
            headers={"X-Vault-Wrap-TTL": "2m"},
            save={"wt6": ("wrap_info", "token")},
        ),
        S("wrap.lookup.login", "POST", "sys/wrapping/lookup", {"token": "{wt6}"}),
        # leases, through a PKI role with generate_lease
        setup("lease.pki", "POST", f"sys/mounts/c-lp-{u}", {"type": "pki"}),
        setup(
            "lease.ca",
            "POST",
            f"c-lp-{u}/root/generate/internal",
            {"common_name": "leases.example", "ttl": "24h", "key_type": "ec"},
        ),
        setup(
            "lease.role",
            "POST",
            f"c-lp-{u}/roles/r",
            {"allow_any_name": True, "generate_lease": True, "max_ttl": "2h", "key_type": "ec"},
        ),
        S(
            "lease.issue",
            "POST",
            f"c-lp-{u}/issue/r",
            {"common_name": "a.leases.example", "ttl": "1h"},
            save={"lid": ("lease_id",)},
        ),
        S("lease.lookup", "PUT", "sys/leases/lookup", {"lease_id": "{lid}"}),
        S(
            "lease.lookup.unknown",
            "PUT",
            "sys/leases/lookup",
            {"lease_id": f"c-lp-{u}/issue/r/nope"},
        ),
        S("lease.lookup.empty", "PUT", "sys/leases/lookup", {}),
        S("lease.list", "LIST", f"sys/leases/lookup/c-lp-{u}/issue/r/"),
        S("lease.list.root", "LIST", "sys/leases/lookup/", pick=("data",)),
        S("lease.list.missing", "LIST", f"sys/leases/lookup/c-none-{u}/"),
        S("lease.renew", "PUT", "sys/leases/renew", {"lease_id": "{lid}"}),
        S("lease.renew.unknown", "PUT", "sys/leases/renew", {"lease_id": f"c-lp-{u}/issue/r/nope"}),
        S("lease.revoke", "PUT", "sys/leases/revoke", {"lease_id": "{lid}"}),
        S("lease.lookup.revoked", "PUT", "sys/leases/lookup", {"lease_id": "{lid}"}),
        S("lease.revoke-prefix", "PUT", f"sys/leases/revoke-prefix/c-lp-{u}/issue", {}),
        S("lease.revoke-force.denied", "PUT", f"sys/leases/revoke-force/c-lp-{u}", {}, token=None),
        setup("lease.pki.off", "DELETE", f"sys/mounts/c-lp-{u}"),
        # namespaces
        S("ns.create", "POST", f"sys/namespaces/{ns}", {}),
        S("ns.create.again", "POST", f"sys/namespaces/{ns}", {}),
        S("ns.create.reserved", "POST", "sys/namespaces/sys", {}),
        S("ns.read", "GET", f"sys/namespaces/{ns}"),
        S("ns.list", "LIST", "sys/namespaces", pick=("data", "key_info", f"{ns}/")),
        S("ns.read.missing", "GET", f"sys/namespaces/none{u}"),
        S("ns.mount", "POST", "sys/mounts/kvn", {"type": "kv"}, headers={"X-Vault-Namespace": ns}),
        S("ns.write", "POST", "kvn/a", {"x": "y"}, headers={"X-Vault-Namespace": ns}),
        S("ns.read.header", "GET", "kvn/a", headers={"X-Vault-Namespace": ns}),
        S("ns.read.path", "GET", f"{ns}/kvn/a"),
        S("ns.read.root", "GET", "kvn/a"),
        S("ns.header.missing", "GET", "kvn/a", headers={"X-Vault-Namespace": f"none{u}"}),
        S("ns.ui.mount", "GET", "sys/internal/ui/mounts/kvn/a", headers={"X-Vault-Namespace": ns}),
        S("ns.child", "POST", "sys/namespaces/inner", {}, headers={"X-Vault-Namespace": ns}),
        S(
            "ns.child.list",
            "LIST",
            "sys/namespaces",
            headers={"X-Vault-Namespace": ns},
            pick=("data", "keys"),
        ),
        setup(
            "ns.child.delete", "DELETE", "sys/namespaces/inner", headers={"X-Vault-Namespace": ns}
        ),
        setup("ns.unmount", "DELETE", "sys/mounts/kvn", headers={"X-Vault-Namespace": ns}),
        S("ns.delete", "DELETE", f"sys/namespaces/{ns}"),
        S("ns.delete.missing", "DELETE", f"sys/namespaces/none{u}"),
        # password policies
        S("pp.write", "PUT", f"sys/policies/password/{pp}", {"policy": pp_hcl}),
        S("pp.read", "GET", f"sys/policies/password/{pp}"),
        S("pp.list", "LIST", "sys/policies/password"),
        S("pp.generate", "GET", f"sys/policies/password/{pp}/generate"),
        S("pp.write.bad", "PUT", f"sys/policies/password/{pp}-bad", {"policy": "length = 2"}),
        S(
            "pp.write.impossible",
            "PUT",
            f"sys/policies/password/{pp}-bad",
            {"policy": 'length = 4\nrule "charset" {\n  charset = "a"\n  min-chars = 5\n}\n'},
        ),
        S("pp.write.empty", "PUT", f"sys/policies/password/{pp}-bad", {}),
        S("pp.read.missing", "GET", f"sys/policies/password/{pp}-none"),
        S("pp.generate.missing", "GET", f"sys/policies/password/{pp}-none/generate"),
        S("pp.delete", "DELETE", f"sys/policies/password/{pp}"),
        S("pp.read.deleted", "GET", f"sys/policies/password/{pp}"),
        S(
            "pp.write.b64",
            "PUT",
            f"sys/policies/password/{pp}-b64",
            {"policy": "bGVuZ3RoID0gMTIKcnVsZSAiY2hhcnNldCIgewogIGNoYXJzZXQgPSAiYWJjIgp9Cg=="},
        ),
        S("pp.generate.b64", "GET", f"sys/policies/password/{pp}-b64/generate"),
        setup("pp.delete.b64", "DELETE", f"sys/policies/password/{pp}-b64"),
    ]

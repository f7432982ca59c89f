"""Offline checks of the Chaos Mesh experiments (k8s/chaos) and KEDA ScaledObjects (k8s/keda):
kubernetes-validate has no schemas for CRDs, so each kind is checked against a minimal schema
written from the CRD (required fields, enums, types, no unknown top-level spec fields), and
every selector is checked against the labels the base's workloads really carry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
SERVICES = ("gateway", "secrets", "crypto", "workspace", "scheduler", "replication")

_META = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}},
}
_SELECTOR = {
    "type": "object",
    "required": ["labelSelectors"],
    "additionalProperties": False,
    "properties": {
        "namespaces": {"type": "array", "items": {"type": "string"}},
        "labelSelectors": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {"type": "string"},
        },
    },
}
_MODE = {"enum": ["one", "all", "fixed", "fixed-percent", "random-max-percent"]}
_POD_CHAOS_SPEC = {
    "type": "object",
    "required": ["action", "mode", "selector"],
    "additionalProperties": False,
    "properties": {
        "action": {"enum": ["pod-kill", "pod-failure", "container-kill"]},
        "mode": _MODE,
        "value": {"type": "string"},
        "gracePeriod": {"type": "integer", "minimum": 0},
        "duration": {"type": "string", "pattern": r"^\d+(ms|s|m|h)$"},
        "selector": _SELECTOR,
    },
}
_NETWORK_CHAOS_SPEC = {
    "type": "object",
    "required": ["action", "mode", "selector"],
    "additionalProperties": False,
    "properties": {
        "action": {"enum": ["netem", "delay", "loss", "duplicate", "corrupt", "partition"]},
        "mode": _MODE,
        "direction": {"enum": ["to", "from", "both"]},
        "duration": {"type": "string", "pattern": r"^\d+(ms|s|m|h)$"},
        "selector": _SELECTOR,
        "target": {
            "type": "object",
            "required": ["mode", "selector"],
            "additionalProperties": False,
            "properties": {"mode": _MODE, "selector": _SELECTOR},
        },
    },
}
SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("chaos-mesh.org/v1alpha1", "PodChaos"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"metadata": _META, "spec": _POD_CHAOS_SPEC},
    },
    ("chaos-mesh.org/v1alpha1", "NetworkChaos"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"metadata": _META, "spec": _NETWORK_CHAOS_SPEC},
    },
    ("chaos-mesh.org/v1alpha1", "Schedule"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["schedule", "type", "podChaos"],
                "additionalProperties": False,
                "properties": {
                    "schedule": {"type": "string", "minLength": 1},
                    "concurrencyPolicy": {"enum": ["Forbid", "Allow"]},
                    "historyLimit": {"type": "integer", "minimum": 1},
                    "type": {"const": "PodChaos"},
                    "podChaos": _POD_CHAOS_SPEC,
                },
            },
        },
    },
    ("keda.sh/v1alpha1", "ScaledObject"): {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "required": ["scaleTargetRef", "triggers"],
                "additionalProperties": False,
                "properties": {
                    "scaleTargetRef": {
                        "type": "object",
                        "required": ["name"],
                        "additionalProperties": False,
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "name": {"type": "string"},
                        },
                    },
                    "minReplicaCount": {"type": "integer", "minimum": 0},
                    "maxReplicaCount": {"type": "integer", "minimum": 1},
                    "pollingInterval": {"type": "integer", "minimum": 1},
                    "cooldownPeriod": {"type": "integer", "minimum": 0},
                    "triggers": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["type", "metadata"],
                            "properties": {
                                "type": {"enum": ["prometheus", "nats-jetstream", "cpu"]},
                                "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                                "metadata": {
                                    "type": "object",
                                    "additionalProperties": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def load_dir(name: str) -> list[dict[str, Any]]:
    root = K8S / name
    kust = yaml.safe_load((root / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    on_disk = {p.name for p in root.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk, f"k8s/{name}/kustomization.yaml lists {listed}, disk has {on_disk}"
    docs = []
    for entry in kust["resources"]:
        docs.extend(d for d in yaml.safe_load_all((root / entry).read_text()) if d)
    return docs


def workload_labels() -> dict[str, dict[str, str]]:
    """Pod template labels of every Deployment/StatefulSet in the base, by name."""
    out = {}
    for path in [*(K8S / "trellis").glob("*.yaml"), *(K8S / "nats").glob("*.yaml")]:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("Deployment", "StatefulSet"):
                out[doc["metadata"]["name"]] = doc["spec"]["template"]["metadata"]["labels"]
    return out


def matches(selector: dict[str, Any]) -> list[str]:
    want = selector["labelSelectors"]
    return [
        name
        for name, labels in workload_labels().items()
        if all(labels.get(k) == v for k, v in want.items())
    ]


CHAOS = load_dir("chaos")
KEDA = load_dir("keda")


@pytest.mark.parametrize(
    "doc", [*CHAOS, *KEDA], ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_custom_resources_match_their_schema(doc: dict[str, Any]) -> None:
    schema = SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    assert schema, f"no schema for {doc['apiVersion']} {doc['kind']}"
    jsonschema.validate(doc, schema)


def test_schema_check_catches_a_misspelt_field() -> None:
    """Guards the test above against passing vacuously."""
    doc = yaml.safe_load((K8S / "chaos" / "networkchaos-nats-partition.yaml").read_text())
    doc["spec"]["directon"] = doc["spec"].pop("direction")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMAS[("chaos-mesh.org/v1alpha1", "NetworkChaos")])


def test_every_service_has_a_pod_kill_that_selects_exactly_it() -> None:
    killed = {}
    for doc in CHAOS:
        spec = doc["spec"]["podChaos"] if doc["kind"] == "Schedule" else doc["spec"]
        if spec["action"] == "pod-kill":
            assert spec["mode"] == "one", "kill one pod at a time: the PDBs allow one"
            (target,) = matches(spec["selector"])
            killed[target] = doc["metadata"]["name"]
    assert {f"trellis-{s}" for s in SERVICES} <= set(killed), killed
    assert "nats" in killed


def test_nats_partition_cuts_one_pod_from_its_peers() -> None:
    (doc,) = [d for d in CHAOS if d["kind"] == "NetworkChaos"]
    spec = doc["spec"]
    assert spec["action"] == "partition" and spec["mode"] == "one"
    assert spec["direction"] == "both" and spec["duration"]
    assert matches(spec["selector"]) == ["nats"] == matches(spec["target"]["selector"])


def test_keda_scales_the_crypto_and_scheduler_queue_groups() -> None:
    targets = {d["spec"]["scaleTargetRef"]["name"]: d for d in KEDA}
    assert set(targets) == {"trellis-crypto", "trellis-scheduler"}
    deployments = workload_labels()
    for name, doc in targets.items():
        assert name in deployments
        spec = doc["spec"]
        # Never below 2: the PodDisruptionBudgets (maxUnavailable 1) need a spare.
        assert 2 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
        (trigger,) = spec["triggers"]
        meta = trigger["metadata"]
        assert "trellis_bus_handle_seconds" in meta["query"]
        assert float(meta["threshold"]) > float(meta["activationThreshold"]) > 0


def test_the_base_stays_free_of_custom_resources() -> None:
    """The base must validate strictly without CRDs, so chaos and KEDA stay separate dirs."""
    base = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert not any(r.startswith(("chaos", "keda")) for r in base["resources"])

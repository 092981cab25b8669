"""The Dockerfile and deploy/k8s, checked offline: hadolint on the Dockerfile, yamllint on
the manifests, every overlay rendered by kustomize (kubectl) and every object validated
against Kubernetes 1.30's schemas (unknown kinds or fields fail), and our own checks that
the manifests fit the services: each container's command line and environment parse with
the service's real argument parser, every variable set is one something reads, probes
point at the port the service listens on, the data volume is mounted at the data dir."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from seglog.security.certs import GATEWAY_IDENTITY, CertificateAuthority, node_id_of
from services import command_line
from services.gateway.__main__ import parse_args as gateway_args
from services.gateway.settings import GatewayConfig
from services.storage_node.__main__ import parse_args as node_args
from services.storage_node.settings import NodeConfig

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
OVERLAYS = sorted(p.name for p in (ROOT / "deploy/k8s/overlays").iterdir())
K8S_VERSION = "1.30"
# Read by the OpenTelemetry SDK and its OTLP exporter, not by a flag of ours.
READ_BY_OPENTELEMETRY = {
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_RESOURCE_ATTRIBUTES",
}
READ_OTHERWISE = {command_line.CONFIG_FILE_ENV, "SEGLOG_LOG_LEVEL", *READ_BY_OPENTELEMETRY}
# What the downward API and Secrets give a pod, as samples.
FIELD_SAMPLES = {
    "metadata.name": "seglog-node-2",
    "metadata.namespace": "seglog",
    "spec.nodeName": "host-1",
    "status.podIP": "10.0.0.7",
    "metadata.labels['apps.kubernetes.io/pod-index']": "2",
}
SECRET_SAMPLE = "sample-cluster-secret-0123456789"
SERVICES = {
    "seglog-gateway": (gateway_args, GatewayConfig),
    "seglog-storage-node": (node_args, NodeConfig),
}


def _render(overlay: str) -> list[dict]:
    out = subprocess.run(
        [str(BIN / "kubectl"), "kustomize", str(ROOT / "deploy/k8s/overlays" / overlay)],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def test_the_dockerfile_passes_hadolint_without_a_warning():
    done = subprocess.run(
        [str(BIN / "hadolint"), str(ROOT / "Dockerfile")], capture_output=True, timeout=60
    )
    assert done.returncode == 0 and not done.stdout, done.stdout.decode()


def test_the_manifests_pass_yamllint():
    done = subprocess.run(
        [
            str(BIN / "yamllint"),
            "-c",
            str(ROOT / "deploy/.yamllint.yaml"),
            "--strict",
            str(ROOT / "deploy"),
        ],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout.decode()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_of_an_overlay_is_valid_kubernetes(overlay):
    objects = _render(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"StatefulSet", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget"} <= kinds
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Service", "seglog-otel-collector") in names  # telemetry has somewhere to go


def test_strict_validation_refuses_an_unknown_field():
    """The check above can fail: a misspelt field is caught."""
    (service,) = [o for o in _render("dev") if o["kind"] == "Service"][:1]
    service["spec"]["portz"] = service["spec"].pop("ports")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, K8S_VERSION, strict=True)


def _workloads(objects):
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet"):
            yield obj


def _env(container, config_dir: Path, mounts: dict[str, Path]) -> dict[str, str]:
    """The container's environment as the kubelet would give it, with $(VAR) expanded and
    the ConfigMap's mount path moved to `config_dir`."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), item["value"])
        elif "fieldRef" in item["valueFrom"]:
            value = FIELD_SAMPLES[item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            value = SECRET_SAMPLE
        # The deepest mount holding the path (/etc/seglog/tls inside /etc/seglog).
        for mount_path, local in sorted(mounts.items(), key=lambda item: -len(item[0])):
            if value.startswith(mount_path + "/"):
                value = str(local / value[len(mount_path) + 1 :])
                break
        env[item["name"]] = value
    return env


_CA = CertificateAuthority.create()


def _certificate_identity(volume) -> str:
    if "csi" in volume:
        attributes = volume["csi"]["volumeAttributes"]
        # No common name: a certificate for etcd's JSON gateway, which refuses one.
        name = attributes.get("csi.cert-manager.io/common-name", "")
        return name.replace("${POD_NAME}", FIELD_SAMPLES["metadata.name"])
    return GATEWAY_IDENTITY if "gateway" in volume["secret"]["secretName"] else "unknown"


def _subject_common_names(cert_path: Path) -> list[str]:
    certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    return [a.value for a in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def _write_certificate(directory: Path, identity: str) -> None:
    """tls.crt, tls.key and ca.crt, cert-manager's layout."""
    directory.mkdir(parents=True)
    issued = _CA.issue(identity)
    (directory / "tls.crt").write_bytes(issued.cert_pem)
    (directory / "tls.key").write_bytes(issued.key_pem)
    (directory / "ca.crt").write_bytes(_CA.cert_pem)


def _parse(service, args, env, monkeypatch):
    """The service's config from `args` with exactly `env` set, and the variables its
    flags read."""
    parse_args, config_class = SERVICES[service]
    with monkeypatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        return parse_args(args), command_line.environment_variables(config_class)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_containers_fit_the_services_they_run(overlay, tmp_path, monkeypatch):
    objects = _render(overlay)
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    checked = set()
    for workload in _workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        for container in pod["containers"]:
            command = container.get("command", [None])[0]
            if command not in SERVICES:
                continue
            # ConfigMap volumes: their files, written where the test can read them.
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            mounts = {}
            identities = {}
            for mount in container.get("volumeMounts", []):
                volume = volumes.get(mount["name"], {})
                local = tmp_path / workload["metadata"]["name"] / mount["name"]
                if "configMap" in volume:
                    local.mkdir(parents=True)
                    for name, text in config_maps[volume["configMap"]["name"]]["data"].items():
                        (local / name).write_text(text)
                    mounts[mount["mountPath"]] = local
                elif "secret" in volume or "csi" in volume:
                    # A certificate as the Secret (the gateway's) or cert-manager's CSI driver
                    # (a node's, named by its template) would hold it.
                    identity = _certificate_identity(volume)
                    _write_certificate(local, identity)
                    mounts[mount["mountPath"]] = local
                    if identity:
                        identities[command] = identity
            env = _env(container, tmp_path, mounts)
            # A missing Secret stops the pod (CreateContainerConfigError) rather than starting
            # it without what the Secret holds: the cluster secret's absence would silently
            # turn the bulk path off.
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                assert ref is None or not ref.get("optional", False), (command, item["name"])
            # Every variable set is read: by a flag of the service, by us, by OpenTelemetry,
            # or only to build another one's value.
            config, flags_read = _parse(command, container.get("args", []), env, monkeypatch)
            referenced = {
                name
                for item in container.get("env", [])
                for name in re.findall(r"\$\((\w+)\)", item.get("value", ""))
            }
            unread = set(env) - flags_read - READ_OTHERWISE - referenced
            assert not unread, f"{command} in {overlay} sets {unread}, which nothing reads"
            # Probes ask the port the service listens on (its health-only port with TLS).
            port = int((config.health_listen or config.listen).rsplit(":", 1)[1])
            if config.tls is not None:
                assert config.health_listen, f"{command}: TLS needs a plaintext health port"
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                assert container[probe]["grpc"]["port"] == port, (command, probe)
            # The data volume (a PVC, or the StatefulSet's claim template) is the data dir.
            claims = {
                t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])
            }
            claims |= {n for n, v in volumes.items() if "persistentVolumeClaim" in v}
            data_mounts = [m for m in container["volumeMounts"] if m["name"] in claims]
            if command == "seglog-gateway" and config.registry_etcd:
                # The registry in etcd (production): several replicas, each reachable at
                # its own address, nothing kept on a volume.
                assert workload["spec"]["replicas"] >= 2
                assert config.advertised_listener == "10.0.0.7:7070"
                assert not data_mounts
                (scratch,) = [
                    m for m in container["volumeMounts"] if m["mountPath"] == str(config.data_dir)
                ]
                assert "emptyDir" in volumes[scratch["name"]]
                etcd = [o for o in objects if o["metadata"]["name"] == "seglog-etcd"]
                (members,) = [o["spec"]["replicas"] for o in etcd if o["kind"] == "StatefulSet"]
                assert members == 3
                assert len(config.registry_etcd.split(",")) == members
                # Locked down (etcd.yaml): TLS with a certificate etcd's JSON gateway takes
                # (no common name), and a user of etcd's role-based auth.
                assert all(e.startswith("https://") for e in config.registry_etcd.split(","))
                assert config.registry_etcd_tls is not None
                assert not _subject_common_names(config.registry_etcd_tls.cert)
                assert config.registry_etcd_user and config.registry_etcd_password
            else:
                (data_mount,) = data_mounts
                assert str(config.data_dir) == data_mount["mountPath"]
            if command == "seglog-storage-node":
                assert config.node_id == 2  # the pod's ordinal
                assert config.advertised_address == "seglog-node-2.seglog-node.seglog.svc:7071"
                assert config.engine_configs["min.insync.replicas"] in ("1", "2")
                assert config.cluster_secret == SECRET_SAMPLE.encode()
                if overlay == "production":  # tiered storage, its keys from a Secret
                    remote = config.remote_storage
                    assert remote is not None and remote.bucket == "seglog"
                    assert remote.secret_access_key == SECRET_SAMPLE
                    assert remote.endpoint_url == SECRET_SAMPLE
                if config.tls is not None:  # its certificate proves the id it claims
                    identity = identities[command]
                    assert node_id_of(identity, config.node_identity_prefix) == config.node_id
            if command == "seglog-gateway":
                # Kafka's protocol on every gateway, each at its pod's own address: storage
                # node N is a broker at that port + N (kafka/brokers.py).
                assert config.kafka_listen is not None
                assert config.kafka_listen.endswith(":9092")
                assert config.kafka_listen.startswith("SSL://" if config.tls else "PLAINTEXT://")
                assert config.kafka_advertised_listener == "PLAINTEXT://10.0.0.7:9092"
                tiered = config.remote_log_storage_system_enable
                assert tiered == (overlay == "production"), overlay
            if command == "seglog-gateway" and config.tls is not None:
                assert identities[command] == GATEWAY_IDENTITY
                assert config.authorizer and not config.allow_everyone_if_no_acl_found
            checked.add(command)
    assert checked == set(SERVICES)


def test_a_config_file_sets_flags_and_engine_settings_and_flags_win(tmp_path, monkeypatch):
    path = tmp_path / "node.properties"
    path.write_text("# Kafka's names\nheartbeat.interval.ms=500\nlog.segment.bytes=1048576\n")
    monkeypatch.setenv(command_line.CONFIG_FILE_ENV, str(path))
    config = node_args(
        ["--node-id", "1", "--data-dir", str(tmp_path), "--heartbeat-interval-ms", "700"]
    )
    assert config.heartbeat_interval_ms == 700  # the command line wins
    assert config.engine_configs["log.segment.bytes"] == "1048576"
    path.write_text("heartbeat.interval.ms=500\n")
    assert node_args(["--node-id", "1", "--data-dir", str(tmp_path)]).heartbeat_interval_ms == 500
    gateway_file = tmp_path / "gateway.properties"
    gateway_file.write_text("default.replication.factor=2\nno.such.setting=1\n")
    with pytest.raises(SystemExit):
        gateway_args(["--config-file", str(gateway_file)])
    gateway_file.write_text("default.replication.factor=2\n")
    assert gateway_args(["--config-file", str(gateway_file)]).default_replication_factor == 2


def _container(objects, kind: str, name: str) -> dict:
    (workload,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _env_value(container: dict, name: str) -> str:
    (value,) = [item["value"] for item in container["env"] if item["name"] == name]
    return value


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_nodes_call_the_gateways_internal_listener_never_the_clients_port(overlay):
    """The nodes' --gateway names the gateway Service on the port that leads to the
    gateway's internal listener (the Registry's own door), not its clients' port; in
    production only the storage nodes may reach that port."""
    objects = _render(overlay)
    gateway = _container(objects, "Deployment", "seglog-gateway")
    node = _container(objects, "StatefulSet", "seglog-node")
    internal_port = int(_env_value(gateway, "SEGLOG_INTERNAL_LISTEN").rsplit(":", 1)[1])
    client_port = int(_env_value(gateway, "SEGLOG_LISTEN").rsplit(":", 1)[1])
    assert internal_port != client_port
    (named,) = [p["name"] for p in gateway["ports"] if p["containerPort"] == internal_port]
    host, port = _env_value(node, "SEGLOG_GATEWAY").rsplit(":", 1)
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == host]
    (target,) = [p["targetPort"] for p in service["spec"]["ports"] if p["port"] == int(port)]
    assert target == named
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    guarding = [
        p
        for p in policies
        if p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component") == "gateway"
    ]
    if overlay == "production":
        (policy,) = guarding
        (rule,) = [
            r for r in policy["spec"]["ingress"] if internal_port in {p["port"] for p in r["ports"]}
        ]
        assert {p["port"] for p in rule["ports"]} == {internal_port}
        (source,) = rule["from"]
        assert source["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
            "storage-node"
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_storage_node_is_a_kafka_broker_clients_can_reach(overlay):
    """Clients bootstrap through the gateway Service's Kafka port and are then told of node
    N's broker at the gateway pod's 9092 + N (kafka/brokers.py): no other port of the pod is
    in that range for the StatefulSet's nodes (and a hundred more), and where a
    NetworkPolicy fences the gateways, it opens the range to clients."""
    objects = _render(overlay)
    (nodes,) = [o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] ==
                "seglog-node"]  # fmt: skip
    highest = 9092 + nodes["spec"]["replicas"] - 1 + 100
    gateway = _container(objects, "Deployment", "seglog-gateway")
    kafka = [p for p in gateway["ports"] if p["name"] == "kafka"]
    assert [p["containerPort"] for p in kafka] == [9092]
    others = [p["containerPort"] for p in gateway["ports"] if p["name"] != "kafka"]
    assert not [p for p in others if 9092 < p <= highest], others
    (service,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] ==
                  "seglog-gateway"]  # fmt: skip
    assert {"name": "kafka", "port": 9092, "targetPort": "kafka"} in service["spec"]["ports"]
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        if policy["metadata"]["name"] != "seglog-gateway":
            continue
        open_ranges = [
            (p["port"], p.get("endPort", p["port"]))
            for rule in policy["spec"]["ingress"]
            if "from" not in rule
            for p in rule.get("ports", [])
        ]
        assert any(low <= 9092 and highest <= high for low, high in open_ranges), open_ranges
        assert not any(low <= 7090 <= high for low, high in open_ranges)  # nodes' door shut

"""The dev overlay's manifests run by `podman kube play` (part of make image-smoke): podman
runs Pods, Deployments, ConfigMaps and PersistentVolumeClaims, not StatefulSets or
Services, so the rendered overlay is narrowed to what it runs, changed only where a single
machine must differ from a cluster, each change said below:

- each pod the storage-node StatefulSet would make (ordinals 0-2, then 3 when it is scaled
  up) becomes a Deployment of one pod with the claim its volumeClaimTemplate would make, and
  the pod-index label becomes its value; `kubectl scale` is playing (or taking down) the
  pod of the ordinal added (or removed), as the StatefulSet controller would;
- pods share the host's network (no Service DNS): the gateway and the node listen on free
  loopback ports and the node dials the gateway's internal listener there; the image is the
  one just built;
- the generated Secret is given as the variable it would fill, and the namespace and host
  name (which podman's downward API does not know) as values; no collector runs here, so
  traces and metrics are not exported.

Everything else runs as written: commands, the Kafka-named ConfigMap mounted read-only and
read through SEGLOG_CONFIG_FILE, the volumes at the data dirs, the read-only root file
system, non-root user and dropped capabilities. A producer and a consumer on the host then
work against it while the storage nodes are scaled from 3 to 4 (the new node balanced by the
gateway's auto.balance) and back (decommissioned first, as README's Operations says).

    python -m tests.kube_play_smoke [--image localhost/seglog:dev]
"""

from __future__ import annotations

import base64
import copy
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from seglog.client.admin import Admin
from seglog.client.producer import Producer
from tests.cluster import run_cli
from tests.container_smoke import (
    _consume_all,
    _live_nodes,
    _podman,
    _wait,
    smoke_main,
)
from tests.ports import free_port_run, free_ports

ROOT = Path(__file__).resolve().parents[1]
RECORDS = 500
NODES = 3
TOPIC = "played"
PARTITIONS = 6


def _render() -> list[dict]:
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "kubectl"),
            "kustomize",
            str(ROOT / "deploy/k8s/overlays/dev"),
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def _set_env(container: dict, name: str, value: str) -> None:
    for item in container["env"]:
        if item["name"] == name:
            item.pop("valueFrom", None)
            item["value"] = value
            return
    container["env"].append({"name": name, "value": value})


def playable(objects: list[dict], image: str, gateway_port: int, internal_port: int) -> list[dict]:
    """The ConfigMaps, the gateway and its claim, ready for podman (the nodes:
    `node_manifests`); the gateway's clients' listener on `gateway_port`, its nodes' on
    `internal_port`."""
    out = []
    for obj in objects:
        if obj["kind"] in ("ConfigMap", "PersistentVolumeClaim"):
            out.append(obj)
        elif obj["kind"] == "Deployment" and obj["metadata"]["name"] == "seglog-gateway":
            played = _on_this_machine(obj, objects, image)
            (container,) = played["spec"]["template"]["spec"]["containers"]
            _set_env(container, "SEGLOG_LISTEN", f"127.0.0.1:{gateway_port}")
            _set_env(container, "SEGLOG_INTERNAL_LISTEN", f"127.0.0.1:{internal_port}")
            # The Kafka listener on free ports too (the host's network: 9092 may be taken),
            # its nodes' brokers at the ports after it.
            kafka = f"127.0.0.1:{free_port_run(NODES + 2)}"
            _set_env(container, "SEGLOG_KAFKA_LISTEN", kafka)
            _set_env(container, "SEGLOG_KAFKA_ADVERTISED_LISTEN", kafka)
            out.append(played)
    return out


def node_manifests(
    objects: list[dict], image: str, internal_port: int, ordinal: int, ports: tuple[int, int]
) -> list[dict]:
    """What the StatefulSet's pod `ordinal` would be (as a Deployment of one pod, with the
    claim its volumeClaimTemplate would make), listening on `ports` (API, bulk), calling the
    gateway's internal listener on `internal_port`."""
    (statefulset,) = [o for o in objects if o["kind"] == "StatefulSet"]
    played = _on_this_machine(statefulset, objects, image)
    name = f"{statefulset['metadata']['name']}-{ordinal}"
    played["kind"] = "Deployment"
    played["metadata"]["name"] = name
    spec = played["spec"]
    spec["replicas"] = 1
    for key in ("serviceName", "podManagementPolicy", "volumeClaimTemplates"):
        spec.pop(key, None)
    pod = spec["template"]["spec"]
    claim = f"{name}-data"
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim},
        "spec": statefulset["spec"]["volumeClaimTemplates"][0]["spec"],
    }
    pod["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": claim}})
    (container,) = pod["containers"]
    api, bulk = ports
    _set_env(container, "POD_NAME", name)
    _set_env(container, "SEGLOG_NODE_ID", str(ordinal))  # the pod-index label's value
    _set_env(container, "SEGLOG_LISTEN", f"127.0.0.1:{api}")
    _set_env(container, "SEGLOG_ADVERTISED_ADDRESS", f"127.0.0.1:{api}")
    _set_env(container, "SEGLOG_BULK_LISTEN", f"127.0.0.1:{bulk}")
    _set_env(container, "SEGLOG_ADVERTISED_BULK_ADDRESS", f"127.0.0.1:{bulk}")
    _set_env(container, "SEGLOG_GATEWAY", f"127.0.0.1:{internal_port}")
    configmaps = [o for o in objects if o["kind"] == "ConfigMap"]
    return [*configmaps, pvc, played]


def _on_this_machine(obj: dict, objects: list[dict], image: str) -> dict:
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    played = copy.deepcopy(obj)
    pod = played["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    (container,) = pod["containers"]
    container["image"] = image
    container.pop("ports", None)  # the host's network: nothing to publish
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        container.pop(probe, None)  # gRPC probes are the kubelet's, not podman's
    for item in container["env"]:
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            data = secrets[ref["name"]]["data"][ref["key"]]
            item.pop("valueFrom")
            item["value"] = base64.b64decode(data).decode()
    _set_env(container, "OTEL_TRACES_EXPORTER", "none")  # no collector here
    _set_env(container, "OTEL_METRICS_EXPORTER", "none")
    # podman's downward API knows the pod's name, not its namespace or host.
    _set_env(container, "POD_NAMESPACE", played["metadata"].get("namespace", "default"))
    _set_env(container, "NODE_NAME", "localhost")
    # Nor its status.podIP: on the host's network the pod's address is the host's loopback.
    _set_env(container, "POD_IP", "127.0.0.1")
    return played


def _spread(admin: Admin, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """Replicas and leaders per live node."""
    live = _live_nodes(admin)
    held, led = dict.fromkeys(live, 0), dict.fromkeys(live, 0)
    (described,) = admin.describe_topics([topic])
    for p in described.partitions:
        for r in p.replicas:
            held[r] = held.get(r, 0) + 1
        led[p.leader] = led.get(p.leader, 0) + 1
    return held, led


def _balanced_over(admin: Admin, topic: str, nodes: set[int]) -> bool:
    if admin.list_partition_reassignments():
        return False
    held, led = _spread(admin, topic)
    return (
        set(held) == nodes
        and set(led) <= nodes
        and max(held.values()) - min(held.values()) <= 1
        and max(led.get(n, 0) for n in nodes) - min(led.get(n, 0) for n in nodes) <= 1
    )


def smoke(image: str) -> None:
    """Three storage nodes (the StatefulSet's ordinals 0-2), records written; `kubectl scale
    --replicas=4` (ordinal 3 played): the gateway's automatic balancing gives it its share;
    `seglog nodes decommission --node 3`, then `kubectl scale --replicas=3` (ordinal 3
    down): everything written is still read back."""
    gateway_port, internal_port, *ports = free_ports(2 + 2 * (NODES + 1))
    bootstrap = f"127.0.0.1:{gateway_port}"
    objects = _render()
    with tempfile.TemporaryDirectory(prefix="seglog-kube-play-") as tmp:
        files = {"cluster": Path(tmp) / "cluster.yaml"}
        manifests = {"cluster": playable(objects, image, gateway_port, internal_port)}
        for ordinal in range(NODES + 1):
            files[ordinal] = Path(tmp) / f"node-{ordinal}.yaml"
            manifests[ordinal] = node_manifests(
                objects, image, internal_port, ordinal, (ports[2 * ordinal], ports[2 * ordinal + 1])
            )
        for key, path in files.items():
            path.write_text(yaml.safe_dump_all(manifests[key]))
        try:
            for key in files:  # what an interrupted earlier run may have left
                _down(files[key], manifests[key])
            _podman("kube", "play", str(files["cluster"]), timeout=300)
            for ordinal in range(NODES):
                _podman("kube", "play", str(files[ordinal]), timeout=300)
            values = [b"played-%d" % i for i in range(RECORDS)]
            with Admin(bootstrap) as admin:
                _wait(lambda: _live_nodes(admin) == {0, 1, 2}, "three nodes registered", 90)
                admin.create_topic(TOPIC, PARTITIONS, 2)
                with Producer(bootstrap) as producer:
                    for f in [producer.send(TOPIC, v) for v in values]:
                        f.get(timeout=30)

                _podman("kube", "play", str(files[NODES]), timeout=300)  # scale to 4
                _wait(lambda: _live_nodes(admin) == {0, 1, 2, 3}, "node 3 registered", 90)
                _wait(
                    lambda: _balanced_over(admin, TOPIC, {0, 1, 2, 3}),
                    "node 3 balanced automatically",
                    180,
                )
                print(f"scaled to 4: replicas and leaders per node {_spread(admin, TOPIC)}")

                done = run_cli("nodes", "decommission", "--node", "3", bootstrap=bootstrap)
                assert done.returncode == 0, done.stderr.decode()
                held, _ = _spread(admin, TOPIC)
                assert held.get(3, 0) == 0, held
                # Scale back to 3: its pod and its claim go, the shared ConfigMaps stay.
                _down(files[NODES], manifests[NODES], kinds=("PersistentVolumeClaim",))
                _wait(lambda: _live_nodes(admin) == {0, 1, 2}, "node 3 gone", 90)
                _wait(
                    lambda: _balanced_over(admin, TOPIC, {0, 1, 2}),
                    "three nodes balanced",
                    120,
                )
                print(f"scaled to 3: replicas and leaders per node {_spread(admin, TOPIC)}")
            got = _consume_all(bootstrap, TOPIC, RECORDS, PARTITIONS)
            assert sorted(got) == sorted(values), f"read {len(got)} of {RECORDS}"
            print(
                f"podman kube play of the dev overlay: {NODES} nodes scaled to {NODES + 1} and "
                f"back, {RECORDS} records produced and all read back"
            )
        finally:
            for key in reversed(list(files)):
                _down(files[key], manifests[key])


def _down(path: Path, manifests: list[dict], kinds=("PersistentVolumeClaim", "ConfigMap")) -> None:
    """Remove the pods of `path` and the volumes podman made for its claims and ConfigMaps
    (`kinds`: a forced removal also removes every container still using the volume)."""
    _podman("kube", "down", str(path), check=False, timeout=120)
    for obj in manifests:
        if obj["kind"] in kinds:
            _podman("volume", "rm", "--force", obj["metadata"]["name"], check=False)


def main(argv: list[str] | None = None) -> int:
    return smoke_main("python -m tests.kube_play_smoke", smoke, argv)


if __name__ == "__main__":
    sys.exit(main())

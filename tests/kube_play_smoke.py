"""The dev overlay's manifests run by `podman kube play` (part of make image-smoke): podman
runs Pods, Deployments, ConfigMaps and PersistentVolumeClaims, not StatefulSets or
Services, so the rendered overlay is narrowed to what it runs, changed only where a single
machine must differ from a cluster, each change said below:

- the storage-node StatefulSet becomes a Deployment of one pod, and the pod-index label the
  kubelet would give it becomes its value (0);
- pods share the host's network (no Service DNS): the gateway and the node listen on free
  loopback ports and the node dials the gateway there; the image is the one just built;
- the generated Secret is given as the variable it would fill, and the namespace and host
  name (which podman's downward API does not know) as values; no collector runs here, so
  traces and metrics are not exported.

Everything else runs as written: commands, the Kafka-named ConfigMap mounted read-only and
read through SEGLOG_CONFIG_FILE, the volumes at the data dirs, the read-only root file
system, non-root user and dropped capabilities. A producer and a consumer on the host then
work against it.

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
from tests.container_smoke import (
    _consume_all,
    _live_nodes,
    _podman,
    _wait,
    smoke_main,
)
from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[1]
RECORDS = 500


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


def playable(
    objects: list[dict], image: str, gateway_port: int, node_ports: list[int]
) -> list[dict]:
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    out = []
    for obj in objects:
        kind = obj["kind"]
        if kind in ("ConfigMap", "PersistentVolumeClaim"):
            out.append(obj)
        elif (
            kind in ("Deployment", "StatefulSet")
            and obj["metadata"]["name"].startswith("seglog-")
            and "otel" not in obj["metadata"]["name"]
        ):
            played = copy.deepcopy(obj)
            spec = played["spec"]
            pod = spec["template"]["spec"]
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
            if kind == "StatefulSet":
                played["kind"] = "Deployment"
                spec["replicas"] = 1
                for key in ("serviceName", "podManagementPolicy", "volumeClaimTemplates"):
                    spec.pop(key, None)
                pvc = {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "seglog-node-0-data"},
                    "spec": obj["spec"]["volumeClaimTemplates"][0]["spec"],
                }
                out.append(pvc)
                pod["volumes"].append(
                    {"name": "data", "persistentVolumeClaim": {"claimName": "seglog-node-0-data"}}
                )
                _set_env(container, "SEGLOG_NODE_ID", "0")
                _set_env(container, "SEGLOG_LISTEN", f"127.0.0.1:{node_ports[0]}")
                _set_env(container, "SEGLOG_ADVERTISED_ADDRESS", f"127.0.0.1:{node_ports[0]}")
                _set_env(container, "SEGLOG_BULK_LISTEN", f"127.0.0.1:{node_ports[1]}")
                _set_env(container, "SEGLOG_ADVERTISED_BULK_ADDRESS", f"127.0.0.1:{node_ports[1]}")
                _set_env(container, "SEGLOG_GATEWAY", f"127.0.0.1:{gateway_port}")
            else:
                _set_env(container, "SEGLOG_LISTEN", f"127.0.0.1:{gateway_port}")
            out.append(played)
    return out


def smoke(image: str) -> None:
    gateway_port, *node_ports = free_ports(3)
    bootstrap = f"127.0.0.1:{gateway_port}"
    manifests = playable(_render(), image, gateway_port, node_ports)
    with tempfile.TemporaryDirectory(prefix="seglog-kube-play-") as tmp:
        path = Path(tmp) / "dev.yaml"
        path.write_text(yaml.safe_dump_all(manifests))
        try:
            _down(path, manifests)  # what an interrupted earlier run may have left
            _podman("kube", "play", str(path), timeout=300)
            with Admin(bootstrap) as admin:
                _wait(lambda: _live_nodes(admin) == {0}, "the node registered", 90)
                admin.create_topic("played", 3)
            values = [b"played-%d" % i for i in range(RECORDS)]
            with Producer(bootstrap) as producer:
                for f in [producer.send("played", v) for v in values]:
                    f.get(timeout=30)
            got = _consume_all(bootstrap, "played", RECORDS)
            assert sorted(got) == sorted(values), f"read {len(got)} of {RECORDS}"
            print(f"podman kube play of the dev overlay: {RECORDS} records produced and consumed")
        finally:
            _down(path, manifests)


def _down(path: Path, manifests: list[dict]) -> None:
    """Remove the pods of `path` and the volumes podman made for its claims and ConfigMaps."""
    _podman("kube", "down", str(path), check=False, timeout=120)
    for obj in manifests:
        if obj["kind"] in ("PersistentVolumeClaim", "ConfigMap"):
            _podman("volume", "rm", "--force", obj["metadata"]["name"], check=False)


def main(argv: list[str] | None = None) -> int:
    return smoke_main("python -m tests.kube_play_smoke", smoke, argv)


if __name__ == "__main__":
    sys.exit(main())

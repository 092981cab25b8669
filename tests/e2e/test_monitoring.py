"""Monitoring as shipped, against `make run` with OTEL_METRICS_EXPORTER=prometheus: each of
the four processes serves its own scrape endpoint, and every PromQL expression of the alert
rules and the Grafana dashboard (deploy/observability/) names a metric those endpoints
export after some produce, consume, group and error activity. The names are checked by a
small PromQL tokenizer (tests/promql_names.py), not promtool: no pinned promtool binary
comes with the project's files."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from seglog.client.admin import Admin
from seglog.client.consumer import Consumer
from seglog.client.gateway import GatewayClient
from seglog.errors import RecordTooLargeError
from tests.batches import make_batch
from tests.cluster import drain, local_cluster_command
from tests.ports import free_port_run
from tests.promql_names import metric_names
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
OBSERVABILITY = ROOT / "deploy" / "observability"
ALERTS = OBSERVABILITY / "prometheus" / "seglog-alerts.yaml"
DASHBOARD = OBSERVABILITY / "grafana" / "seglog-dashboard.json"
# Series Prometheus makes itself for every target, not seglog's.
PROMETHEUS_OWN = {"up"}
PROCESSES = 4  # make run: the gateway and three nodes

pytestmark = pytest.mark.slow  # one make run for the module, ~15 s


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text: str = answer.read().decode()
        return text


def _series_names(text: str) -> set[str]:
    return {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """Each process's scrape text, by port, once the cluster has been used."""
    base = free_port_run(PROCESSES)
    env = {
        **os.environ,
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(base),
    }
    env.pop("OTEL_EXPORTER_PROMETHEUS_HOST", None)
    data = tmp_path_factory.mktemp("monitored") / "data"
    runner = subprocess.Popen(
        local_cluster_command(data, nodes=3), stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        banner = [runner.stdout.readline() for _ in range(5)]
        address = re.search(r"gateway on (\S+)", banner[0]).group(1)
        endpoints = next(line for line in banner if "Prometheus endpoints" in line)
        assert f"127.0.0.1:{base}-{base + PROCESSES - 1}" in endpoints, banner
        _use(address)
        ports = list(range(base, base + PROCESSES))
        wanted = {
            "seglog_consumer_lag",
            "seglog_request_errors_total",
            "seglog_partition_under_replicated",
        }
        assert wait_until(
            lambda: wanted <= set().union(*(_series_names(_scrape(p)) for p in ports)), 60
        )
        yield {port: _scrape(port) for port in ports}
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=60)


def _use(address: str) -> None:
    """Produce, consume in a group with a commit, and have one produce refused."""
    admin = Admin(address)
    client = GatewayClient(address)
    try:
        admin.create_topic("watched", 2, 3)
        admin.create_topic("tiny", 1, 3, {"max.message.bytes": "1000"})
        for partition in (0, 1):
            [result] = client.produce("watched", {partition: make_batch([b"v"] * 50)}, acks=-1)
            assert not result.error
        with pytest.raises(RecordTooLargeError):
            client.produce("tiny", {0: make_batch([b"x" * 5000])})
        with Consumer(
            address, group_id="watchers", auto_offset_reset="earliest", enable_auto_commit=False
        ) as consumer:
            consumer.subscribe(["watched"])
            assert len(drain(consumer, 60)) >= 60
            consumer.commit()
    finally:
        client.close()
        admin.close()


def _exported(scraped) -> set[str]:
    return set().union(*(_series_names(text) for text in scraped.values()))


@pytest.mark.long  # a whole make run (the module's)
def test_every_process_of_make_run_serves_its_own_scrape_endpoint(scraped):
    services = set()
    for text in scraped.values():
        found = re.search(r'^target_info\{[^}]*service_name="([^"]+)"', text, re.MULTILINE)
        assert found, text[:500]
        services.add(found.group(1))
    assert services == {
        "seglog-gateway",
        "seglog-storage-node-1",
        "seglog-storage-node-2",
        "seglog-storage-node-3",
    }
    gateways = [t for t in scraped.values() if "seglog_registry_node_live" in t]
    assert len(gateways) == 1
    assert sum("seglog_log_size_bytes" in t for t in scraped.values()) == 3


def _alert_expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [
        (rule.get("alert") or rule["record"], rule["expr"])
        for group in rules["groups"]
        for rule in group["rules"]
    ]


def _dashboard_expressions() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            found.append((variable["name"], query["query"] if isinstance(query, dict) else query))
    return found


@pytest.mark.long  # a whole make run (the module's)
def test_every_alert_and_panel_names_a_metric_seglog_exports(scraped):
    exported = _exported(scraped) | PROMETHEUS_OWN
    recorded = {rule["record"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
                for rule in g["rules"] if "record" in rule}  # fmt: skip
    expressions = _alert_expressions() + _dashboard_expressions()
    assert len(expressions) >= 15
    unknown = {
        (where, name)
        for where, expression in expressions
        for name in metric_names(expression)
        if name not in exported | recorded
    }
    assert not unknown, unknown
    alerts = {name for name, _ in _alert_expressions()}
    for needed in (
        "SeglogOfflinePartitions",
        "SeglogUnderReplicatedPartitions",
        "SeglogIsrShrinking",
        "SeglogConsumerLagHigh",
        "SeglogRequestErrors",
        "SeglogNodeDown",
    ):
        assert needed in alerts


def test_the_production_overlay_ships_the_same_rules_and_a_scrape_config():
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "kubectl"),
            "kustomize",
            str(ROOT / "deploy/k8s/overlays/production"),
        ],
        capture_output=True,
        check=True,
        timeout=60,
    )
    objects = [o for o in yaml.safe_load_all(out.stdout) if o]
    [config] = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("seglog-prometheus")
    ]
    assert yaml.safe_load(config["data"]["seglog-alerts.yaml"]) == yaml.safe_load(
        ALERTS.read_text()
    )
    scrape = yaml.safe_load(config["data"]["prometheus.yml"])
    assert {job["job_name"] for job in scrape["scrape_configs"]} == {
        "seglog-gateway",
        "seglog-storage-node",
    }
    # The pods serve the endpoint the scrape config reads: the port named "metrics".
    for kind, name in (("Deployment", "seglog-gateway"), ("StatefulSet", "seglog-node")):
        [workload] = [o for o in objects if (o["kind"], o["metadata"]["name"]) == (kind, name)]
        [container] = workload["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert "prometheus" in env["OTEL_METRICS_EXPORTER"].split(",")
        assert {"name": "metrics", "containerPort": 9464} in container["ports"]


def test_make_run_names_a_busy_scrape_port_and_the_setting_to_change(tmp_path):
    # The gateway's and node 1's ports are held bound but not served, so no other test's
    # server can take them meanwhile and make the cluster name the wrong port.
    base = free_port_run(3)
    with (
        socket.socket() as gateway_port,
        socket.socket() as node_1_port,
        socket.socket() as taken,
    ):
        gateway_port.bind(("127.0.0.1", base))
        node_1_port.bind(("127.0.0.1", base + 1))
        taken.bind(("127.0.0.1", base + 2))
        taken.listen()
        node_2_port = base + 2
        env = {
            **os.environ,
            "OTEL_METRICS_EXPORTER": "prometheus",
            "OTEL_EXPORTER_PROMETHEUS_PORT": str(node_2_port - 2),
        }
        refused = subprocess.run(
            local_cluster_command(tmp_path / "data", nodes=3),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert refused.returncode == 1
    assert f"127.0.0.1:{node_2_port}" in refused.stderr
    assert "OTEL_EXPORTER_PROMETHEUS_PORT" in refused.stderr


def test_the_prometheus_operator_objects_carry_the_same_rules_and_scrape_port():
    operator = OBSERVABILITY / "prometheus-operator"
    rule = yaml.safe_load((operator / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(ALERTS.read_text())
    monitor = yaml.safe_load((operator / "podmonitor.yaml").read_text())
    assert monitor["kind"] == "PodMonitor"
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]

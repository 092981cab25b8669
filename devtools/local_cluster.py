"""`make run`: a gateway and storage nodes on loopback, as separate processes.

    python -m devtools.local_cluster [--data-dir data] [--listen 127.0.0.1:7070] [--nodes 3]
                                     [--kafka-listen 127.0.0.1:9092] [--tls] [--etcd]
                                     [--tiered]

Data lives under the data dir (`gateway/`, `node-1/`, ...) and is kept between runs. Nodes
listen on the ports after the gateway's (7071, 7072, 7073), or on free ports when the gateway
port is 0, and call the gateway's internal listener, never the clients' one: the gateway's
port + 20 (7090, a gateway's own default; the second gateway of --etcd the next, 7091). A
second cluster on a port already served is refused at once. Kafka clients use the gateway's
Kafka listener, 127.0.0.1:9092 (mutual TLS under --tls); each storage node is a Kafka broker
at the listener's port + its node id, 9093-9095 (the second gateway of --etcd listens on
9192, its nodes' lanes 9193-9195; a node added later gets its port as it registers).

With OTEL_METRICS_EXPORTER=prometheus, each process serves its own scrape endpoint: the
gateway on OTEL_EXPORTER_PROMETHEUS_PORT (9464 unless set), node N on that port + N, the
second gateway of --etcd on the port after the last node's (9464-9467 with three nodes, all
free ports when it is 0), on the gateway's host unless OTEL_EXPORTER_PROMETHEUS_HOST says.

A storage node that dies is reported and the cluster keeps running without it, so failover
can be watched (topics default to three replicas, min.insync.replicas=2); SIGHUP
(`kill -HUP <pid>`, the pid is printed) restarts the nodes that are down. The gateway's
death stops the cluster. Ctrl-C or SIGTERM stops everything: nodes first, each moving its
leaderships away (controlled shutdown), flushing and writing its clean-shutdown marker,
then the gateway.

With `--etcd` (make run ETCD=1) the registry lives in an embedded etcd (`etcd/` in the data
dir) and two gateways share it, the second on the port after the nodes' (7074 with three
nodes); nodes and clients may use either or both (`127.0.0.1:7070,127.0.0.1:7074`). One
gateway dying leaves the cluster running on the other. With `--tls` as well, etcd speaks HTTPS
only to holders of the cluster CA's certificates, and role-based auth lets only the gateways'
etcd user (password in `etcd-password` in the data dir) read or write the registry's keys.

One registry at a time holds the cluster, and switching keeps it: `make run ETCD=1` on the
data of a plain `make run` adopts its file registry into etcd, and a plain `make run` on data
whose registry is in etcd brings it back to the file (registry_switch.py). Every node keeps
its cluster id in its meta.properties, so a registry of another cluster is refused, never
obeyed; two registries in one data dir are refused with the commands that resolve it.
Secrets and certificates are made once into the data dir (credentials.py).

With `--tiered` (make run TIERED=1) a SeaweedFS S3 store runs beside the cluster (data in
`seaweedfs/`, S3 on 127.0.0.1:8333, bucket `seglog`) and topics may set
remote.storage.enable=true: their leaders copy rolled segments to it (devtools/seaweedfs.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from pathlib import Path

import grpc

from seglog.client.gateway import with_default_port
from seglog.rpc import grants
from seglog.rpc.channels import open_channel, tls_server_name
from seglog.security.certs import GATEWAY_IDENTITY
from seglog.security.tls import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV, ClientSecurity
from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from services.gateway.coordination.etcd_auth import lock_down
from services.gateway.coordination.etcd_keys import DEFAULT_PREFIX

from .cluster_stop import Stopping, stop_in_order
from .credentials import identity_files, secret_file, tls_flags
from .embedded_etcd import EtcdProcess
from .processes import ServerProcess, gateway_process, node_process, start_all
from .registry_switch import RegistrySwitch, RegistrySwitchRefused
from .seaweedfs import SeaweedProcess, cluster_flags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.local_cluster")
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--listen", default="127.0.0.1:7070", help="the gateway's address")
    parser.add_argument(
        "--kafka-listen",
        default="127.0.0.1:9092",
        help="the gateway's Kafka listener; node N's broker at its port + N (port 0 when "
        "--listen's is; the second gateway with --etcd on its port + 100)",
    )
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument(
        "--tls",
        action="store_true",
        help="mutual TLS everywhere, with a cluster CA made once into DATA_DIR/tls",
    )
    parser.add_argument(
        "--etcd",
        action="store_true",
        help="the registry in an embedded etcd, shared by two gateways",
    )
    parser.add_argument("--tiered", action="store_true", help="a SeaweedFS S3 store beside it")
    args = parser.parse_args(argv)

    data = Path(args.data_dir)
    (data / "logs").mkdir(parents=True, exist_ok=True)
    host, port = args.listen.rsplit(":", 1)
    if int(port) != 0 and _listening(host, int(port)):
        print(
            f"seglog local cluster: {args.listen} is already served (a cluster already "
            f"running? stop it, or choose another port: make run PORT=...)",
            file=sys.stderr,
        )
        return 1
    kafka_host, kafka_port = args.kafka_listen.rsplit(":", 1)
    if int(port) == 0:
        kafka_port = "0"
    if int(kafka_port) != 0 and _listening(kafka_host, int(kafka_port)):
        print(
            f"seglog local cluster: {args.kafka_listen} (Kafka) is already served (a Kafka "
            f"broker or another cluster? choose another: make run KAFKA_PORT=..., or "
            f"--kafka-listen HOST:PORT)",
            file=sys.stderr,
        )
        return 1
    # The gateways' internal listeners (nodes' registry calls): the gateway's port + 20 (7090
    # for 7070, a gateway's own default), the second gateway's the next; clear of the nodes'
    # ports after the gateway's and of the second gateway's, up to 18 nodes.
    internal_ports = [0 if int(port) == 0 else int(port) + 20 + i for i in range(2)]
    for internal_port in internal_ports[: 2 if args.etcd else 1]:
        if internal_port != 0 and _listening(host, internal_port):
            print(
                f"seglog local cluster: {host}:{internal_port} (the gateway's internal "
                f"listener) is already served: choose another port: make run PORT=...",
                file=sys.stderr,
            )
            return 1
    metrics_ports = _prometheus_ports(args.nodes + (2 if args.etcd else 1))
    for metrics_port in metrics_ports:
        if metrics_port != 0 and _listening(host, metrics_port):
            print(
                f"seglog local cluster: {host}:{metrics_port} (a Prometheus endpoint) is "
                f"already served: set OTEL_EXPORTER_PROMETHEUS_PORT to the first of "
                f"{len(metrics_ports)} free ports",
                file=sys.stderr,
            )
            return 1
    # The handlers only add to a set: a threading.Event's set() from a handler can deadlock
    # on the Event's own lock when the signal lands while the main thread holds it (in
    # wait() or clear()), and the cluster then never stops.
    received: set[str] = set()
    signal.signal(signal.SIGTERM, lambda *_: received.add("stop"))
    signal.signal(signal.SIGINT, lambda *_: received.add("stop"))
    signal.signal(signal.SIGHUP, lambda *_: received.add("restart"))

    # Services log to files; what they print (console traces with
    # OTEL_TRACES_EXPORTER=console) comes through to this terminal.
    echo = sys.stdout.buffer
    # The secret that signs bulk transfer grants, made once per data dir (mode 0600) and
    # given to every process through the environment, never on a command line.
    secret = secret_file(data / "cluster-secret")
    env = {grants.CLUSTER_SECRET_ENV: secret}
    gateway_tls: list[str] = []
    node_tls: dict[int, list[str]] = {}
    if args.tls:
        gateway_tls, node_tls = tls_flags(data / "tls", args.nodes)
    # Topics default to three replicas and acks=all to two in sync, so killing one node
    # shows a failover with no data loss (fewer nodes: as many replicas as nodes).
    replication_factor = min(3, args.nodes)
    min_insync_replicas = max(1, min(2, args.nodes - 1))
    try:
        switch = RegistrySwitch.prepare(data, etcd=args.etcd, tls=args.tls)
    except RegistrySwitchRefused as exc:
        print(f"seglog local cluster: {exc}", file=sys.stderr)
        return 1
    etcd: EtcdProcess | None = None
    gateway_listens = [args.listen]
    registry_args: list[str] = []
    if args.etcd:
        # With --tls, etcd too: HTTPS with client certificates from the cluster CA, and only
        # the gateway's certificate may touch the registry's keys.
        etcd = EtcdProcess(
            data / "etcd",
            log_path=data / "logs" / "etcd.log",
            tls=identity_files(data / "tls", "etcd") if args.tls else None,
            own_process_group=True,
        )
        second_port = 0 if int(port) == 0 else int(port) + args.nodes + 1
        gateway_listens.append(f"{host}:{second_port}")
        registry_args = ["--registry-etcd", "<etcd>"]
    store = SeaweedProcess.for_run(data, any_port=int(port) == 0) if args.tiered else None
    tiered_gateway, tiered_node, tiered_env = cluster_flags(store)
    # Under --tls the Kafka listener is mutual TLS too (SSL://, the cluster CA's certificates).
    kafka_scheme = "SSL://" if args.tls else ""
    # Each gateway binds a lane per storage node at its Kafka port + the node id, so each
    # node is a Kafka broker of its own (kafka/brokers.py): 9093-9095 with three nodes. The
    # second gateway of --etcd 100 ports on, so its nodes' lanes stay clear of the first's.
    kafka_listens = [
        f"{kafka_scheme}{kafka_host}:{0 if int(kafka_port) == 0 else int(kafka_port) + i * 100}"
        for i in range(len(gateway_listens))
    ]
    gateways = [
        gateway_process(
            listen,
            data / ("gateway" if i == 0 else f"gateway-{i + 1}"),
            internal_listen=f"{host}:{internal_ports[i]}",
            extra_args=[
                "--default-replication-factor",
                str(replication_factor),
                # As Kafka's quickstart: a first `consume --group` is served at once instead
                # of waiting for more members (production keeps the 3 s default).
                "--group-initial-rebalance-delay-ms",
                "0",
                # Kafka's default, said aloud: clients and test suites rely on it.
                "--auto-create-topics-enable",
                "true",
                *registry_args,
                *tiered_gateway,
                *gateway_tls,
                *(["--kafka-listen", kafka_listens[i]] if kafka_listens else []),
            ],
            env={**env, **_metrics_env(metrics_ports, host, 0 if i == 0 else args.nodes + i)},
            stderr_path=data / "logs" / ("gateway.log" if i == 0 else f"gateway-{i + 1}.log"),
            echo_stdout=echo,
            # Ctrl-C reaches this process alone, which stops the nodes before the gateways.
            own_process_group=True,
        )
        for i, listen in enumerate(gateway_listens)
    ]
    nodes: list[ServerProcess] = []
    for log in (data / "logs").glob("*.log"):  # where this run's lines begin
        _LOG_STARTS[log] = log.stat().st_size
    try:
        if store is not None:
            store.start()
        if etcd is not None:
            endpoint = etcd.start()
            if etcd.tls is not None:
                password = secret_file(data / "etcd-password")
                client = identity_files(data / "tls", "")  # etcd-client.pem: no common name
                lock_down(
                    endpoint,
                    DEFAULT_PREFIX + "/",
                    {GATEWAY_IDENTITY: password},
                    secret_file(data / "etcd-root-password"),
                    client,
                )
                for gateway in gateways:
                    gateway.args += [
                        "--registry-etcd-user", GATEWAY_IDENTITY,
                        "--registry-etcd-cert", str(client.cert),
                        "--registry-etcd-key", str(client.key),
                        "--registry-etcd-ca", str(client.ca),
                    ]  # fmt: skip
                    gateway.env = {**gateway.env, "SEGLOG_REGISTRY_ETCD_PASSWORD": password}
            for gateway in gateways:
                gateway.args = [endpoint if a == "<etcd>" else a for a in gateway.args]
        address = ",".join(gateway.start() for gateway in gateways)
        internal = ",".join(gateway.internal_address for gateway in gateways)
        for node_id in range(1, args.nodes + 1):
            node_port = 0 if int(port) == 0 else int(port) + node_id
            node = node_process(
                node_id,
                f"{host}:{node_port}",
                data / f"node-{node_id}",
                internal,
                extra_args=[
                    "--config",
                    f"min.insync.replicas={min_insync_replicas}",
                    *tiered_node,
                    *node_tls.get(node_id, []),
                ],
                env={**env, **tiered_env, **_metrics_env(metrics_ports, host, node_id)},
                stderr_path=data / "logs" / f"node-{node_id}.log",
                echo_stdout=echo,
                own_process_group=True,
            )
            nodes.append(node)
        start_all(nodes)
        # The banner means ready: a first `topics create` with three replicas must find three
        # registered nodes, not race their first heartbeats.
        _wait_for_nodes(address, args.nodes, data / "tls" if args.tls else None)
        kafka = ""
        if kafka_listens:
            free = " (free ports: see the gateway logs)" if int(kafka_port) == 0 else ""
            kafka = f" (Kafka clients: {','.join(kafka_listens)}{free})"
        print(
            f"seglog local cluster: gateway on {address}{kafka}, storage nodes call {internal}",
            flush=True,
        )
        if etcd is not None:
            print(f"  registry in etcd at {etcd.endpoint} (pid {etcd.pid})", flush=True)
            adopted = switch.adopted()
            if adopted:
                print(f"  ({adopted})", flush=True)
        for node in nodes:
            print(f"  storage {node.name} on {node.address} (pid {node.pid})", flush=True)
        if store is not None:
            print(f"  tiered storage: S3 at {store.endpoint_url} (pid {store.pid})", flush=True)
        if kafka_listens and int(kafka_port) != 0:
            print(f"  Kafka brokers: {_node_brokers(kafka_listens, args.nodes)}", flush=True)
        if metrics_ports and metrics_ports[0] != 0:
            scraped = f"{metrics_ports[0]}-{metrics_ports[-1]}"
            print(f"  Prometheus endpoints on {host}:{scraped} (/metrics)", flush=True)
        print(
            f"  data in {data}/, logs in {data / 'logs'}/; Ctrl-C stops, "
            f"kill -HUP {os.getpid()} restarts dead nodes",
            flush=True,
        )
        if args.tls:
            tls = data / "tls"
            print(
                f"  mutual TLS: clients use a certificate from {tls}/ca.pem; the CLI with\n"
                f"    export {TLS_CA_ENV}={tls}/ca.pem {TLS_CERT_ENV}={tls}/admin.pem "
                f"{TLS_KEY_ENV}={tls}/admin.key",
                flush=True,
            )
        reported: set[str] = set()
        while "stop" not in received:
            time.sleep(0.2)
            if not any(gateway.alive() for gateway in gateways):
                print("gateway exited; stopping the cluster", file=sys.stderr, flush=True)
                break
            for node in nodes:
                if not node.alive() and node.name not in reported:
                    reported.add(node.name)
                    why = _why_not_started(node)
                    print(
                        f"{node.name} exited; the cluster goes on without it "
                        f"(kill -HUP {os.getpid()} restarts it)" + (f": {why}" if why else ""),
                        file=sys.stderr,
                        flush=True,
                    )
            if "restart" in received:
                received.discard("restart")
                for node in nodes:
                    if node.alive():
                        continue
                    try:
                        node.start()
                    except RuntimeError as exc:
                        print(f"restarting {node.name} failed: {exc}", file=sys.stderr)
                        continue
                    reported.discard(node.name)
                    print(f"  restarted {node.name} on {node.address}", flush=True)
    except RuntimeError as exc:
        print(f"seglog local cluster: {exc}", file=sys.stderr)
        for gateway in gateways:
            why = _why_not_started(gateway)
            if why:
                print(f"  {gateway.name}: {why}", file=sys.stderr)
            if "two registries" in why:
                print(f"  here: {switch.two_registries_fix()}", file=sys.stderr)
        return 1
    finally:
        stopping = [Stopping(p.name, p, p.stop, p.process is not None) for p in nodes + gateways]
        for name, other in (("etcd", etcd), ("S3 store", store)):
            if other is not None:
                stopping.append(Stopping(name, other, other.stop, other.process is not None))
        stop_in_order(stopping, sys.stdout)
    return 0


# Each server log's size when this run began: older runs' lines are not this run's reasons.
_LOG_STARTS: dict[Path, int] = {}


def _why_not_started(process: ServerProcess) -> str:
    """Why a server did not start or stopped on its own (a node refused by a registry of
    another cluster), as it logged it in this run; "" when it did not say."""
    path = process.stderr_path
    if process.process is None or path is None or not path.exists():
        return ""
    with open(path, "rb") as log:
        log.seek(_LOG_STARTS.get(path, 0))
        text = log.read().decode(errors="replace")
    for line in reversed(text.splitlines()[-50:]):
        for marker in ("cannot start:", "stopping:"):
            if " ERROR " in line and marker in line:
                return line.split(marker, 1)[1].strip()
    return ""


def _prometheus_ports(processes: int) -> list[int]:
    """Each process's scrape port (gateway first, then the nodes, then a second gateway),
    or none when metrics do not go to Prometheus: the standard variable names one port, and
    processes sharing a host cannot share it."""
    exporters = os.environ.get("OTEL_METRICS_EXPORTER", "").split(",")
    if "prometheus" not in [name.strip() for name in exporters]:
        return []
    base = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"))
    return [0 if base == 0 else base + i for i in range(processes)]


def _metrics_env(ports: list[int], host: str, index: int) -> dict[str, str]:
    if not ports:
        return {}
    return {
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(ports[index]),
        "OTEL_EXPORTER_PROMETHEUS_HOST": os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", host),
    }


def _wait_for_nodes(address: str, count: int, tls: Path | None, timeout_s: float = 60) -> None:
    """Until the gateway lists `count` registered nodes (said on stderr if they never do).
    Untraced: under OTEL_TRACES_EXPORTER=console its spans would come before the banner."""
    security = None
    if tls is not None:
        security = ClientSecurity(tls / "ca.pem", tls / "admin.pem", tls / "admin.key")
    channel = open_channel(
        with_default_port(address),
        credentials=None if security is None else security.channel_credentials(),
        server_name=tls_server_name(address),
    )
    stub = gateway_pb2_grpc.GatewayStub(channel)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                nodes = stub.DescribeCluster(gateway_pb2.DescribeClusterRequest(), timeout=5).nodes
            except grpc.RpcError:
                nodes = []  # the gateway is still starting
            if len(nodes) >= count:
                return
            if time.monotonic() > deadline:
                print(f"not every storage node registered within {timeout_s:g} s", file=sys.stderr)
                return
            time.sleep(0.05)
    finally:
        channel.close()


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _node_brokers(kafka_listens: list[str], nodes: int) -> str:
    """Each node's broker address at the first gateway (its Kafka port + the node id)."""
    host, port = kafka_listens[0].removeprefix("SSL://").rsplit(":", 1)
    return ", ".join(f"node {n} at {host}:{int(port) + n}" for n in range(1, nodes + 1))


if __name__ == "__main__":
    sys.exit(main())

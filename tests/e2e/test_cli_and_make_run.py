"""Real processes for what users meet first: the CLI under signals and pipes, `make run`
(a dead node, SIGHUP, a second run, console traces), the services' --help, and every command
of the README's first session."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devtools.processes import children
from seglog.client.admin import Admin
from seglog.client.consumer import Consumer
from tests.batches import make_batch
from tests.cluster import LocalCluster, local_cluster_command, run_cli
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
# What make run's own exit adds after the stop it measures (the interpreter's exit, the pipe).
STOP_SLACK_S = 1.0


@pytest.fixture
def in_process_cluster(tmp_path):
    cluster = LocalCluster(tmp_path, nodes=1)
    yield cluster
    cluster.close()


def test_sigterm_makes_a_cli_group_member_leave_and_a_closed_pipe_ends_quietly(
    in_process_cluster,
):
    # A CLI consumer in a group with a 60 s session: SIGTERM must make it leave at once, so
    # the other member gets every partition long before the session would have expired.
    cluster = in_process_cluster
    cluster.admin.create_topic("shared", 2)
    env = {**os.environ, "SEGLOG_BOOTSTRAP": cluster.address}
    member = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "seglog.cli.main",
            "consume",
            "shared",
            "--group",
            "g",
            "--property",
            "session.timeout.ms=60000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        with Consumer(
            cluster.address, group_id="g", session_timeout_ms=60000, heartbeat_interval_ms=100
        ) as other:
            other.subscribe(["shared"])

            def share(count):
                other.poll(timeout_ms=50)
                return len(other.assignment()) == count

            assert wait_until(lambda: share(1), timeout_s=30)  # one partition each
            member.send_signal(signal.SIGTERM)
            assert member.wait(timeout=20) == 0
            assert wait_until(lambda: share(2), timeout_s=15)  # not 60 s later
        assert b"Traceback" not in member.stderr.read()
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
    # `consume | head -1`: the reader goes away; the consumer ends quietly with status 0.
    cluster.client.produce("shared", {0: make_batch([b"line-%d" % i for i in range(500)])})
    piped = subprocess.run(
        f"{sys.executable} -m seglog.cli.main consume shared --from-beginning "
        "--max-messages 500 | head -1; echo status=${PIPESTATUS[0]} >&2",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert piped.stdout.count(b"\n") == 1
    assert b"status=0" in piped.stderr and b"Traceback" not in piped.stderr, piped.stderr
    assert b"Broken pipe" not in piped.stderr


def test_the_services_help_shows_each_flags_default():
    for module, expected in (
        ("services.gateway", "SEGLOG_SESSION_TIMEOUT_MS; default 9000"),
        ("services.storage_node", "SEGLOG_HEARTBEAT_INTERVAL_MS; default 2000"),
    ):
        shown = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "COLUMNS": "400"},
        )
        assert expected in shown.stdout, shown.stdout


def test_ctrl_c_on_make_run_stops_the_nodes_before_the_gateway_quietly(tmp_path):
    # A terminal's Ctrl-C is SIGINT to its whole foreground process group. When that reached
    # the gateway with the nodes, each node's controlled shutdown met a gateway already gone
    # and retried it until its 30 s timeout: 21-31 s, ~18 warnings a second per node (993 in
    # one stop). The servers are out of the group now; local_cluster stops nodes, then gateway.
    runner = subprocess.Popen(
        local_cluster_command(tmp_path / "data", nodes=3),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own, as a terminal's foreground job
    )
    try:
        address = re.search(r"gateway on (\S+)", runner.stdout.readline()).group(1)
        created = run_cli("topics", "create", "stopping", "--partitions", "6", bootstrap=address)
        assert created.returncode == 0, created.stderr
        # Whether the gateway went first was a race (0.3 s or 31 s): what decides it is that
        # no server shares the group the terminal signals.
        servers = children(runner.pid)
        assert len(servers) == 4, servers  # the gateway and three nodes
        assert all(os.getpgid(pid) != runner.pid for pid in servers)
        pressed = time.monotonic()
        os.killpg(runner.pid, signal.SIGINT)
        out, err = runner.communicate(timeout=90)
        waited_s = time.monotonic() - pressed
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert runner.returncode == 0, err
    assert "Traceback" not in err, err
    # One line per process as it stops, nodes before the gateway, each by the pid the banner
    # printed; then the whole stop's time, under 3 s (it took 21-31 s and printed nothing).
    stopped = re.findall(r"^stopping: (\S+) \(pid (\d+)\) stopped in [\d.]+ s$", out, re.M)
    assert [name for name, _pid in stopped] == ["node-1", "node-2", "node-3", "gateway"], out
    assert {int(pid) for _name, pid in stopped} == set(servers), (out, servers)
    said_s = float(re.search(r"^seglog local cluster stopped in ([\d.]+) s$", out, re.M)[1])
    assert said_s < 3.0 and waited_s < 3.0 + STOP_SLACK_S, (said_s, waited_s, out)
    for node in (1, 2, 3):
        log = (tmp_path / "data" / "logs" / f"node-{node}.log").read_text()
        assert "heartbeat to the gateway failed" not in log, (node, log[-3000:])
        assert "controlled shutdown did not finish" not in log, (node, log[-3000:])
    # A normal start, a topic and a stop warn of nothing in any process's log (every start
    # warned that each node was fenced, and the stop flooded warnings).
    for log in (tmp_path / "data" / "logs").glob("*.log"):
        loud = [
            line for line in log.read_text().splitlines() if re.search(r" (WARNING|ERROR) ", line)
        ]
        assert loud == [], (log.name, loud[:20])


def test_make_run_passes_kafka_port_and_nodes_through():
    # make run PORT=7080 met a 9092 already taken and could not be given another (issue 57).
    shown = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "run",
            "PORT=7080",
            "KAFKA_PORT=9192",
            "NODES=4",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "--listen 127.0.0.1:7080 --kafka-listen 127.0.0.1:9192" in shown.stdout, shown.stdout
    # docs/operations.md moves partitions onto a node 4, which a default make run lacks.
    assert "--nodes 4" in shown.stdout, shown.stdout


@pytest.mark.long  # a whole make run
@pytest.mark.slow
def test_make_run_survives_a_dead_node_restarts_it_on_sighup_and_refuses_a_second_run(
    tmp_path,
):
    errors = tmp_path / "cluster.err"
    with open(errors, "wb") as err:
        runner = subprocess.Popen(
            local_cluster_command(tmp_path / "data", nodes=2),
            stdout=subprocess.PIPE,
            stderr=err,
        )
    try:
        lines = [runner.stdout.readline().decode() for _ in range(3)]
        address = re.search(r"gateway on (\S+)", lines[0]).group(1)
        node_pid = int(re.search(r"node-1 on \S+ \(pid (\d+)\)", lines[1]).group(1))
        admin = Admin(address)
        assert wait_until(lambda: sum(n.live for n in admin.describe_cluster().nodes) == 2)
        os.kill(node_pid, signal.SIGKILL)
        assert wait_until(lambda: b"node-1 exited" in errors.read_bytes())
        assert runner.poll() is None  # still running, without node-1
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "devtools.local_cluster",
                "--data-dir",
                str(tmp_path / "other"),
                "--listen",
                address,
            ],
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 1 and b"already served" in second.stderr
        runner.send_signal(signal.SIGHUP)
        restarted = runner.stdout.readline().decode()
        while "data in" in restarted:  # the banner's last line
            restarted = runner.stdout.readline().decode()
        assert "restarted node-1" in restarted
        assert wait_until(
            lambda: {n.node_id for n in admin.describe_cluster().nodes if n.live} == {1, 2}
        )
        admin.close()
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=60)


def _quickstart_session() -> str:
    quickstart = (ROOT / "docs" / "quickstart.md").read_text()
    section = quickstart.split("## A first session", 1)[1]
    return section.split("```", 2)[1]


def readme_steps() -> list[tuple[list[str], str | None]]:
    """README's first session: each ```console block's commands (the `$ ` lines) and the
    output shown under them (None where the block is marked as varying). `make run` is left
    out: the test starts the cluster."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## A first session\n", 1)[1].split("\n## ", 1)[0]
    steps = []
    for marker, block in re.findall(
        r"(<!-- output varies[^>]*-->\s*)?```console\n(.*?)```", section, re.DOTALL
    ):
        lines = [line.removeprefix("   ") for line in block.rstrip(" \n").splitlines()]
        commands = [line[2:] for line in lines if line.startswith("$ ")]
        if commands == ["make run"]:
            continue
        output = "".join(f"{line}\n" for line in lines if not line.startswith("$ "))
        steps.append((commands, None if marker else output))
    return steps


def readme_python_snippets(heading: str, page: str) -> list[str]:
    """The ```python blocks of a docs/ page's section under `## heading`."""
    text = (ROOT / "docs" / page).read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def run_snippet(code: str, cluster: LocalCluster) -> str:
    """A README snippet as a user runs it after `make run`, pointed at this cluster: its
    stdout (it must succeed)."""
    code = code.replace("127.0.0.1:7070", cluster.address)
    code = code.replace("127.0.0.1:9092", cluster.kafka_address)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=120, check=False
    )
    assert result.returncode == 0, (code, result.stderr.decode()[-3000:])
    return result.stdout.decode()


@pytest.mark.long  # the docs' whole first session, 1M records
@pytest.mark.slow
def test_every_command_of_the_readmes_first_session_returns_in_order(tmp_path):
    # Against a fresh cluster, as written (the gateway's address through SEGLOG_BOOTSTRAP):
    # every command must succeed and return; a command that followed the log forever would
    # hit the timeout. Then the Clients and Kafka clients snippets, in the README's order on
    # the same cluster (after the session's `topics delete orders`), as a reader runs them.
    cluster = LocalCluster(tmp_path, nodes=3)
    try:
        # README's numbered steps first: each block's output as README shows it (stderr too,
        # as a terminal shows it), the Kafka port swapped for this cluster's.
        exports: list[str] = []  # a step's `export` holds for the steps after it, as in a shell
        for commands, shown in readme_steps():
            exports += [command for command in commands if command.startswith("export ")]
            script = "set -euo pipefail\n" + "\n".join([*exports, *commands])
            script = script.replace("127.0.0.1:9092", cluster.kafka_address)
            step = subprocess.run(
                ["bash", "-c", script],
                cwd=ROOT,
                env={**os.environ, "SEGLOG_BOOTSTRAP": cluster.address},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=120,
                check=False,
            )
            printed = step.stdout.decode()
            assert step.returncode == 0, (commands, printed[-3000:])
            if shown is not None:
                assert printed == shown, (commands, printed)
        script = "set -euo pipefail\n" + _quickstart_session()
        result = subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT,
            env={**os.environ, "SEGLOG_BOOTSTRAP": cluster.address},
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        out = result.stdout.decode()
        assert "Created topic orders." in out and "Deleted topic orders." in out
        assert "1000000 records sent" in out
        assert re.search(r"^100000\d records consumed", out, re.MULTILINE)
        # -e exits after each partition's last record (murmur2 puts all three keys in
        # partition 0); print.key puts the key first; --include reads the regex's topics.
        lines = out.splitlines()
        assert "alice\t3" in lines and "bob\t2" not in lines, out
        assert [line for line in lines if line.startswith("Partition:")] == [
            "Partition:0\t1",
            "Partition:0\t2",
            "Partition:0\t3",
        ]
        clients, kafka_python_shapes, admin = readme_python_snippets("Clients", "python-clients.md")
        printed = run_snippet(clients, cluster)
        assert "RecordMetadata(" in printed and "b'value'" in printed, printed
        printed = run_snippet(kafka_python_shapes, cluster)
        assert "now reading" in printed, printed
        run_snippet(admin, cluster)
        assert "invoices" in cluster.admin.list_topics()
        (kafka_clients,) = readme_python_snippets("Using Kafka clients", "kafka-clients.md")
        run_snippet(kafka_clients, cluster)
    finally:
        cluster.close()


@pytest.mark.long  # a whole make run
@pytest.mark.slow
def test_console_traces_show_under_make_run_and_for_the_cli(tmp_path):
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    runner = subprocess.Popen(
        local_cluster_command(tmp_path / "data", nodes=1),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    printed: list[bytes] = []
    try:
        # Spans of the starting processes may be printed before the line naming the gateway.
        address = ""
        for line in iter(runner.stdout.readline, b""):
            found = re.search(rb"gateway on (\S+)", line)
            if found:
                address = found.group(1).decode()
                break
            printed.append(line)
        assert address, b"".join(printed)[-2000:]
        threading.Thread(
            target=lambda: printed.extend(iter(runner.stdout.readline, b"")), daemon=True
        ).start()
        cli = subprocess.run(
            [sys.executable, "-m", "seglog.cli.main", "topics", "list"],
            env={**env, "SEGLOG_BOOTSTRAP": address},
            capture_output=True,
            timeout=60,
            check=True,
        )
        # The CLI's own client span, and the gateway's server span of the same trace.
        client_span = re.search(rb'"trace_id": "(0x[0-9a-f]+)"', cli.stdout)
        assert b"/seglog.v1.Gateway/ListTopics" in cli.stdout and client_span
        trace_id = client_span.group(1)
        assert wait_until(lambda: trace_id in b"".join(printed), timeout_s=30)
        assert b"/seglog.v1.Gateway/ListTopics" in b"".join(printed)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=60)


@pytest.mark.long  # a whole make run
@pytest.mark.slow
def test_the_local_cluster_with_tls_serves_certified_clients_only(tmp_path):
    runner = subprocess.Popen(
        local_cluster_command(tmp_path / "data", "--tls"), stdout=subprocess.PIPE, text=True
    )
    try:
        address = re.search(r"gateway on (\S+)", runner.stdout.readline()).group(1)
        exports = ""
        while "export" not in exports:
            exports = runner.stdout.readline()
        variables = dict(item.split("=", 1) for item in exports.split()[1:])
        env_backup = dict(os.environ)
        os.environ.update(variables)  # the CLI picks its certificate up from these
        try:
            assert run_cli("topics", "create", "sealed", bootstrap=address).returncode == 0
            produced = run_cli("produce", "sealed", bootstrap=address, stdin=b"a\nb\nc\n")
            assert produced.returncode == 0, produced.stderr
            out = run_cli(
                "consume", "sealed", "--from-beginning", "--max-messages", "3", bootstrap=address
            )
            assert out.returncode == 0 and out.stdout.count(b"\n") == 3, out.stderr
            # make run serves a first group at once, as Kafka's quickstart.
            configs = run_cli("configs", "describe", "--cluster", bootstrap=address)
            assert b"  group.initial.rebalance.delay.ms=0\n" in configs.stdout, configs.stdout
            # The CA but no client certificate: the mutual-TLS listener closes the socket.
            del os.environ["SEGLOG_TLS_CERT"], os.environ["SEGLOG_TLS_KEY"]
            no_certificate = run_cli("topics", "list", bootstrap=address)
            assert no_certificate.returncode == 1
            assert b"requires a client certificate" in no_certificate.stderr
        finally:
            os.environ.clear()
            os.environ.update(env_backup)
        refused = run_cli("topics", "list", bootstrap=address)  # no certificate: plaintext
        assert refused.returncode == 1 and b"UNAVAILABLE" in refused.stderr
        # gRPC says only "Socket closed": the error names the likely cause.
        assert b"plaintext client against a TLS listener" in refused.stderr, refused.stderr
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(60)

"""Real Apache Kafka beside seglog, for the tests and benchmarks that compare the two or drive
seglog with Kafka's own tools: the jars `make kafka` copies from Maven Central into
.cache/kafka/, Kafka's Java mains run from them, and `KafkaBrokers`, a KRaft broker set
(each process a combined broker and controller) on loopback ports with its own data
directory, waited on until every broker answers, stopped by its own pids.

    with KafkaBrokers(tmp_path, brokers=3) as kafka:
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap})
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from tests.ports import free_ports

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "kafka"
KAFKA_JARS = CACHE / "kafka"  # the broker, the CLI tools and the Java client (4.3.1)
SPARK_KAFKA_JARS = CACHE / "spark"  # spark-sql-kafka-0-10 and what Spark does not ship
STREAMS_JARS = CACHE / "streams"  # kafka-streams and what it adds to Kafka's client
INSTALL_HINT = "make kafka installs Apache Kafka's jars from Maven Central"

READY_TIMEOUT_S = 120.0  # three JVMs starting on two busy cores
STOP_GRACE_S = 20.0
HEAP = "-Xmx768m"

# Kafka's command-line tools, as the main classes their scripts run (Kafka 4.x).
TOPICS_TOOL = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS_TOOL = "org.apache.kafka.tools.GetOffsetShell"
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"

# Warnings and errors to stderr (a broker's log file): enough to tell why one did not start.
LOG4J2_PROPERTIES = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
"""


def installed() -> bool:
    """Whether `make kafka` has put Kafka's jars in the cache."""
    return any(KAFKA_JARS.glob("kafka_2.13-*.jar"))


def spark_kafka_installed() -> bool:
    return any(SPARK_KAFKA_JARS.glob("spark-sql-kafka-*.jar"))


def _kafka_jars() -> list[Path]:
    if not installed():
        raise RuntimeError(f"Apache Kafka's jars are not in {KAFKA_JARS}: {INSTALL_HINT}")
    return sorted(KAFKA_JARS.glob("*.jar"))


def kafka_classpath() -> str:
    return os.pathsep.join(str(jar) for jar in _kafka_jars())


def spark_kafka_jars() -> list[Path]:
    """The jars a SparkSession needs on `spark.jars` for format("kafka")."""
    if not spark_kafka_installed():
        raise RuntimeError(f"Spark's Kafka jars are not in {SPARK_KAFKA_JARS}: {INSTALL_HINT}")
    return sorted(SPARK_KAFKA_JARS.glob("*.jar"))


def streams_classpath() -> str:
    """Kafka's client jars, then Kafka Streams' (`make kafka-streams`): a Streams
    application's classpath, the client's own SLF4J binding first."""
    streams = sorted(STREAMS_JARS.glob("*.jar"))
    if not any(jar.name.startswith("kafka-streams-") for jar in streams):
        raise RuntimeError(f"Kafka Streams' jars are not in {STREAMS_JARS}: make kafka-streams")
    return os.pathsep.join([kafka_classpath(), *(str(jar) for jar in streams)])


def java_command(main_class: str, *args: str, jvm_options: Sequence[str] = ()) -> list[str]:
    """The command line running one of Kafka's Java mains from the cached jars."""
    return ["java", *jvm_options, "-cp", kafka_classpath(), main_class, *args]


def log4j2_config() -> Path:
    """A Log4j 2 configuration sending warnings and errors to stderr (Log4j's default prints
    errors to stdout, mixed into what a tool prints)."""
    path = Path(tempfile.gettempdir(), "seglog-kafka-log4j2.properties")
    if not path.exists() or path.read_text() != LOG4J2_PROPERTIES:
        path.write_text(LOG4J2_PROPERTIES)
    return path


# A tool runs a few seconds and exits, so the JVM's start is most of its cost (6-17 s of a test
# on two busy cores). C1 alone (no C2 compiling in the background) and the serial collector
# (no GC threads) cut a TopicCommand --list from 2.0 to 1.3 s of CPU; the tools' classes read
# from a class-data archive (CDS) instead of 90 jars cut it to 0.7 s (measured, 2 cores).
TOOL_JVM_OPTIONS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def tool_archive() -> Path:
    """Where the tools' class-data archive is kept: one per java binary and set of jars (each
    jar's path, size and mtime), since the JVM refuses an archive made with other jars or
    another JDK (silently here: the tools would run on without it), and `make kafka` copies
    the jars anew."""
    java = os.path.realpath(shutil.which("java") or "java")
    jars = [(str(jar), jar.stat().st_size, jar.stat().st_mtime_ns) for jar in _kafka_jars()]
    key = hashlib.sha256(repr((java, jars)).encode()).hexdigest()
    return CACHE / f"tools-{key[:16]}.jsa"


def _archive_options(archive: Path) -> tuple[tuple[str, ...], Path | None]:
    """The JVM options that use the archive, or that make it at this run's exit (written
    under a name of this process's own, then renamed into place: two test workers may make it
    at once); the JVM's own warnings (a refused archive) go to stderr, never into what the
    tool prints on stdout."""
    quiet = ("-Xlog:disable", "-Xlog:all=warning:stderr", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")
    if archive.exists():
        return (*quiet, f"-XX:SharedArchiveFile={archive}"), None
    making = archive.with_name(f"{archive.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    return (*quiet, f"-XX:ArchiveClassesAtExit={making}"), making


def run_tool(
    main_class: str,
    *args: str,
    stdin: bytes | None = None,
    timeout_s: float = 120.0,
) -> subprocess.CompletedProcess[bytes]:
    """One of Kafka's command-line tools run to its end: its CompletedProcess (not checked);
    stdout holds only what the tool itself prints."""
    archive = tool_archive()
    archive_options, making = _archive_options(archive)
    jvm_options = (
        *TOOL_JVM_OPTIONS,
        *archive_options,
        f"-Dlog4j2.configurationFile={log4j2_config()}",
    )
    try:
        done = subprocess.run(
            java_command(main_class, *args, jvm_options=jvm_options),
            input=stdin,
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except BaseException:
        if making is not None:  # killed at its deadline: perhaps half written
            making.unlink(missing_ok=True)
        raise
    if making is not None and making.exists():
        making.replace(archive)
    return done


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in unpadded URL-safe base64, as Kafka's Uuid —
    never starting with "-" (Kafka's Uuid.randomUuid draws again too): a command line would
    read it as an option (kafka-storage format failed so, one run in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaBrokers:
    """`brokers` Kafka processes, each broker and controller at once (KRaft combined mode),
    forming one cluster whose controller quorum is all of them. Internal topics are
    replicated to every broker (up to three); `configs` adds or overrides broker properties
    (e.g. {"min.insync.replicas": "2"})."""

    def __init__(
        self,
        root: Path,
        brokers: int = 1,
        *,
        configs: Mapping[str, str] | None = None,
        heap: str = HEAP,
    ) -> None:
        self.root = root
        self.count = brokers
        self.configs = dict(configs or {})
        self.heap = heap
        ports = free_ports(2 * brokers)
        self.ports, self.controller_ports = ports[:brokers], ports[brokers:]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def log_path(self, index: int) -> Path:
        return self.root / f"broker-{index + 1}.log"

    def _properties(self, index: int) -> dict[str, str]:
        node_id = index + 1
        replicas = str(min(3, self.count))
        voters = ",".join(
            f"{n + 1}@127.0.0.1:{port}" for n, port in enumerate(self.controller_ports)
        )
        return {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.ports[index]},"
                f"CONTROLLER://127.0.0.1:{self.controller_ports[index]}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.ports[index]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.root / f"broker-{node_id}"),
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": "1",
            "default.replication.factor": replicas,
            # Tests and benchmarks start consuming at once: no wait for more members.
            "group.initial.rebalance.delay.ms": "0",
            **self.configs,
        }

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> str:
        """Format each broker's storage, start them all, and wait until every one is in the
        cluster's metadata; returns the bootstrap list. Stops what it started if it fails."""
        self.root.mkdir(parents=True, exist_ok=True)
        jvm_options = [self.heap, f"-Dlog4j2.configurationFile={log4j2_config()}"]
        cluster_id = new_cluster_id()
        configs = [self.root / f"broker-{index + 1}.properties" for index in range(self.count)]
        for index, config in enumerate(configs):
            config.write_text(
                "".join(f"{key}={value}\n" for key, value in self._properties(index).items())
            )
        try:
            self._format(configs, cluster_id, jvm_options)
            for index, config in enumerate(configs):
                with open(self.log_path(index), "ab") as log:
                    self.processes.append(
                        subprocess.Popen(
                            java_command(BROKER_MAIN, str(config), jvm_options=jvm_options),
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        )
                    )
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def _format(self, configs: Sequence[Path], cluster_id: str, jvm_options: Sequence[str]) -> None:
        """Each broker's storage formatted for the cluster id, the JVMs side by side."""
        formats = [
            subprocess.Popen(
                java_command(
                    STORAGE_TOOL,
                    "format",
                    f"--cluster-id={cluster_id}",
                    "--config",
                    str(config),
                    "--ignore-formatted",
                    jvm_options=jvm_options,
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for config in configs
        ]
        failures = []
        for config, process in zip(configs, formats, strict=True):
            output, _ = process.communicate(timeout=120)
            if process.returncode != 0:
                failures.append(f"{config.name}: {output.decode(errors='replace')[-2000:]}")
        if failures:
            raise RuntimeError(f"formatting Kafka's storage failed: {'; '.join(failures)}")

    def _wait_ready(self, timeout_s: float) -> None:
        """Until Metadata from the first broker lists all of them (each registered with the
        controller quorum, so the cluster can place replicas on every one)."""
        import confluent_kafka.admin

        admin = confluent_kafka.admin.AdminClient(
            {"bootstrap.servers": self.bootstrap, "log_level": 0}
        )
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            for index, process in enumerate(self.processes):
                if process.poll() is not None:
                    raise RuntimeError(
                        f"Kafka broker {index + 1} exited ({process.returncode}): "
                        f"{self._log_tail(index)}"
                    )
            try:
                seen = len(admin.list_topics(timeout=1).brokers)
            except confluent_kafka.KafkaException:
                seen = 0
            if seen == self.count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{seen} of {self.count} Kafka brokers up after {timeout_s:.0f} s; "
                    f"see {self.log_path(0)}"
                )
            time.sleep(0.2)

    def _log_tail(self, index: int) -> str:
        try:
            return self.log_path(index).read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM to every broker at once (a broker shutting down alone can wait on a quorum
        that is shutting down too), then SIGKILL to any still running after `grace_s`."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes = []

    def __enter__(self) -> KafkaBrokers:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

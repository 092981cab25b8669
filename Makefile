# The README's commands. Every target that needs Python creates .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

PROTOS := $(wildcard proto/seglog/v1/*.proto)
GENERATED := libs/seglog/v1/.generated

.PHONY: docs kgo conformance test test-long test-unit test-integration fuzz-kafka bench bench-scale bench-latency bench-long-polls bench-compare bench-guard lint proto install run clean fault-campaign pipeline image image-smoke kafka kafka-streams

# The C sources by pattern (the extensions' units and headers), so a unit or header added or
# changed reinstalls, and a copy of the tree holding only some of them still makes.
# Python 3.11 or newer, said at once; a .venv whose last install did not finish (no stamp) or
# whose interpreter no longer runs is removed and built again rather than reused.
$(STAMP): pyproject.toml $(wildcard libs/seglog/records/*.c libs/seglog/records/*.h)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "seglog needs Python 3.11 or newer; $(PYTHON) is $$($(PYTHON) --version 2>&1)." \
			"Run: make PYTHON=python3.11 ..." >&2; exit 1; }
	@if [ -d $(VENV) ] && { [ ! -e $(STAMP) ] || ! $(BIN)/python -c '' 2>/dev/null; }; then \
		echo "removing $(VENV): its last install did not finish or it no longer runs" >&2; \
		rm -rf $(VENV); fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==24.3.1
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@# The editable install maps packages through an import hook that module listings do not
	@# see; Spark finds data sources by listing modules (pyspark_seglog), so libs/ also goes
	@# on the path, as a wheel install puts it there.
	$(BIN)/python -c 'import pathlib, site; pathlib.Path(site.getsitepackages()[0], "seglog-libs.pth").write_text(str(pathlib.Path("libs").resolve()) + "\n")'
	touch $(STAMP)

install: $(STAMP)

# Generated code goes to libs/seglog/v1 (package seglog.v1), never edited, never committed.
$(GENERATED): $(STAMP) $(PROTOS)
	rm -rf libs/seglog/v1
	mkdir -p libs/seglog/v1
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=libs --pyi_out=libs \
		--grpc_python_out=libs $(PROTOS)
	touch libs/seglog/v1/__init__.py $(GENERATED)

proto: $(GENERATED)

# A local cluster: gateway on 127.0.0.1:7070 and three storage nodes, data under ./data.
# make run PORT=7080 KAFKA_PORT=9192 DATA_DIR=/tmp/seglog-data NODES=4 (KAFKA_PORT: the Kafka
# listener, 9092 unless given; node N's broker on KAFKA_PORT + N; NODES: storage nodes, 3
# unless given, so docs/operations.md's moves onto a node 4 have one to go to)
PORT ?= 7070
DATA_DIR ?= data
run: $(STAMP) proto
	$(BIN)/python -m devtools.local_cluster --data-dir $(DATA_DIR) --listen 127.0.0.1:$(PORT) $(if $(KAFKA_PORT),--kafka-listen 127.0.0.1:$(KAFKA_PORT)) $(if $(NODES),--nodes $(NODES)) $(if $(filter 1,$(TLS)),--tls) $(if $(filter 1,$(ETCD)),--etcd) $(if $(filter 1,$(TIERED)),--tiered)

# Apache Kafka beside seglog (devtools/apache_kafka.py): the broker, its CLI tools and Java
# client, and Spark's Kafka connector, from Maven Central into .cache/kafka/ (the poms under
# devtools/maven/ pin the versions; Maven and Java from Debian's packages when missing and we
# are root); kcat from Debian's packages likewise. The tests that need the jars or kcat skip,
# naming this target, without them.
KAFKA_CACHE := .cache/kafka
KAFKA_STAMP := $(KAFKA_CACHE)/.installed
MAVEN_IF_MISSING = if ! command -v mvn > /dev/null && [ "$$(id -u)" -eq 0 ]; then \
		env DEBIAN_FRONTEND=noninteractive apt-get update -q > /dev/null && \
		env DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven > /dev/null; fi
$(KAFKA_STAMP): devtools/maven/kafka.pom.xml devtools/maven/spark-kafka.pom.xml
	@$(MAVEN_IF_MISSING)
	rm -rf $(KAFKA_CACHE)/kafka $(KAFKA_CACHE)/spark
	mvn -q -B -f devtools/maven/kafka.pom.xml dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA_CACHE)/kafka
	mvn -q -B -f devtools/maven/spark-kafka.pom.xml dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA_CACHE)/spark
	touch $(KAFKA_STAMP)

# Kafka Streams for the exactly_once_v2 word count (tests/java/WordCountEos.java): its own pom
# and directory, .cache/kafka/streams/, so the jars above stay as they are.
STREAMS_STAMP := $(KAFKA_CACHE)/streams/.installed
$(STREAMS_STAMP): devtools/maven/kafka-streams.pom.xml
	@$(MAVEN_IF_MISSING)
	rm -rf $(KAFKA_CACHE)/streams
	mvn -q -B -f devtools/maven/kafka-streams.pom.xml dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA_CACHE)/streams
	touch $(STREAMS_STAMP)

kafka-streams: $(STREAMS_STAMP)

kafka: $(KAFKA_STAMP) $(STREAMS_STAMP)
	@if ! command -v kcat > /dev/null; then \
		if [ "$$(id -u)" -eq 0 ]; then \
			env DEBIAN_FRONTEND=noninteractive apt-get update -q > /dev/null && \
			env DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat > /dev/null; \
		else echo "kcat is missing: install Debian's kcat package (its tests need it)" >&2; \
			exit 1; fi; fi

# franz-go's kgo tests, the version devtools/conformance_go/go.mod pins: the module from the Go
# module proxy into .cache/go (Go's caches there too), its test binary built once into
# .cache/conformance/ (a few minutes the first time on 2 cores). The suite's fast subset
# (tests/conformance) skips, naming this target, without it; CI makes it before the suite.
kgo: $(STAMP)
	$(BIN)/python -c 'from devtools import conformance_kgo; conformance_kgo.build()'

# franz-go's kgo integration tests against seglog (make run's cluster) and Apache Kafka (three
# brokers), side by side: a table, and exit 1 if seglog fails a test Kafka passes that is not
# expected to fail (devtools/conformance.py lists those, each with its issue). TESTS= a regex,
# RECORDS= for the ETL tests (10000), JOBS= tests at once (2).
conformance: $(STAMP) proto kafka kgo
	$(BIN)/python -m devtools.conformance $(if $(TESTS),--tests '$(TESTS)') \
		$(if $(RECORDS),--records $(RECORDS)) $(if $(JOBS),--jobs $(JOBS))

# Three workers: the suite spends most of its time waiting on the clusters and JVMs it starts
# (two workers kept two cores 54% busy: 17 CPU-minutes in a 15.8-minute CI run), so a third
# fills the gaps. A file's tests stay in one worker (--dist loadfile), sharing its module
# fixtures. TEST_WORKERS=0 runs it in one process.
# Tests marked `long` (campaigns, benchmarks' runs, whole `make run`s) are make test-long's:
# every test is in exactly one of the two (tests/unit/test_test_targets.py), CI runs both.
TEST_WORKERS ?= 3
# The campaigns time faults against the clusters' own timeouts: two at once, as measured.
LONG_TEST_WORKERS ?= 2
test: $(STAMP) proto kafka kgo
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m 'not long' tests

# The fault campaign, the acknowledged-writes campaigns, the benchmarks' runs at a tiny size,
# whole `make run`s (SIGHUP, TLS, traces, monitoring, locked etcd, the docs' first session,
# registry switches) and power cuts: what make test leaves out to stay within its 10 minutes.
test-long: $(STAMP) proto kafka
	$(BIN)/python -m pytest -q -n $(LONG_TEST_WORKERS) --dist loadfile -m long tests

# The inner loop: rules and single components on real files, no cluster started.
test-unit: $(STAMP) proto
	$(BIN)/python -m pytest -q tests/unit

# Real gateways and storage nodes on loopback. Tests marked slow take more than ~5 s each;
# `$(BIN)/python -m pytest -m 'not slow' tests/integration` leaves them out.
test-integration: $(STAMP) proto kafka
	$(BIN)/python -m pytest -q tests/integration

# `make bench GROUP...` runs the groups named (`make bench kafka-protocol`), every group when
# none is; the group names are goals that do nothing themselves.
BENCH_GROUPS := engine services clients consumer security bulk replication metrics registry \
	spark scale kafka-protocol latency long-polls kafka-flood transactions groups tiered
bench: $(STAMP) proto kafka
	$(BIN)/python -m bench $(filter $(BENCH_GROUPS),$(MAKECMDGOALS))

ifneq ($(filter bench,$(MAKECMDGOALS)),)
.PHONY: $(filter $(BENCH_GROUPS),$(MAKECMDGOALS))
$(filter $(BENCH_GROUPS),$(MAKECMDGOALS)):
	@:
endif

# `make bench` writes its ratios to bench/out/ratios.json. `make bench-compare` runs the quick
# groups (bench/guard.py: the engine group at a quarter of its sizes, about a minute) and
# prints every ratio that fell by more than 15% from bench/baseline.json; `make bench-guard`,
# CI's, fails only on a fall past 40% in both of two runs. After a change that moves a figure
# on purpose: `$(BIN)/python -m bench.guard --write-baseline --runs 3`, committed with it.
bench-compare: $(STAMP) proto
	$(BIN)/python -m bench.guard --threshold 0.15

bench-guard: $(STAMP) proto
	$(BIN)/python -m bench.guard --threshold 0.40 --runs 2

# the `latency` group of `make bench` alone (about 6 minutes; Apache Kafka as its baseline).
bench-latency: $(STAMP) proto kafka
	$(BIN)/python -m bench latency

# the `long-polls` group of `make bench` alone: issue 31's 200 long polls of 500 partitions
# vs one produce (about a minute).
bench-long-polls: $(STAMP) proto
	$(BIN)/python -m bench long-polls

# The control plane at 1,000 to 10,000 partitions on three nodes (file and etcd registries):
# the `scale` group of `make bench` alone.
bench-scale: $(STAMP) proto
	$(BIN)/python -m bench scale

# A longer fault campaign than the suite's (CYCLES=, SEED= to repeat one, FAULTS= a comma list
# of fault names, PRODUCER=idempotent|plain|acks1, ETCD=1 for two gateways on etcd,
# WORKLOAD=transactions for librdkafka's transactional producers and read_committed readers
# judged for Jepsen's transactional anomalies, SHARE=N share group members, TIERED=1 for a
# SeaweedFS store beside the cluster, a topic tiered to it, read from offset 0, and the store's
# own faults: killed, slow, answering 503, WORKLOAD=streams for Kafka Streams' exactly-once
# word count, two instances of two threads, judged for exact counts): client processes record
# their histories
# while nodes, gateways (and etcd) are killed, paused and stopped (and, as root,
# partitioned); prints cycles, faults by class, what the clients saw and the history
# checker's counts, its verdict the exit code.
CYCLES ?= 40
PRODUCER ?= idempotent
WORKLOAD ?= records
fault-campaign: $(STAMP) proto
	$(BIN)/python -m tests.fault_campaign --cycles $(CYCLES) $(if $(SEED),--seed $(SEED)) \
		$(if $(FAULTS),--faults $(FAULTS)) --producer $(PRODUCER) $(if $(ETCD),--etcd) \
		$(if $(SHARE),--share-members $(SHARE)) $(if $(filter 1,$(TIERED)),--tiered) \
		--workload $(WORKLOAD)

# The Kafka-protocol fuzz test at depth: EXAMPLES= requests per advertised API (`make test`
# runs 10; 100 took 4 minutes on two cores, both authorizer modes), every Produce frame
# mutation six times as many, queued frames three times. Derandomized: the same EXAMPLES finds
# the same failures again; at the end, how far the requests of each api got (closed, or the
# answers' error codes).
EXAMPLES ?= 100
fuzz-kafka: $(STAMP) proto
	SEGLOG_KAFKA_FUZZ_EXAMPLES=$(EXAMPLES) SEGLOG_KAFKA_FUZZ_REPORT=1 $(BIN)/python -m pytest -q -n 0 -s \
		tests/integration/test_kafka_fuzz.py

# The Spark page-view pipeline (pipelines/pageviews) against make run's cluster; EVENTS= to
# produce more or fewer, LOCAL_CLUSTER=1 to start a cluster of its own for the run.
EVENTS ?= 20000
pipeline: $(STAMP) proto
	$(BIN)/python -m pipelines.pageviews --bootstrap 127.0.0.1:$(PORT) --events $(EVENTS) \
		$(if $(filter 1,$(LOCAL_CLUSTER)),--local-cluster)

# The container image (Dockerfile) with podman or docker: IMAGE= its tag, BASE_IMAGE= its
# base, LOCAL_BASE=1 a base made here with debootstrap (no registry needed).
IMAGE ?= localhost/seglog:dev
image:
	IMAGE=$(IMAGE) deploy/container/build-image

# The image run for real: a gateway and three nodes as containers, produce/consume from here,
# a node killed and restarted on its volume (tests/container_smoke.py); then the dev
# overlay's manifests through podman kube play (tests/kube_play_smoke.py). CI runs it.
image-smoke: image $(STAMP) proto
	$(BIN)/python -m tests.container_smoke --image $(IMAGE)
	$(BIN)/python -m tests.kube_play_smoke --image $(IMAGE)

# The docs as a static site (mkdocs, into site/), the reference pages checked against the code
# first (python -m devtools.readme_tables rewrites them), then every page loaded in Debian's
# headless Chromium: rendering, script errors, broken
# links and anchors (devtools/docs_check.py). Chromium from Debian's packages when missing and
# we are root.
docs: $(STAMP) proto
	@if ! command -v chromium > /dev/null && [ "$$(id -u)" -eq 0 ]; then \
		env DEBIAN_FRONTEND=noninteractive apt-get update -q > /dev/null && \
		env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium > /dev/null; fi
	$(BIN)/python -m devtools.readme_tables --check
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m devtools.docs_check site

lint: $(STAMP) proto
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info libs/*.egg-info libs/seglog/v1 libs/seglog/records/*.so

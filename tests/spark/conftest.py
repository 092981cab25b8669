"""One local SparkSession (local[2]) and one cluster for every Spark test: starting Spark
costs about ten seconds, so the session is shared; each test uses its own topics."""

from __future__ import annotations

import itertools

import pytest

from devtools import apache_kafka
from seglog.spark.session import local_session
from tests.cluster import LocalCluster

_names = itertools.count()


@pytest.fixture(scope="session")
def spark():
    # Not registered by hand: installing seglog registers the format (pyspark_seglog).
    # Spark's own Kafka source too when `make kafka` installed it (test_kafka_source.py): jars
    # are loaded only as the one shared session starts.
    conf = {
        # Test data is kilobytes: one shuffle partition is one task per shuffle (a stateful
        # stream's state store too) instead of two, and adaptive execution's re-planning
        # after each shuffle stage has nothing to coalesce or split at these sizes.
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.adaptive.enabled": "false",
    }
    if apache_kafka.spark_kafka_installed():
        conf["spark.jars"] = ",".join(str(jar) for jar in apache_kafka.spark_kafka_jars())
    session = local_session("seglog-tests", **conf)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(spark, tmp_path_factory):
    # Started after Spark, so Spark's fork of its JVM does not meet gRPC's threads.
    cluster = LocalCluster(tmp_path_factory.mktemp("spark-cluster"), nodes=3)
    yield cluster
    cluster.close()


@pytest.fixture
def topic_name():
    return f"spark-{next(_names)}"

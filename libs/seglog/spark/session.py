"""A local SparkSession set up as seglog's pipelines, tests and benchmarks want it (SPARK.md):
Python workers on this interpreter (the one with seglog and pyarrow), UTC everywhere (Spark
hands timestamps back in the process's zone), no UI, quiet logs, so a job's own output stays
readable, and the Python workers' timeouts that a busy machine overruns raised."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .worker_start import SETTINGS

# Spark's loggers that print at start-up whatever the root level says.
_QUIET_LOG4J = """\
status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.context.name = org.apache.spark.SparkContext
logger.context.level = error
# A failed streaming query's error reaches Python (awaitTermination raises it); logged here as
# well, it printed a hundred lines of Java stack before the pipeline's own message.
logger.microbatch.name = org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution
logger.microbatch.level = off
"""


def local_session(app_name: str = "seglog", *, master: str = "local[2]", **conf: str) -> Any:
    """A SparkSession on this machine; `conf` adds or overrides Spark settings."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["TZ"] = "UTC"
    time.tzset()
    from pyspark.sql import SparkSession

    log4j = Path(tempfile.gettempdir(), "seglog-spark-log4j2.properties")
    if not log4j.exists() or log4j.read_text() != _QUIET_LOG4J:
        log4j.write_text(_QUIET_LOG4J)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
    )
    # Python workers' timeouts raised for a busy machine (worker_start.py says which matter).
    for key, value in {**SETTINGS, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

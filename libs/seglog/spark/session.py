"""A local SparkSession set up as seglog's pipelines, tests and benchmarks want it (SPARK.md):
Python workers on this interpreter (the one with seglog and pyarrow), UTC everywhere (Spark
hands timestamps back in the process's zone), no UI, and quiet logs, so a job's own output
stays readable."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

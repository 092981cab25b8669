"""Spark's Python workers on a busy machine: which of their start-up limits can be set, which
cannot, and the error a user can act on when the one that cannot be set runs out.

Spark starts a Python process for each piece of Python it runs. Most come from its worker
daemon (a fork, waited on for 60 s, retried once). A Python *streaming* data source's runner
(seglog's `readStream.format("seglog")`) does not: Spark 4.3 starts it as a fresh interpreter
(PythonStreamingSourceRunner -> PythonWorkerFactory.createSimpleWorker) and waits a fixed
10 s for it to connect back, a limit no setting changes. Importing pyspark took 11.1 s on a
loaded two-core machine, and the query failed with "Python worker failed to connect back."
and a hundred lines of Java stack. A restart from the query's checkpoint loses nothing (the
runner failed before any batch was planned), so the pipeline retries; when retries run out,
`explain` says what happened and what to do.

The limits that can be set are raised in SETTINGS (local_session applies them)."""

from __future__ import annotations

import os

# Spark's own wording, from PythonWorkerFactory: the SparkException's message, and its
# cause's (the SocketTimeoutException), either of which a caught error's text carries.
_WORKER_DID_NOT_CONNECT = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)
# createSimpleWorker's fixed wait (a constant in Spark 4.3's bytecode, not a configuration).
FIXED_CONNECT_BACK_S = 10

SETTINGS = {
    # How long Python waits on its sockets to the JVM (pyspark's SPARK_AUTH_SOCKET_TIMEOUT,
    # read from this): the driver's collect()/toPandas() reads, and every worker's
    # connect-and-authenticate. 15 s by default, the order of the import that overran 10 s.
    "spark.python.authenticate.socketTimeout": "120s",
}
# Not raised: spark.network.timeout (120 s). It bounds the JVM's RPC asks, stopping a session
# among them: at 600 s a session's stop on a machine at load 30 waited past pytest's 300 s.


def worker_did_not_connect(error: BaseException) -> bool:
    """Whether `error` (a StreamingQueryException, a Py4JJavaError, ...) is Spark giving up
    on a Python worker that did not connect back in time."""
    text = str(error)
    return any(said in text for said in _WORKER_DID_NOT_CONNECT)


def _load() -> str:
    try:
        one_minute = os.getloadavg()[0]
    except OSError:
        return "its load unknown"
    return f"load average {one_minute:.1f} on {os.cpu_count() or 1} cores"


def explain(attempts: int) -> str:
    """What to tell the user once `attempts` starts of the stream all met the fixed limit."""
    return (
        f"Spark's Python worker for the streaming source did not start within Spark's fixed "
        f"{FIXED_CONNECT_BACK_S} s ({attempts} attempt{'s' * (attempts != 1)}): this machine is "
        f"too busy to start a Python interpreter in time ({_load()}). Nothing is lost: run "
        f"it again when the load is lower; the stream resumes from its checkpoint. (Spark's "
        f"streaming sources start their worker outside its daemon; no setting changes the "
        f"{FIXED_CONNECT_BACK_S} s.)"
    )


def retrying(attempt: int, attempts: int) -> str:
    """The line printed before attempt `attempt` (2..attempts) of the stream."""
    return (
        f"Spark's Python worker did not start within its fixed {FIXED_CONNECT_BACK_S} s "
        f"({_load()}); starting the stream again from its checkpoint "
        f"(attempt {attempt} of {attempts})"
    )


class WorkerStartTimedOut(RuntimeError):
    """The stream's Python worker never connected back; the message says what to do."""

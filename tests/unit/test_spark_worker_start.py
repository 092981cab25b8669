"""Spark's Python worker start on a busy machine (seglog.spark.worker_start): the error Spark
raises is recognised in the forms it reaches Python in, and what the user reads names the
fixed limit, the load and what to do. (The pipeline meeting the limit for real:
tests/spark/test_pipeline_under_load.py.)"""

from __future__ import annotations

from seglog.spark.worker_start import explain, retrying, worker_did_not_connect

# As a StreamingQueryException carried it when `make pipeline` failed under load.
SEEN = (
    "[STREAM_FAILED] Query [id = 0d0b, runId = 5771] terminated with exception: Python worker "
    "failed to connect back. SQLSTATE: XXKST"
)


def test_spark_giving_up_on_a_worker_is_recognised_and_nothing_else():
    assert worker_did_not_connect(RuntimeError(SEEN))
    cause = "java.net.SocketTimeoutException: Timed out while waiting for the Python worker to "
    assert worker_did_not_connect(RuntimeError(cause + "connect back"))
    assert not worker_did_not_connect(RuntimeError("[STREAM_FAILED] ... UNKNOWN_TOPIC"))


def test_what_the_user_reads_names_the_limit_the_load_and_what_to_do():
    said = explain(3)
    assert "fixed 10 s" in said and "3 attempts" in said and "load average" in said
    assert "resumes from its checkpoint" in said and "Traceback" not in said
    assert "attempt 2 of 3" in retrying(2, 3)

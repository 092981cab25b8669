"""Run the page-view pipeline end to end and print what it produced:

    python -m pipelines.pageviews [--bootstrap 127.0.0.1:7070] [--events 20000]
    python -m pipelines.pageviews --local-cluster      # starts its own cluster in a temp dir

1. creates the topics and produces `--events` page views (JSON, keyed by user);
2. runs the streaming job (seglog source -> windows with a watermark -> seglog topic and
   Parquet) until it has read everything the topic holds (availableNow);
3. runs the backfill (a batch read of a time range) and prints both results.
Running it again produces more events; the streaming job resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from seglog.client.gateway import default_bootstrap
from seglog.spark.worker_start import WorkerStartTimedOut

from .events import page_views

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: event times start here


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.pageviews",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bootstrap", default=default_bootstrap())
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("data/pipelines/pageviews"),
        help="checkpoint and Parquet output (default: %(default)s)",
    )
    parser.add_argument(
        "--local-cluster",
        action="store_true",
        help="start a local cluster (make run's) in a temp dir for this run",
    )
    parser.add_argument(
        "--stream-attempts",
        type=int,
        default=3,
        help="starts of the streaming job when Spark's Python worker misses Spark's fixed 10 s "
        "on a busy machine (each resumes from the checkpoint; default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.stream_attempts < 1:
        parser.error("--stream-attempts must be at least 1")
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap
        if args.local_cluster:
            bootstrap = stack.enter_context(_local_cluster())
        elif not _reachable(bootstrap):
            print(
                f"no seglog gateway answers at {bootstrap}: start one with `make run` in "
                "another terminal, or pass --local-cluster",
                file=sys.stderr,
            )
            return 2
        try:
            run(bootstrap, args.workdir, args.events, args.stream_attempts)
        except WorkerStartTimedOut as exc:
            print(f"make pipeline: {exc}", file=sys.stderr)
            return 1
    return 0


def run(bootstrap: str, workdir: Path, events: int, stream_attempts: int = 3) -> None:
    from seglog.spark.session import local_session

    from .jobs import Topics, backfill, create_topics, produce_events, run_stream

    workdir.mkdir(parents=True, exist_ok=True)
    topics = Topics()
    spark = local_session("pageviews")
    try:
        create_topics(bootstrap, topics)
        already = _events_so_far(bootstrap, topics.events)
        batch = list(page_views(events, start_ms=START_MS + already * 200, seed=already + 1))
        began = time.monotonic()
        produce_events(bootstrap, topics.events, batch)
        print(
            f"produced {len(batch)} page views into {topics.events} "
            f"in {time.monotonic() - began:.1f} s"
        )

        began = time.monotonic()
        query = run_stream(
            spark,
            bootstrap,
            topics,
            workdir,
            max_per_trigger=max(events // 4, 1),
            attempts=stream_attempts,
        )
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        rows = sum(p["numInputRows"] for p in progress)
        print(
            f"streaming job: {rows} events in {len(progress)} micro-batches, "
            f"{time.monotonic() - began:.1f} s; closed windows written to "
            f"{topics.per_minute} and {workdir / 'per_minute.parquet'}"
        )
        written = spark.read.parquet(str(workdir / "per_minute.parquet"))
        written.orderBy("window", "page").select(
            "window.start", "page", "views", "approx_users", "total_duration_ms"
        ).show(12, truncate=False)

        end_ms = START_MS + (already + events) * 200
        figures = backfill(spark, bootstrap, topics.events, START_MS, end_ms)
        print(
            f"backfill of the topic's first {(end_ms - START_MS) // 60_000} minutes "
            "(every window, late events included):"
        )
        figures.groupBy("page").sum("views").withColumnRenamed("sum(views)", "views").orderBy(
            "views", ascending=False
        ).show(truncate=False)
    finally:
        spark.stop()


def _events_so_far(bootstrap: str, topic: str) -> int:
    from seglog.client import LATEST, Admin, TopicPartition

    with Admin(bootstrap) as admin:
        partitions = len(admin.describe_topic(topic).partitions)
        ends = admin.list_offsets({TopicPartition(topic, p): LATEST for p in range(partitions)})
        return sum(r.offset for r in ends.values())


def _reachable(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port or 7070)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def _local_cluster() -> Iterator[str]:
    """make run's cluster on a free port in a temp dir, stopped (by its pid) afterwards."""
    with tempfile.TemporaryDirectory(prefix="seglog-pipeline-") as data_dir:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        bootstrap = f"127.0.0.1:{port}"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "devtools.local_cluster",
                "--data-dir",
                data_dir,
                "--listen",
                bootstrap,
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while not _reachable(bootstrap):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the local cluster did not start")
                time.sleep(0.2)
            yield bootstrap
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    sys.exit(main())

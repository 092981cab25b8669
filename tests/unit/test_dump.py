"""`seglog dump` (Kafka's DumpLogSegments) on a live segment's files."""

import io
import json

from seglog.cli.dump import dump
from seglog.cli.main import main
from seglog.storage import Log, LogConfig
from tests.batches import make_batch


def test_verify_stops_at_the_first_unused_slot_of_a_preallocated_index(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=100))
    for i in range(20):
        log.append(make_batch([b"%d" % i * 40], timestamp_ms=now_ms + i))
    segment = log.active_segment
    used = segment.offset_index.entries
    assert used > 1
    # The active segment's indexes are still preallocated: most of each file is zeros.
    assert segment.offset_index.path.stat().st_size > used * 8
    for path, entries in (
        (segment.offset_index.path, used),
        (segment.time_index.path, segment.time_index.entries),
    ):
        out = io.StringIO()
        assert dump([str(path)], records=False, verify=True, as_json=True, out=out) == 0
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        assert len(lines) == entries and all(line["valid"] for line in lines)
    log.close()


def test_verify_reports_an_entry_that_points_inside_a_batch(tmp_path, now_ms):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=100))
    for i in range(20):
        log.append(make_batch([b"%d" % i * 40], timestamp_ms=now_ms + i))
    log.close()
    index_path = next((tmp_path / "t-0").glob("*.index"))
    data = bytearray(index_path.read_bytes())
    data[4:8] = (int.from_bytes(data[4:8], "big") + 1).to_bytes(4, "big")  # position + 1
    index_path.write_bytes(bytes(data))
    out = io.StringIO()
    assert dump([str(index_path)], records=False, verify=True, as_json=True, out=out) == 1
    first = json.loads(out.getvalue().splitlines()[0])
    assert first["valid"] is False and "no batch starts" in first["problem"]


def test_dump_finds_a_topics_partitions_under_a_cluster_data_dir(tmp_path, now_ms, capsys):
    for node, partition in (("node-1", 0), ("node-2", 1)):
        log = Log.open(tmp_path / node / f"orders-{partition}", LogConfig())
        log.append(make_batch([b"p%d" % partition], timestamp_ms=now_ms))
        log.close()
    Log.open(tmp_path / "node-1" / "orders-eu-0", LogConfig()).close()  # another topic
    assert main(["dump", "--topic", "orders", "--data-dir", str(tmp_path), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(line["file"].split("/")[-2] for line in lines) == ["orders-0", "orders-1"]
    assert (
        main(
            [
                "dump",
                "--topic",
                "orders",
                "--partition",
                "1",
                "--verify",
                "--data-dir",
                str(tmp_path),
                "--json",
            ]
        )
        == 0
    )
    files = {
        json.loads(line)["file"].rsplit(".", 1)[1] for line in capsys.readouterr().out.splitlines()
    }
    assert files <= {"log", "index", "timeindex"} and "log" in files
    assert main(["dump", "--topic", "missing", "--data-dir", str(tmp_path)]) == 1
    assert "no missing-* partition directory" in capsys.readouterr().err

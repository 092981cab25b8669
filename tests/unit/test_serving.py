import json
import subprocess
import sys
import textwrap

_WORKLOAD = textwrap.dedent(
    """
    import json, os, resource, sys
    from services.serving import keep_freed_buffers_for_reuse
    tuned = keep_freed_buffers_for_reuse() if sys.argv[1] == "tuned" else None
    payload = os.urandom(8 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):  # request-sized buffers, allocated and freed as a server does
        for size in (1 << 20, 4 << 20, 8 << 20):
            buffer = bytearray(payload[:size])
            del buffer
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(json.dumps({"tuned": tuned, "faults": faults}))
    """
)


def _run(mode):
    out = subprocess.run(
        [sys.executable, "-c", _WORKLOAD, mode], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_servers_keep_freed_large_buffers_instead_of_faulting_fresh_pages_per_request():
    default, tuned = _run("default"), _run("tuned")
    assert tuned["tuned"] is True  # glibc: the options were taken
    # 300 buffers of 1-8 MiB: by default most are fresh pages again; tuned, the pages of
    # the first ones are reused (about 8 MiB of faults: 2048 pages, plus the copies' source).
    assert tuned["faults"] < default["faults"] / 2, (default, tuned)
    assert tuned["faults"] < 4 * 2048, tuned

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


def test_a_method_given_its_own_pool_runs_there_and_the_others_on_the_servers_pool():
    """A real gRPC server on loopback: the streaming method named in method_threads runs on
    its own threads; a unary method still runs on the server's `rpc` threads."""
    import threading

    import grpc

    from services.serving import build_server

    def thread_name(request: bytes, context: grpc.ServicerContext) -> bytes:
        return threading.current_thread().name.encode()

    def thread_names(request: bytes, context: grpc.ServicerContext):  # type: ignore[no-untyped-def]
        yield threading.current_thread().name.encode()

    handlers = grpc.method_handlers_generic_handler(
        "test.Pools",
        {
            "Unary": grpc.unary_unary_rpc_method_handler(thread_name),
            "Stream": grpc.unary_stream_rpc_method_handler(thread_names),
        },
    )
    server, _, port = build_server(
        "127.0.0.1:0", [handlers], ["test.Pools"], method_threads={"/test.Pools/Stream": 2}
    )
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            unary = channel.unary_unary("/test.Pools/Unary")(b"", timeout=10)
            [streamed] = list(channel.unary_stream("/test.Pools/Stream")(b"", timeout=10))
    finally:
        server.stop(0)
    assert unary.startswith(b"rpc"), unary
    assert streamed.startswith(b"stream"), streamed

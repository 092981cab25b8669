"""seglog's clients label every gRPC call with their client id (Kafka's client.id), the
`client-id` metadata the gateway's quotas read: unary and streaming calls alike, beside the
call's own metadata; an id gRPC metadata cannot carry is refused where it is configured."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest

from seglog.cli.options import parse_properties
from seglog.client.admin import Admin
from seglog.client.config import ConsumerConfig, ProducerConfig, from_kwargs
from seglog.errors import InvalidConfigError
from seglog.rpc.channels import open_channel
from seglog.rpc.client_id import CLIENT_ID_METADATA


def _echo_server() -> tuple[grpc.Server, int, list[dict[str, str]]]:
    """A loopback server whose two methods record each call's metadata."""
    seen: list[dict[str, str]] = []

    def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
        seen.append(dict(context.invocation_metadata()))
        return request

    def stream(request: bytes, context: grpc.ServicerContext):
        seen.append(dict(context.invocation_metadata()))
        yield request

    handlers = [
        grpc.method_handlers_generic_handler(
            "test.Echo",
            {
                "Unary": grpc.unary_unary_rpc_method_handler(unary),
                "Stream": grpc.unary_stream_rpc_method_handler(stream),
            },
        ),
        # An empty ListTopicsRequest echoed is an empty ListTopicsResponse: Admin's call.
        grpc.method_handlers_generic_handler(
            "seglog.v1.Gateway", {"ListTopics": grpc.unary_unary_rpc_method_handler(unary)}
        ),
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=handlers)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port, seen


def test_every_call_carries_the_client_id_beside_its_own_metadata():
    server, port, seen = _echo_server()
    try:
        with open_channel(f"127.0.0.1:{port}", client_id="billing-7") as channel:
            unary = channel.unary_unary("/test.Echo/Unary")
            stream = channel.unary_stream("/test.Echo/Stream")
            assert unary(b"a", timeout=10, metadata=(("x-own", "kept"),)) == b"a"
            assert list(stream(b"b", timeout=10)) == [b"b"]
        with open_channel(f"127.0.0.1:{port}") as channel:
            assert channel.unary_unary("/test.Echo/Unary")(b"c", timeout=10) == b"c"
        for admin in (
            Admin(f"127.0.0.1:{port}", security_protocol="PLAINTEXT", client_id="ops"),
            Admin(f"127.0.0.1:{port}", security_protocol="PLAINTEXT"),
        ):
            with admin:
                assert admin.list_topics() == []
    finally:
        server.stop(0)
    assert [call.get(CLIENT_ID_METADATA) for call in seen] == [
        "billing-7",
        "billing-7",
        None,
        "ops",
        "seglog-admin",
    ]
    assert seen[0]["x-own"] == "kept"


@pytest.mark.parametrize("bad", ["caf\u00e9", "two\nlines", 7, "x" * 32_768])
def test_an_id_grpc_metadata_cannot_carry_is_refused_when_configured(bad):
    for config in (ProducerConfig, ConsumerConfig):
        with pytest.raises(InvalidConfigError, match="client_id"):
            config(client_id=bad)
    with pytest.raises(InvalidConfigError, match="client_id"):
        Admin("127.0.0.1:1", security_protocol="PLAINTEXT", client_id=bad)


def test_kafkas_property_name_sets_it_as_the_clis_property_flag_does():
    # `seglog produce|consume --property client.id=etl` (kafka-console-producer's
    # --producer-property client.id=...), and the defaults naming the kind of client.
    for config, default in (
        (ProducerConfig, "seglog-producer"),
        (ConsumerConfig, "seglog-consumer"),
    ):
        assert from_kwargs(config, parse_properties(["client.id=etl"])).client_id == "etl"
        assert from_kwargs(config, {}).client_id == default

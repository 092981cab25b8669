"""Security on the Kafka listener, with librdkafka as the client: mutual TLS (the
certificate's principal, as on gRPC), SASL PLAIN and OAUTHBEARER carrying seglog bearer
tokens (static and JWT) over plaintext and TLS, the authorizer refusing what the ACLs do not
allow (TOPIC_AUTHORIZATION_FAILED), and nothing but the SASL exchange served before
authentication."""

from __future__ import annotations

import json
import struct
import time

import confluent_kafka
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka.protocol.metadata import MetadataRequest

from seglog.security.acls import AclBinding
from seglog.security.tokens import TokenVerifier
from services.gateway.kafka.apis import kafka_api_table
from services.gateway.kafka.listener import KafkaListener
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire, fetch_request
from tests.rdkafka import authentication_refused

KID = "kafka-test"
TIMEOUT_S = 20


@pytest.fixture(scope="module")
def signing_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, signing_key):
    """Mutual TLS on the cluster's SSL Kafka listener, and two more listeners on the same
    gateway: SASL_PLAINTEXT and SASL_SSL (client certificates required there too)."""
    root = tmp_path_factory.mktemp("kafka-security")
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing_key.public_key()))
    (root / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": KID, "alg": "RS256"}]}))
    (root / "tokens").write_text("s3cret-bob bob\n")
    c = LocalCluster(
        root,
        nodes=1,
        tls=True,
        tokens=TokenVerifier(root / "jwks.json", root / "tokens", None),
        authorizer=True,
        super_users=("User:client",),
        kafka_listen="SSL://127.0.0.1:0",
    )
    c.admin.create_topic("secure", 1, 1)
    c.admin.create_acls(
        [
            AclBinding(f"User:{name}", "*", "topic", "literal", "secure", "Write", "allow")
            for name in ("writer", "bob", "jane")
        ]
    )
    c.sasl_listeners = {}
    for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        listener = KafkaListener(
            f"{protocol}://127.0.0.1:0",
            kafka_api_table(),
            c.gateway.kafka_core,
            max_request_bytes=c.gateway.config.max_request_bytes,
        )
        listener.start()
        c.sasl_listeners[protocol] = listener
    yield c
    for listener in c.sasl_listeners.values():
        listener.stop()
    c.close()


def tls_config(cluster, identity):
    files = cluster.tls_files(identity)
    return {
        "ssl.ca.location": str(files.ca),
        "ssl.certificate.location": str(files.cert),
        "ssl.key.location": str(files.key),
        "ssl.endpoint.identification.algorithm": "none",
    }


def produce(config, value=b"hello"):
    """Produce one record to `secure`; the delivery error (None: written)."""
    outcome = []
    producer = confluent_kafka.Producer(
        {"message.timeout.ms": 10_000, "retries": 0, "socket.timeout.ms": 5000, **config}
    )
    producer.produce("secure", value=value, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert len(outcome) == 1
    return outcome[0]


def test_mutual_tls_takes_the_certificates_principal(cluster):
    ssl_config = {"bootstrap.servers": cluster.kafka_address, "security.protocol": "SSL"}
    assert produce({**ssl_config, **tls_config(cluster, "writer")}) is None
    denied = produce({**ssl_config, **tls_config(cluster, "stranger")})
    assert denied is not None
    assert denied.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_sasl_plain_takes_the_tokens_principal_and_refuses_a_wrong_name_or_token(cluster):
    listener = cluster.sasl_listeners["SASL_PLAINTEXT"]
    plain = {
        "bootstrap.servers": listener.address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
    }
    assert produce({**plain, "sasl.username": "bob", "sasl.password": "s3cret-bob"}) is None
    for username, password in (("alice", "s3cret-bob"), ("bob", "wrong")):
        assert authentication_refused(
            {**plain, "sasl.username": username, "sasl.password": password}, "secure"
        )


def test_sasl_oauthbearer_over_tls_takes_the_jwts_subject(cluster, signing_key):
    listener = cluster.sasl_listeners["SASL_SSL"]

    def token_for(subject):
        def refresh(config):
            expires = time.time() + 300
            claims = {"sub": subject, "exp": int(expires)}
            token = jwt.encode(claims, signing_key, algorithm="RS256", headers={"kid": KID})
            return token, expires

        return refresh

    oauth = {
        "bootstrap.servers": listener.address,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        **tls_config(cluster, "stranger"),  # the token's principal, not the certificate's
    }
    assert produce({**oauth, "oauth_cb": token_for("jane")}) is None
    denied = produce({**oauth, "oauth_cb": token_for("mallory")})
    assert denied is not None
    assert denied.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_refused_sasl_authenticate_answers_why_then_closes(cluster):
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

    listener = cluster.sasl_listeners["SASL_PLAINTEXT"]
    with KafkaWire(listener.address) as wire:
        handshake = SaslHandshakeRequest[1](mechanism="GSSAPI")
        answer = wire.request(handshake, 1, SaslHandshakeResponse)
        assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        answer = wire.request(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, SaslHandshakeResponse)
        assert answer.error_code == 0
        request = SaslAuthenticateRequest[2](auth_bytes=b"\0bob\0wrong")
        answer = wire.request(request, 2, SaslAuthenticateResponse)
        assert answer.error_code == 58 and "token" in answer.error_message
        assert wire.closed_by_listener()


def test_a_sasl_listener_serves_nothing_else_before_authentication(cluster):
    listener = cluster.sasl_listeners["SASL_PLAINTEXT"]
    with KafkaWire(listener.address) as wire:
        request = MetadataRequest[1](topics=None)
        wire.send_raw(wire.encode(request, 1))
        assert wire.closed_by_listener()


def test_a_bad_sasl_handshake_v0_token_closes_the_connection(cluster):
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    listener = cluster.sasl_listeners["SASL_PLAINTEXT"]
    with KafkaWire(listener.address) as wire:
        answer = wire.request(SaslHandshakeRequest[0](mechanism="PLAIN"), 0, SaslHandshakeResponse)
        assert answer.error_code == 0 and "OAUTHBEARER" in answer.mechanisms
        token = b"\0bob\0not-the-token"
        wire.send_raw(struct.pack(">i", len(token)) + token)
        assert wire.closed_by_listener()
    with KafkaWire(listener.address) as wire:
        wire.request(SaslHandshakeRequest[0](mechanism="PLAIN"), 0, SaslHandshakeResponse)
        token = b"\0bob\0s3cret-bob"
        wire.send_raw(struct.pack(">i", len(token)) + token)
        assert wire.read_frame() == b""  # authenticated: an empty bare answer
        assert wire.request(MetadataRequest[1](topics=None), 1, _metadata_response()).brokers


def _metadata_response():
    from kafka.protocol.metadata import MetadataResponse

    return MetadataResponse


def test_a_topic_that_may_not_be_read_is_refused_alone_in_fetch_and_list_offsets(cluster):
    from kafka.protocol.consumer import (
        FetchResponse,
        ListOffsetsRequest,
        ListOffsetsResponse,
    )
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

    cluster.admin.create_topic("hidden", 1, 1)
    # Its own record, so its offset check does not hang on an earlier test having written one.
    plain = {
        "bootstrap.servers": cluster.sasl_listeners["SASL_PLAINTEXT"].address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
    }
    assert produce({**plain, "sasl.username": "bob", "sasl.password": "s3cret-bob"}) is None
    cluster.admin.create_acls(
        [AclBinding("User:bob", "*", "topic", "literal", "secure", "Read", "allow")]
    )
    listener = cluster.sasl_listeners["SASL_PLAINTEXT"]
    with KafkaWire(listener.address) as wire:
        wire.request(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, SaslHandshakeResponse)
        request = SaslAuthenticateRequest[2](auth_bytes=b"\0bob\0s3cret-bob")
        assert wire.request(request, 2, SaslAuthenticateResponse).error_code == 0
        fetch = fetch_request(11, {"secure": [0], "hidden": [0]})
        answer = wire.request(fetch, 11, FetchResponse)
        errors = {t.topic: t.partitions[0].error_code for t in answer.responses}
        assert errors == {"secure": 0, "hidden": 29}  # TOPIC_AUTHORIZATION_FAILED
        offsets = ListOffsetsRequest[6](
            replica_id=-1,
            isolation_level=0,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=name,
                    partitions=[
                        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=0, current_leader_epoch=-1, timestamp=-1
                        )
                    ],
                )
                for name in ("secure", "hidden")
            ],
        )
        answer = wire.request(offsets, 6, ListOffsetsResponse)
        found = {
            t.name: (t.partitions[0].error_code, t.partitions[0].offset) for t in answer.topics
        }
        assert found["hidden"] == (29, -1)
        assert found["secure"][0] == 0 and found["secure"][1] >= 1

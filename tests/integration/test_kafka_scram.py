"""Users' SCRAM credentials and SASL SCRAM on the Kafka listener, with Kafka 4.3.1's own tools
and librdkafka as clients: kafka-configs alters and describes a user's credentials
(AlterUserScramCredentials / DescribeUserScramCredentials), librdkafka and Kafka's console
producer then authenticate with SCRAM-SHA-512 as User:<name>; a wrong password is
SASL_AUTHENTICATION_FAILED and a closed connection; Kafka's checks (iterations, duplicates,
unknown users, Alter/Describe on the cluster) hold on the wire; the credentials live in the
registry, across a gateway restart.

One cluster for the module: a JVM per tool run is the cost, not the cluster."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct

import confluent_kafka
import pytest
import scramp
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from devtools import apache_kafka
from devtools.apache_kafka import CONSOLE_PRODUCER, run_tool
from seglog.client.admin import LATEST
from seglog.client.structs import TopicPartition
from seglog.security.acls import AclBinding
from seglog.security.tokens import TokenVerifier
from services.gateway.kafka.apis import kafka_api_table
from services.gateway.kafka.listener import KafkaListener
from tests.cluster import LocalCluster
from tests.kafka_wire import KafkaWire
from tests.rdkafka import authentication_refused

CONFIGS_TOOL = "kafka.admin.ConfigCommand"  # what kafka-configs.sh runs
TIMEOUT_S = 20
SASL_AUTHENTICATION_FAILED = 58
CLUSTER_AUTHORIZATION_FAILED = 31
RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The authorizer on: User:ANONYMOUS (the plaintext listener, the gRPC admin) is a super
    user; bob, a bearer-token user over SASL PLAIN, is not. A SASL_PLAINTEXT listener beside."""
    assert apache_kafka.installed(), apache_kafka.INSTALL_HINT
    root = tmp_path_factory.mktemp("kafka-scram")
    (root / "tokens").write_text("s3cret-bob bob\n")
    c = LocalCluster(
        root,
        nodes=1,
        tokens=TokenVerifier(None, root / "tokens", None),
        authorizer=True,
        super_users=("User:ANONYMOUS",),
    )
    c.admin.create_topic("scram-topic", 1, 1)
    c.admin.create_acls(
        [AclBinding("User:alice", "*", "topic", "literal", "scram-topic", "Write", "allow")]
    )
    c.sasl_listener = start_sasl_listener(c)
    yield c
    c.sasl_listener.stop()
    c.close()


def start_sasl_listener(c):
    listener = KafkaListener(
        "SASL_PLAINTEXT://127.0.0.1:0",
        kafka_api_table(),
        c.gateway.kafka_core,
        max_request_bytes=c.gateway.config.max_request_bytes,
    )
    listener.start()
    return listener


def salted_password(mechanism, password, salt, iterations):
    """Hi() of RFC 5802 (PBKDF2), as a client computes it: written here, not the server's."""
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    return hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)


def configs_tool(cluster, *args):
    done = run_tool(CONFIGS_TOOL, "--bootstrap-server", cluster.kafka_address, *args)
    assert done.returncode == 0, (done.stdout.decode()[-2000:], done.stderr.decode()[-4000:])
    return done.stdout.decode()


def scram_config(cluster, user, password, mechanism="SCRAM-SHA-512"):
    return {
        "bootstrap.servers": cluster.sasl_listener.address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def produce(config, value=b"hello"):
    """One record to scram-topic: its delivery error (None: written)."""
    outcome = []
    producer = confluent_kafka.Producer(
        {"message.timeout.ms": 10_000, "retries": 0, "socket.timeout.ms": 5000, **config}
    )
    producer.produce("scram-topic", value=value, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert len(outcome) == 1
    return outcome[0]


def test_kafka_configs_alters_and_describes_a_users_scram_credentials(cluster):
    out = configs_tool(
        cluster,
        "--alter",
        "--add-config",
        "SCRAM-SHA-512=[iterations=8192,password=alice-secret]",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
    )
    assert "Completed updating config for user alice." in out
    assert alter(cluster, "carol", "SCRAM-SHA-256", "carol-secret", 4096) == 0
    described = configs_tool(cluster, "--describe", "--entity-type", "users")
    assert (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192"
        in described
    )
    assert (
        "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=4096"
        in described
    )
    # Kept as StoredKey/ServerKey: no password in the registry.
    stored = cluster.gateway.registry.scram_credentials["alice"]["SCRAM-SHA-512"]
    assert stored.iterations == 8192
    assert b"alice-secret" not in repr(stored).encode()
    # The credential authenticates librdkafka; a wrong password does not.
    assert produce(scram_config(cluster, "alice", "alice-secret")) is None
    assert authentication_refused(scram_config(cluster, "alice", "wrong"), "scram-topic")
    assert authentication_refused(scram_config(cluster, "nobody", "alice-secret"), "scram-topic")
    # carol's is SHA-256 only.
    assert authentication_refused(scram_config(cluster, "carol", "carol-secret"), "scram-topic")
    assert (
        produce_authenticates(scram_config(cluster, "carol", "carol-secret", "SCRAM-SHA-256"))
        == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    )
    # Deleted, it no longer authenticates.
    deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="carol", mechanism=1)
    assert alter_request(cluster.kafka_address, [deletion], []) == [("carol", 0, None)]
    assert "carol" not in cluster.gateway.registry.scram_credentials
    assert authentication_refused(
        scram_config(cluster, "carol", "carol-secret", "SCRAM-SHA-256"), "scram-topic"
    )


def produce_authenticates(config):
    """The delivery error of a produce that authenticated: the principal's ACLs decide."""
    error = produce(config)
    return None if error is None else error.code()


def test_kafkas_console_producer_authenticates_with_scram_sha_512(cluster, tmp_path):
    alter(cluster, "dave", "SCRAM-SHA-512", "dave-secret", 4096)
    cluster.admin.create_acls(
        [
            AclBinding("User:dave", "*", "topic", "literal", "scram-topic", "Write", "allow"),
            # Kafka's producer is idempotent by default: InitProducerId.
            AclBinding(
                "User:dave", "*", "cluster", "literal", "kafka-cluster", "IdempotentWrite", "allow"
            ),
        ]
    )
    config = tmp_path / "producer.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="dave" password="dave-secret";\n'
    )
    before = end_offset(cluster)
    done = run_tool(
        CONSOLE_PRODUCER,
        "--bootstrap-server",
        cluster.sasl_listener.address,
        "--topic",
        "scram-topic",
        "--command-config",
        str(config),
        stdin=b"one\ntwo\nthree\n",
    )
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    assert end_offset(cluster) == before + 3, done.stderr.decode()[-4000:]


def end_offset(cluster):
    tp = TopicPartition("scram-topic", 0)
    return cluster.admin.list_offsets({tp: LATEST})[tp].offset


def alter(cluster, user, mechanism, password, iterations, version_bytes=None, salt=None):
    """An AlterUserScramCredentials upsertion over the wire; the user's error code."""
    salt = os.urandom(16) if salt is None else salt
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user,
        mechanism={"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}.get(mechanism, 0),
        iterations=iterations,
        salt=salt,
        salted_password=version_bytes
        or salted_password(
            mechanism if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512") else "SCRAM-SHA-256",
            password,
            salt,
            max(1, min(iterations, 16384)),
        ),
    )
    return alter_request(cluster.kafka_address, [], [upsertion])[0][1]


def alter_request(address, deletions, upsertions, auth=None):
    with KafkaWire(address) as wire:
        if auth is not None:
            plain_login(wire, *auth)
        request = AlterUserScramCredentialsRequest[0](deletions=deletions, upsertions=upsertions)
        answer = wire.request(request, 0, AlterUserScramCredentialsResponse)
    return [(r.user, r.error_code, r.error_message) for r in answer.results]


def plain_login(wire, user, token):
    wire.request(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, SaslHandshakeResponse)
    request = SaslAuthenticateRequest[2](auth_bytes=f"\0{user}\0{token}".encode())
    assert wire.request(request, 2, SaslAuthenticateResponse).error_code == 0


def test_alterations_are_checked_as_kafkas_controller_checks_them(cluster):
    assert alter(cluster, "erin", "SCRAM-SHA-256", "pw", 4095) == UNACCEPTABLE_CREDENTIAL
    assert alter(cluster, "erin", "SCRAM-SHA-256", "pw", 16385) == UNACCEPTABLE_CREDENTIAL
    assert alter(cluster, "", "SCRAM-SHA-256", "pw", 4096) == UNACCEPTABLE_CREDENTIAL
    assert alter(cluster, "erin", "SCRAM-SHA-1", "pw", 4096) == 33  # UNSUPPORTED_SASL_MECHANISM
    assert alter(cluster, "erin", "SCRAM-SHA-256", "pw", 4096, b"short") == UNACCEPTABLE_CREDENTIAL
    assert alter(cluster, "erin", "SCRAM-SHA-256", "pw", 4096, salt=b"4 by") == (
        UNACCEPTABLE_CREDENTIAL
    )
    assert "erin" not in cluster.gateway.registry.scram_credentials
    assert alter(cluster, "erin", "SCRAM-SHA-256", "pw", 16384) == 0
    deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion
    results = alter_request(
        cluster.kafka_address,
        [deletion(name="erin", mechanism=2), deletion(name="frank", mechanism=1)],
        [],
    )
    assert sorted(code for _, code, _ in results) == [RESOURCE_NOT_FOUND, RESOURCE_NOT_FOUND]
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    twice = alter_request(
        cluster.kafka_address,
        [deletion(name="erin", mechanism=1)],
        [upsertion(name="erin", mechanism=2, iterations=4096, salt=b"s", salted_password=b"x")],
    )
    assert twice == [
        (
            "erin",
            DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        )
    ]
    assert "SCRAM-SHA-256" in cluster.gateway.registry.scram_credentials["erin"]


def test_describe_answers_kafkas_errors_per_user(cluster):
    assert alter(cluster, "gina", "SCRAM-SHA-256", "pw", 4096) == 0
    name = DescribeUserScramCredentialsRequest.UserName
    with KafkaWire(cluster.kafka_address) as wire:
        request = DescribeUserScramCredentialsRequest[0](
            users=[name(name="gina"), name(name="nobody"), name(name="twice"), name(name="twice")]
        )
        answer = wire.request(request, 0, DescribeUserScramCredentialsResponse)
    assert answer.error_code == 0
    results = {r.user: r for r in answer.results}
    assert [(c.mechanism, c.iterations) for c in results["gina"].credential_infos] == [(1, 4096)]
    assert results["nobody"].error_code == RESOURCE_NOT_FOUND
    assert results["twice"].error_code == DUPLICATE_RESOURCE


def test_only_who_may_alter_or_describe_the_cluster_may_touch_credentials(cluster):
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name="bob", mechanism=1, iterations=4096, salt=b"salt", salted_password=bytes(32)
    )
    results = alter_request(
        cluster.sasl_listener.address, [], [upsertion], auth=("bob", "s3cret-bob")
    )
    assert [(user, code) for user, code, _ in results] == [("bob", CLUSTER_AUTHORIZATION_FAILED)]
    assert "bob" not in cluster.gateway.registry.scram_credentials
    with KafkaWire(cluster.sasl_listener.address) as wire:
        plain_login(wire, "bob", "s3cret-bob")
        request = DescribeUserScramCredentialsRequest[0](users=None)
        answer = wire.request(request, 0, DescribeUserScramCredentialsResponse)
    assert answer.error_code == CLUSTER_AUTHORIZATION_FAILED and answer.results == []


def scram_first_messages(wire, mechanism, user):
    wire.request(SaslHandshakeRequest[1](mechanism=mechanism), 1, SaslHandshakeResponse)
    client = scramp.ScramClient([mechanism], user, "pw")
    first = SaslAuthenticateRequest[2](auth_bytes=client.get_client_first().encode())
    return client, wire.request(first, 2, SaslAuthenticateResponse)


def test_a_wrong_proof_fails_and_closes_and_the_exchange_is_bounded(cluster):
    assert alter(cluster, "hank", "SCRAM-SHA-256", "pw", 4096) == 0
    listener = cluster.sasl_listener.address
    with KafkaWire(listener) as wire:
        client, answer = scram_first_messages(wire, "SCRAM-SHA-256", "hank")
        assert answer.error_code == 0
        client.set_server_first(bytes(answer.auth_bytes).decode())
        final = client.get_client_final()
        forged = final[: final.index(",p=")] + ",p=" + "A" * 44
        request = SaslAuthenticateRequest[2](auth_bytes=forged.encode())
        answer = wire.request(request, 2, SaslAuthenticateResponse)
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert wire.closed_by_listener()
    # The right proof authenticates; the server proves itself (scramp checks its signature).
    with KafkaWire(listener) as wire:
        client = scramp.ScramClient(["SCRAM-SHA-256"], "hank", "pw")
        wire.request(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"), 1, SaslHandshakeResponse)
        for message in (client.get_client_first, None):
            if message is None:
                text = client.get_client_final()
            else:
                text = message()
            request = SaslAuthenticateRequest[2](auth_bytes=text.encode())
            answer = wire.request(request, 2, SaslAuthenticateResponse)
            assert answer.error_code == 0
            if message is not None:
                client.set_server_first(bytes(answer.auth_bytes).decode())
        client.set_server_final(bytes(answer.auth_bytes).decode())
    # A client first message past 4 KiB is refused before any lookup.
    with KafkaWire(listener) as wire:
        wire.request(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"), 1, SaslHandshakeResponse)
        huge = b"n,,n=" + b"x" * 5000 + b",r=abc"
        request = SaslAuthenticateRequest[2](auth_bytes=huge)
        assert wire.request(request, 2, SaslAuthenticateResponse).error_code == 58
        assert wire.closed_by_listener()


def test_scram_over_handshake_v0_bare_tokens(cluster):
    assert alter(cluster, "ivan", "SCRAM-SHA-512", "pw", 4096) == 0
    with KafkaWire(cluster.sasl_listener.address) as wire:
        answer = wire.request(
            SaslHandshakeRequest[0](mechanism="SCRAM-SHA-512"), 0, SaslHandshakeResponse
        )
        assert answer.error_code == 0
        client = scramp.ScramClient(["SCRAM-SHA-512"], "ivan", "pw")
        first = client.get_client_first().encode()
        wire.send_raw(struct.pack(">i", len(first)) + first)
        client.set_server_first(wire.read_frame().decode())
        final = client.get_client_final().encode()
        wire.send_raw(struct.pack(">i", len(final)) + final)
        client.set_server_final(wire.read_frame().decode())


def test_credentials_survive_a_gateway_restart(cluster):
    assert alter(cluster, "judy", "SCRAM-SHA-512", "judy-secret", 4096) == 0
    cluster.sasl_listener.stop()
    cluster.restart_gateway()
    cluster.sasl_listener = start_sasl_listener(cluster)
    stored = cluster.gateway.registry.scram_credentials["judy"]["SCRAM-SHA-512"]
    salted = salted_password("SCRAM-SHA-512", "judy-secret", stored.salt, 4096)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha512).digest()
    assert hashlib.sha512(client_key).digest() == stored.stored_key
    cluster.admin.create_acls(
        [AclBinding("User:judy", "*", "topic", "literal", "scram-topic", "Write", "allow")]
    )
    assert produce(scram_config(cluster, "judy", "judy-secret")) is None

"""Bearer tokens (OAUTHBEARER's role) on a TLS gateway that asks clients for no
certificate: static tokens and JWTs verified against a key set map to principals the
authorizer checks; bad, expired and foreign-signed tokens are refused; nodes reach the
Registry only on the internal mutual-TLS listener."""

from __future__ import annotations

import json
import time

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from seglog.client.admin import Admin
from seglog.client.gateway import GatewayClient
from seglog.errors import AuthenticationError, PermissionDeniedError
from seglog.security.acls import AclBinding
from seglog.security.tls import ClientSecurity
from seglog.security.tokens import TokenVerifier
from seglog.v1 import gateway_pb2, gateway_pb2_grpc
from tests.batches import make_batch
from tests.cluster import LocalCluster

KID = "seglog-test"


@pytest.fixture(scope="module")
def signing_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, signing_key):
    root = tmp_path_factory.mktemp("tokens")
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing_key.public_key()))
    (root / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": KID, "alg": "RS256"}]}))
    (root / "tokens").write_text("# token name\ns3cret-bob bob\nroot-token root\n")
    c = LocalCluster(
        root,
        nodes=1,
        tls=True,
        tls_client_auth="none",
        tokens=TokenVerifier(root / "jwks.json", root / "tokens", None),
        authorizer=True,
        super_users=("User:root", "User:client"),
    )
    yield c
    c.close()


def _client(cluster, token: str | None) -> GatewayClient:
    ca = cluster.root / "tls" / "ca.pem"
    return GatewayClient(cluster.address, security=ClientSecurity(ca=ca, bearer_token=token))


def _admin(cluster, token: str) -> Admin:
    return Admin(
        cluster.address, ssl_cafile=str(cluster.root / "tls" / "ca.pem"), bearer_token=token
    )


def _jwt(key, sub: str, expires_in_s: int = 300) -> str:
    claims = {"sub": sub, "exp": int(time.time()) + expires_in_s}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID})


def test_static_tokens_and_jwts_are_principals_the_authorizer_checks(cluster, signing_key):
    with _admin(cluster, "root-token") as root:
        root.create_topic("inbox", 1, 1)
        root.create_acls(
            [
                AclBinding("User:bob", "*", "topic", "literal", "inbox", "Write", "allow"),
                AclBinding("User:jane", "*", "topic", "literal", "inbox", "Write", "allow"),
            ]
        )
    with _client(cluster, "s3cret-bob") as bob:
        assert bob.produce("inbox", {0: make_batch([b"from bob"])})[0].error == 0
    with _client(cluster, _jwt(signing_key, "jane")) as jane:
        assert jane.produce("inbox", {0: make_batch([b"from jane"])})[0].error == 0
    with (
        _client(cluster, _jwt(signing_key, "eve")) as eve,
        pytest.raises(PermissionDeniedError, match="User:eve may not Write"),
    ):
        eve.produce("inbox", {0: make_batch([b"no"])})
    with (
        _client(cluster, None) as anonymous,
        pytest.raises(PermissionDeniedError, match="User:ANONYMOUS"),
    ):
        anonymous.produce("inbox", {0: make_batch([b"no"])})
    assert cluster.log("inbox", 0).log_end_offset == 2


def test_bad_expired_and_foreign_tokens_are_refused(cluster, signing_key):
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cases = [
        ("not-a-token", "does not verify"),
        (_jwt(signing_key, "jane", expires_in_s=-10), "expired"),
        (_jwt(other_key, "jane"), "does not verify"),
    ]
    for token, reason in cases:
        with _client(cluster, token) as client, pytest.raises(AuthenticationError, match=reason):
            client.list_topics()


def test_nodes_reach_the_registry_only_on_the_internal_listener(cluster):
    assert cluster.gateway.internal_address != cluster.address
    assert cluster.gateway.registry.live_nodes() == [1]
    ca = (cluster.root / "tls" / "ca.pem").read_bytes()
    with (
        grpc.secure_channel(cluster.address, grpc.ssl_channel_credentials(ca)) as channel,
        pytest.raises(grpc.RpcError) as missing,
    ):
        gateway_pb2_grpc.RegistryStub(channel).RegisterNode(
            gateway_pb2.NodeHeartbeat(node_id=1, address="127.0.0.1:1"), timeout=5
        )
    assert missing.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # The clients' listener asks for no certificate; the nodes' one does: a caller with the
    # CA but no certificate of its own never gets a Registry call through.
    with (
        grpc.secure_channel(
            cluster.gateway.internal_address, grpc.ssl_channel_credentials(ca)
        ) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        gateway_pb2_grpc.RegistryStub(channel).Heartbeat(
            gateway_pb2.NodeHeartbeat(node_id=1, address="127.0.0.1:1"), timeout=5
        )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake failed
    assert cluster.gateway.registry.live_nodes() == [1]

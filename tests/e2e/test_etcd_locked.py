"""etcd locked down, as `make run ETCD=1 TLS=1` and the production overlay run it: HTTPS only,
a client certificate from the cluster CA required (--client-cert-auth), and role-based auth
giving the registry's keys to the gateways' etcd user alone. The cluster works through it;
plaintext, certificate-less and other certificates' clients are refused."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
import requests

from devtools.embedded_etcd import EtcdProcess
from seglog.security.tls import TlsFiles
from services.gateway.coordination.etcd_auth import lock_down
from tests.cluster import local_cluster_command
from tests.waiting import wait_until


def _files(directory, identity) -> TlsFiles:
    return TlsFiles(
        directory / f"{identity}.pem", directory / f"{identity}.key", directory / "ca.pem"
    )


def _cli(*args: str, bootstrap: str, identity: TlsFiles, stdin: bytes | None = None):
    env = {
        **os.environ,
        "SEGLOG_BOOTSTRAP": bootstrap,
        "SEGLOG_TLS_CA": str(identity.ca),
        "SEGLOG_TLS_CERT": str(identity.cert),
        "SEGLOG_TLS_KEY": str(identity.key),
    }
    command = [sys.executable, "-m", "seglog.cli.main", *args]
    return subprocess.run(command, input=stdin, capture_output=True, env=env, timeout=120)


def _read_registry(endpoint: str, token: str | None = None, **tls) -> requests.Response:
    """etcd's JSON gateway: a range read of the registry's keys."""
    return requests.post(
        f"{endpoint}/v3/kv/range",
        json={"key": "L3NlZ2xvZy8=", "range_end": "L3NlZ2xvZzA="},  # "/seglog/" to "/seglog0"
        headers={} if token is None else {"Authorization": token},
        timeout=10,
        **tls,
    )


def _log_in(endpoint: str, user: str, password: str, **tls) -> requests.Response:
    return requests.post(
        f"{endpoint}/v3/auth/authenticate",
        json={"name": user, "password": password},
        timeout=10,
        **tls,
    )


@pytest.mark.long  # a whole make run ETCD=1 TLS=1
def test_a_cluster_runs_on_a_locked_etcd_that_refuses_everyone_else(tmp_path):
    runner = subprocess.Popen(
        local_cluster_command(tmp_path / "data", "--etcd", "--tls", nodes=1),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        banner = ""
        while "registry in etcd" not in banner:
            line = runner.stdout.readline().decode()
            assert line, f"make run ended early: {banner}"
            banner += line
        gateway = re.search(r"gateway on (\S+)", banner).group(1).split(",")[0]
        etcd = re.search(r"registry in etcd at (\S+)", banner).group(1)
        assert etcd.startswith("https://")
        tls = tmp_path / "data" / "tls"
        admin = _files(tls, "admin")
        # The node registers through a gateway, which keeps its registration in etcd.
        assert wait_until(
            lambda: (
                _cli("topics", "create", "locked", bootstrap=gateway, identity=admin).returncode
                == 0
            ),
            timeout_s=60,
        )
        produced = _cli("produce", "locked", bootstrap=gateway, identity=admin, stdin=b"1\n2\n")
        assert produced.returncode == 0, produced.stderr
        consumed = _cli(
            "consume", "locked", "--from-beginning", "--max-messages", "2",
            bootstrap=gateway, identity=admin,
        )  # fmt: skip
        values = [line.split(b"\t")[-1] for line in consumed.stdout.splitlines()]
        assert values == [b"1", b"2"], consumed.stderr
        # The gateways' etcd user reads the registry; nobody else does.
        password = (tmp_path / "data" / "etcd-password").read_text().strip()
        client = _files(tls, "etcd-client")  # the gateways' certificate for etcd: no CN
        mutual = {"verify": str(client.ca), "cert": (str(client.cert), str(client.key))}
        token = _log_in(etcd, "gateway", password, **mutual).json()["token"]
        answer = _read_registry(etcd, token, **mutual)
        assert answer.status_code == 200 and answer.json().get("kvs"), answer.text
        with pytest.raises(requests.exceptions.ConnectionError):
            _read_registry(etcd.replace("https://", "http://"))
        with pytest.raises(requests.exceptions.ConnectionError):  # TLS refused
            _read_registry(etcd, verify=str(client.ca))  # no client certificate
        assert _read_registry(etcd, **mutual).status_code != 200  # a certificate, no user
        assert _log_in(etcd, "gateway", "guessed", **mutual).status_code != 200
        # Locking it again (the overlay's Job runs again) sees auth on and changes nothing.
        assert not lock_down(etcd, "/seglog/", {"gateway": "other"}, "other", client)
        assert _log_in(etcd, "gateway", password, **mutual).status_code == 200
        named = {"verify": str(admin.ca), "cert": (str(admin.cert), str(admin.key))}
        assert _read_registry(etcd, token, **named).status_code != 200
    finally:
        runner.send_signal(signal.SIGINT)
        try:
            runner.wait(60)
        except subprocess.TimeoutExpired:
            runner.kill()
            runner.wait()
        runner.stdout.close()


def test_a_keyspace_refuses_an_https_endpoint_without_a_certificate(tmp_path):
    from services.gateway.coordination.etcd_keyspace import EtcdKeyspace

    with pytest.raises(ValueError, match="needs a client certificate"):
        EtcdKeyspace("https://127.0.0.1:2379")
    with pytest.raises(ValueError, match="needs its password"):
        EtcdKeyspace("127.0.0.1:2379", user="gateway")
    assert EtcdProcess(tmp_path, tls=_files(tmp_path, "etcd")).endpoint.startswith("https://")

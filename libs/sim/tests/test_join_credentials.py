"""`gpuop-sim join`'s node side reaches a cluster the way the kubernetes client does: over TLS with
the cluster's CA, authenticated by a client certificate, a bearer token or an exec plugin; a
credential the server refuses stops the join with the server's answer."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import shutil
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.apiserver.authn import Authenticator
from gpuop_sim.cluster import SimCluster
from gpuop_sim.shortpaths import short_tmp_dir
from gpuop_sim.workloads.kubeapi import NODES, KubeRest, is_status

ADMIN_TOKEN, EXEC_TOKEN = "admin-token", "exec-token"


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def issue(
    cn: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None, *, server: bool = False
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer[0].subject if issuer else _name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
    cert = builder.sign(issuer[1] if issuer else key, hashes.SHA256())
    return cert, key


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[tuple[SimApiServer, bytes, tuple[bytes, bytes], Path]]:
    home = short_tmp_dir("gpuop-tls-")
    ca = issue("sim-ca", None)
    server_cert = issue("sim-apiserver", ca, server=True)
    client = issue("joiner", ca)
    (home / "server.crt").write_bytes(pem(server_cert[0]))
    (home / "server.key").write_bytes(key_pem(server_cert[1]))
    (home / "ca.crt").write_bytes(pem(ca[0]))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(home / "server.crt", home / "server.key")
    context.load_verify_locations(home / "ca.crt")
    context.verify_mode = ssl.CERT_OPTIONAL  # client certificates count when given, as kube-apiserver's
    authenticator = Authenticator(frozenset({ADMIN_TOKEN, EXEC_TOKEN}), frozenset({"joiner"}))
    server = SimApiServer(ssl_context=context, authenticator=authenticator).start()
    yield server, pem(ca[0]), (pem(client[0]), key_pem(client[1])), home
    server.stop()
    shutil.rmtree(home, ignore_errors=True)


def kubeconfig(path: Path, server: str, ca: bytes, user: dict[str, Any]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def exec_plugin(token: str) -> dict[str, Any]:
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
            "interactiveMode": "Never",
        }
    }


@pytest.mark.parametrize("credential", ["client-certificate", "token", "exec-plugin"])
def test_join_over_tls_with_each_kind_of_credential(
    tls_cluster: tuple[SimApiServer, bytes, tuple[bytes, bytes], Path], credential: str
) -> None:
    server, ca, (cert, key), home = tls_cluster
    user = {
        "client-certificate": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
        "token": {"token": ADMIN_TOKEN},
        "exec-plugin": exec_plugin(EXEC_TOKEN),
    }[credential]
    path = kubeconfig(home / f"{credential}.kubeconfig", server.url, ca, user)
    admin = KubeRest.from_kubeconfig(
        kubeconfig(home / "admin.kubeconfig", server.url, ca, {"token": ADMIN_TOKEN})
    )
    state = short_tmp_dir("gpuop-join-")
    joined = SimCluster(
        state, cpu_nodes=1, pods="stub", kubeconfig=path, control_plane=False, name_prefix=f"{credential}-"
    )
    try:
        joined.start()
        assert joined.url == server.url
        node = admin.get(NODES, f"{credential}-cpu-0")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
    finally:
        joined.stop()
        shutil.rmtree(state, ignore_errors=True)
    with pytest.raises(Exception) as gone:
        admin.get(NODES, f"{credential}-cpu-0")
    assert is_status(gone.value, 404)
    admin.close()


def test_a_refused_credential_stops_the_join(
    tls_cluster: tuple[SimApiServer, bytes, tuple[bytes, bytes], Path],
) -> None:
    server, ca, _, home = tls_cluster
    path = kubeconfig(home / "bad.kubeconfig", server.url, ca, {"token": "nobody"})
    state = short_tmp_dir("gpuop-join-")
    joined = SimCluster(state, cpu_nodes=1, pods="stub", kubeconfig=path, control_plane=False)
    try:
        with pytest.raises(Exception) as refused:
            joined.start()
        assert is_status(refused.value, 401)
    finally:
        joined.stop()
        shutil.rmtree(state, ignore_errors=True)

"""Protobuf bodies in the simulated API server: the `k8s\\0` + runtime.Unknown envelope for the kinds
helm's release storage and `kubectl create namespace` send, and a clear 415 for anything else."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_sim.apiserver import SimApiServer, protobody
from gpuop_sim.apiserver._generated import k8s_wire_pb2 as wire

SECRET: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "sh.helm.release.v1.demo.v1",
        "namespace": "default",
        "labels": {"owner": "helm", "name": "demo"},
        "creationTimestamp": "2026-12-03T10:00:00Z",
        "generation": 0,
        "managedFields": [
            {
                "manager": "helm",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-12-03T10:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:release": {}}},
            }
        ],
    },
    "data": {"release": "SDRzSUFBQUFBQUFDLzJ5UlQ="},
    "type": "helm.sh/release.v1",
    "immutable": False,
}


def _envelope(api_version: str, kind: str, raw: bytes, encoding: str = "") -> bytes:
    unknown = wire.Unknown(
        typeMeta=wire.TypeMeta(apiVersion=api_version, kind=kind), raw=raw, contentEncoding=encoding
    )
    return protobody.MAGIC + unknown.SerializeToString()


def test_secret_round_trips_through_the_wire_form() -> None:
    body = protobody.encode(SECRET)
    assert body.startswith(b"k8s\x00")
    assert protobody.decode(body) == SECRET


def test_presence_survives_zero_values() -> None:
    """generation 0 and immutable false are sent by clients and must not vanish."""
    decoded = protobody.decode(protobody.encode(SECRET))
    assert decoded["metadata"]["generation"] == 0 and decoded["immutable"] is False


def test_namespace_and_configmap_round_trip() -> None:
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "gpuop"},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {
            "phase": "Terminating",
            "conditions": [
                {
                    "type": "NamespaceDeletionContentFailure",
                    "status": "False",
                    "lastTransitionTime": "2026-12-03T10:00:00.5Z",
                    "reason": "ContentDeleted",
                    "message": "All content successfully deleted",
                }
            ],
        },
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default", "annotations": {"a": "b"}},
        "data": {"config.yaml": "x: 1\n"},
        "binaryData": {"blob": "AAEC"},
    }
    for obj in (namespace, configmap):
        assert protobody.decode(protobody.encode(obj)) == obj


def test_delete_options_decode_as_either_group() -> None:
    options = wire.DeleteOptions(propagationPolicy="Foreground", gracePeriodSeconds=0)
    for api_version in ("v1", "meta.k8s.io/v1"):
        decoded = protobody.decode(_envelope(api_version, "DeleteOptions", options.SerializeToString()))
        assert decoded == {
            "apiVersion": api_version,
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "propagationPolicy": "Foreground",
        }


def test_bad_bodies_are_named() -> None:
    """Bad inputs: no magic, a kind we do not decode, an unknown field, a content encoding, garbage."""
    with pytest.raises(protobody.ProtobufBodyError, match="magic"):
        protobody.decode(b'{"kind": "Secret"}')
    with pytest.raises(protobody.ProtobufBodyError, match=r"Pod \(v1\)"):
        protobody.decode(_envelope("v1", "Pod", b""))
    extra = wire.Secret(type="Opaque").SerializeToString() + b"\xf8\x06\x01"  # field 111, varint 1
    with pytest.raises(protobody.ProtobufBodyError, match="Secret field 111"):
        protobody.decode(_envelope("v1", "Secret", extra))
    with pytest.raises(protobody.ProtobufBodyError, match="content encoding 'gzip'"):
        protobody.decode(_envelope("v1", "Secret", b"", encoding="gzip"))
    with pytest.raises(protobody.ProtobufBodyError, match="does not parse"):
        protobody.decode(_envelope("v1", "Secret", b"\x0a\xff\xff"))


def test_accept_negotiation_prefers_json() -> None:
    assert not protobody.accepts_only_protobuf("application/vnd.kubernetes.protobuf,application/json")
    assert not protobody.accepts_only_protobuf("")
    assert not protobody.accepts_only_protobuf("application/vnd.kubernetes.protobuf, */*")
    assert protobody.accepts_only_protobuf("application/vnd.kubernetes.protobuf")


# ---------------------------------------------------------------- over HTTP
@pytest.fixture(scope="module")
def server() -> Iterator[SimApiServer]:
    with SimApiServer(controllers=False) as sim:
        yield sim


def _send(
    server: SimApiServer, method: str, path: str, body: bytes | None, *, ctype: str, accept: str
) -> Any:
    request = urllib.request.Request(
        server.url + path, data=body, method=method, headers={"Content-Type": ctype, "Accept": accept}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_protobuf_secret_create_answers_json_when_json_is_accepted(server: SimApiServer) -> None:
    secret = {
        **SECRET,
        "metadata": {"name": "pb-secret", "namespace": "default", "labels": {"owner": "helm"}},
    }
    code, ctype, body = _send(
        server,
        "POST",
        "/api/v1/namespaces/default/secrets",
        protobody.encode(secret),
        ctype=protobody.MEDIA_TYPE,
        accept="application/vnd.kubernetes.protobuf,application/json",
    )
    assert (code, ctype) == (201, "application/json")
    stored = json.loads(body)
    assert stored["data"] == SECRET["data"] and stored["metadata"]["labels"] == {"owner": "helm"}


def test_protobuf_only_clients_get_protobuf_or_406(server: SimApiServer) -> None:
    code, ctype, body = _send(
        server,
        "GET",
        "/api/v1/namespaces/default",
        None,
        ctype="application/json",
        accept=protobody.MEDIA_TYPE,
    )
    assert (code, ctype) == (200, protobody.MEDIA_TYPE)
    assert protobody.decode(body)["metadata"]["name"] == "default"
    code, _, body = _send(
        server, "GET", "/api/v1/namespaces/default/pods", None, ctype="", accept=protobody.MEDIA_TYPE
    )
    assert code == 406 and json.loads(body)["reason"] == "NotAcceptable"


def test_a_protobuf_body_of_another_kind_is_a_415_naming_it(server: SimApiServer) -> None:
    """Bad input: a Pod sent as protobuf (kubectl run would)."""
    code, _, body = _send(
        server,
        "POST",
        "/api/v1/namespaces/default/pods",
        _envelope("v1", "Pod", b""),
        ctype=protobody.MEDIA_TYPE,
        accept="application/json",
    )
    status = json.loads(body)
    assert code == 415 and status["reason"] == "UnsupportedMediaType"
    assert "Pod (v1) as protobuf" in status["message"] and "Send JSON instead" in status["message"]


def test_committed_wire_stubs_are_current() -> None:
    """`make protos` output for protos/k8s_wire.proto matches what is committed."""
    import importlib.util
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[3] / "tools" / "gen_protos.py"
    spec = importlib.util.spec_from_file_location("gpuop_tools_gen_protos_sim", tool)
    assert spec is not None and spec.loader is not None
    gen_protos = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen_protos  # its dataclasses look their module up there
    spec.loader.exec_module(gen_protos)
    (sim_set,) = [s for s in gen_protos.PROTO_SETS if "gpuop_sim" in str(s.proto_dir)]
    assert gen_protos.stale_files(sim_set.generated_dir, sim_set.proto_dir, grpc=sim_set.grpc) == []

"""Pure translation of pod specs to local processes, and the kubelet's on-disk volume layout."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
from gpuop_sim.workloads.simkubelet.imagepull import PullBackOff, invalid_reference
from gpuop_sim.workloads.simkubelet.podspec import (
    ContainerConfigError,
    PodContext,
    build_env,
    container_mounts,
    image_script_name,
    resolve_argv,
    rewrite_path,
    volume_dirs,
)
from gpuop_sim.workloads.simkubelet.status import ContainerState, pod_status
from gpuop_sim.workloads.simkubelet.volumes import DATA_LINK, write_atomic_dir


@pytest.mark.parametrize(
    ("image", "script"),
    [
        ("ghcr.io/gpuop/gpuop-device-plugin:0.1.0", "gpuop-device-plugin"),
        ("gpuop-node-labeller", "gpuop-node-labeller"),
        ("localhost:5000/gpuop/gpuop-operator@sha256:abc", "gpuop-operator"),
        ("registry:5000/x/y:1.2@sha256:abc", "y"),
    ],
)
def test_image_maps_to_its_last_path_element(image: str, script: str) -> None:
    assert image_script_name(image) == script


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    for name in ("gpuop-device-plugin", "gpuop-operator"):
        (tmp_path / name).write_text("#!/bin/sh\n")
    return tmp_path


def test_resolve_uses_the_image_script_with_args(scripts: Path) -> None:
    resolved = resolve_argv({"image": "ghcr.io/gpuop/gpuop-device-plugin:1", "args": ["--once"]}, scripts)
    assert resolved.program == [str(scripts / "gpuop-device-plugin")]
    assert resolved.args == ["--once"]


def test_resolve_prefers_a_command_that_is_a_script(scripts: Path) -> None:
    container = {
        "image": "ghcr.io/gpuop/gpuop-device-plugin:1",
        "command": ["gpuop-operator", "run"],
        "args": ["-v"],
    }
    resolved = resolve_argv(container, scripts)
    assert resolved.program == [str(scripts / "gpuop-operator")]
    assert resolved.args == ["run", "-v"]


def test_resolve_override_table_keeps_its_program_apart_from_pod_args(scripts: Path) -> None:
    overrides = {"test/echo": ["/usr/bin/python3", "/opt/echo.py"]}
    resolved = resolve_argv({"image": "test/echo:2", "args": ["--x=/host"]}, scripts, overrides)
    assert resolved.program == ["/usr/bin/python3", "/opt/echo.py"]
    assert resolved.args == ["--x=/host"]


def test_unknown_image_is_a_pull_error_naming_the_image(scripts: Path) -> None:
    with pytest.raises(ContainerConfigError) as caught:
        resolve_argv({"image": "docker.io/library/busybox:1"}, scripts)
    assert caught.value.reason == "ErrImagePull"
    assert "busybox" in caught.value.message


def test_command_that_is_not_a_script_cannot_run(scripts: Path) -> None:
    with pytest.raises(ContainerConfigError) as caught:
        resolve_argv({"image": "gpuop-operator:1", "command": ["/bin/sh", "-c", "x"]}, scripts)
    assert caught.value.reason == "RunContainerError"


CTX = PodContext("amd-0", "127.10.0.1", Path("/state/kubeconfig"), {"GPUOP_HOST_ROOT": "/state/nodes/amd-0"})
POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "gpuop", "uid": "u1", "labels": {"app": "x"}},
    "spec": {"nodeName": "amd-0"},
}


def test_env_resolves_downward_api_configmaps_secrets_and_injects_node_facts() -> None:
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "A", "value": "1"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}},
            {
                "name": "MISSING_OK",
                "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nope", "optional": True}},
            },
            {"name": "NODE_NAME", "value": "overridden-by-the-sim"},
        ],
    }
    configmaps = {"gpuop/cm": {"data": {"level": "debug"}}}
    secrets = {"gpuop/sec": {"data": {"k": base64.b64encode(b"v").decode()}}}
    env = build_env(container, POD, CTX, configmaps, secrets)
    assert env["A"] == "1"
    assert env["NODE"] == "amd-0"
    assert env["APP"] == "x"
    assert env["IP"] == "127.10.0.1"
    assert env["S"] == "v"
    assert env["CM_level"] == "debug"
    assert "MISSING_OK" not in env
    assert env["NODE_NAME"] == env["GPUOP_NODE_NAME"] == "amd-0"
    assert env["GPUOP_BIND_ADDRESS"] == "127.10.0.1"
    assert env["GPUOP_KUBECONFIG"] == "/state/kubeconfig"
    assert env["GPUOP_HOST_ROOT"] == "/state/nodes/amd-0"


@pytest.mark.parametrize(
    "ref",
    [
        {"configMapKeyRef": {"name": "absent", "key": "k"}},
        {"secretKeyRef": {"name": "sec", "key": "absent"}},
        {"fieldRef": {"fieldPath": "spec.unknownField"}},
    ],
)
def test_env_reference_that_cannot_resolve_is_a_config_error(ref: dict[str, Any]) -> None:
    container = {"env": [{"name": "X", "valueFrom": ref}]}
    with pytest.raises(ContainerConfigError) as caught:
        build_env(container, POD, CTX, {}, {"gpuop/sec": {"data": {}}})
    assert caught.value.reason == "CreateContainerConfigError"


def test_volumes_map_to_node_root_or_pod_dirs_and_paths_are_rewritten(tmp_path: Path) -> None:
    pod = {
        "spec": {
            "volumes": [
                {"name": "host", "hostPath": {"path": "/"}},
                {"name": "sys", "hostPath": {"path": "/sys"}},
                {"name": "cfg", "configMap": {"name": "c"}},
            ]
        }
    }
    dirs = volume_dirs(pod, tmp_path / "root", tmp_path / "pod")
    assert dirs == {
        "host": tmp_path / "root",
        "sys": tmp_path / "root/sys",
        "cfg": tmp_path / "pod/volumes/cfg",
    }
    container = {
        "volumeMounts": [
            {"name": "host", "mountPath": "/host"},
            {"name": "sys", "mountPath": "/host/sys"},
            {"name": "cfg", "mountPath": "/etc/gpuop/"},
        ]
    }
    mounts = container_mounts(container, dirs)
    assert rewrite_path("--host-root=/host", mounts) == f"--host-root={tmp_path / 'root'}"
    assert rewrite_path("/host/sys/class/drm", mounts) == f"{tmp_path / 'root/sys'}/class/drm"
    assert (
        rewrite_path("--config=/etc/gpuop/config.yaml", mounts)
        == f"--config={tmp_path / 'pod/volumes/cfg'}/config.yaml"
    )
    assert rewrite_path("/hostname", mounts) == "/hostname"  # only whole path components match
    assert rewrite_path("--verbose", mounts) == "--verbose"
    with pytest.raises(ContainerConfigError):
        container_mounts({"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}, dirs)


def test_configmap_volume_updates_swap_the_data_link_atomically(tmp_path: Path) -> None:
    target = tmp_path / "cfg"
    assert write_atomic_dir(target, {"config.yaml": b"a: 1\n", "extra": b"x"})
    first = os.readlink(target / DATA_LINK)
    assert (target / "config.yaml").read_bytes() == b"a: 1\n"
    assert os.readlink(target / "config.yaml") == f"{DATA_LINK}/config.yaml"
    assert not write_atomic_dir(target, {"config.yaml": b"a: 1\n", "extra": b"x"})  # unchanged: no swap
    assert write_atomic_dir(target, {"config.yaml": b"a: 2\n"})
    assert os.readlink(target / DATA_LINK) != first
    assert not (target / first).exists()  # the old data dir is gone
    assert (target / "config.yaml").read_bytes() == b"a: 2\n"
    assert not (target / "extra").exists()  # a removed key loses its link


def test_pod_status_is_ready_only_when_running_and_every_container_is_ready() -> None:
    ready = ContainerState("a", "img", state="running", ready=True)
    waiting = ContainerState("b", "img")
    status = pod_status("Running", [ready, waiting], "127.10.0.1", "t0", "t1", qos_class="Burstable")
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Ready"] == "False"
    assert status["podIP"] == status["hostIP"] == "127.10.0.1"
    status = pod_status("Running", [ready], "127.10.0.1", "t0", "t1", qos_class="Burstable")
    assert status["qosClass"] == "Burstable"  # the API server's, written back unchanged
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    assert status["containerStatuses"][0]["state"] == {"running": {"startedAt": ""}}


def no_token(_pod: Any, _source: Any) -> str:
    raise AssertionError("no token asked for")


def api_access_pod() -> dict[str, Any]:
    """A pod as the API server admits it: the kube-api-access projected volume added."""
    sources = [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]
    return {
        "metadata": {"name": "agent-x", "namespace": "gpuop", "uid": "u-9"},
        "spec": {
            "serviceAccountName": "agent",
            "volumes": [{"name": "kube-api-access-1", "projected": {"sources": sources}}],
        },
    }


def test_projected_api_access_volume_holds_the_pods_token_the_cluster_ca_and_namespace(
    tmp_path: Path,
) -> None:
    from gpuop_sim.workloads.simkubelet.incluster import (
        access_files,
        pod_kubeconfig,
        service_env,
        token_request,
    )
    from gpuop_sim.workloads.simkubelet.volumes import refresh_pod_volumes

    pod = api_access_pod()
    root_ca = {
        "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"},
        "metadata": {},
    }
    asked: list[dict[str, Any]] = []

    def token_for(p: Any, source: Any) -> str:
        asked.append(token_request(p, source))
        return "tok-123"

    dirs = {"kube-api-access-1": tmp_path / "sa"}
    lookup = lambda kind: {"gpuop/kube-root-ca.crt": root_ca} if kind == "configmaps" else {}  # noqa: E731
    refresh_pod_volumes(pod, dirs, lookup, {}, force=True, token_for=token_for)
    assert (tmp_path / "sa/token").read_text() == "tok-123"
    assert (tmp_path / "sa/ca.crt").read_text() == root_ca["data"]["ca.crt"]
    assert (tmp_path / "sa/namespace").read_text() == "gpuop"
    bound = asked[0]["spec"]["boundObjectRef"]
    assert (bound["kind"], bound["name"], bound["uid"]) == ("Pod", "agent-x", "u-9")
    assert asked[0]["spec"]["expirationSeconds"] == 3607

    token, ca = access_files(pod, dirs)
    assert (token, ca) == (tmp_path / "sa/token", tmp_path / "sa/ca.crt")
    config = pod_kubeconfig(pod, "https://10.0.0.1:6443", token, ca)
    assert config["users"][0]["user"] == {"tokenFile": str(tmp_path / "sa/token")}
    assert config["clusters"][0]["cluster"]["certificate-authority"] == str(tmp_path / "sa/ca.crt")
    assert config["contexts"][0]["context"]["namespace"] == "gpuop"
    env = service_env("https://10.0.0.1:6443")
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("10.0.0.1", "6443")


def test_a_missing_configmap_in_a_projection_fails_the_mount(tmp_path: Path) -> None:
    from gpuop_sim.workloads.simkubelet.volumes import refresh_pod_volumes

    with pytest.raises(ContainerConfigError) as error:
        refresh_pod_volumes(
            api_access_pod(),
            {"kube-api-access-1": tmp_path / "sa"},
            lambda _k: {},
            {},
            force=True,
            token_for=lambda _p, _s: "t",
        )
    assert error.value.reason == "ContainerCreating"
    assert error.value.message == (
        'MountVolume.SetUp failed for volume "kube-api-access-1" : configmap "kube-root-ca.crt" not found'
    )


def test_downward_api_volume_writes_annotations_labels_and_names(tmp_path: Path) -> None:
    from gpuop_sim.workloads.simkubelet.volumes import refresh_pod_volumes

    pod: dict[str, Any] = {
        "metadata": {
            "name": "job-pod",
            "namespace": "ops",
            "uid": "u-1",
            "labels": {"app": "x", "tier": "b"},
            "annotations": {"gpuop.dev/playbook-vars": '{"vendor":"amd"}'},
        },
        "spec": {
            "volumes": [
                {
                    "name": "vars",
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "vars.json",
                                "fieldRef": {"fieldPath": "metadata.annotations['gpuop.dev/playbook-vars']"},
                            },
                            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                        ]
                    },
                }
            ]
        },
    }
    dirs = {"vars": tmp_path / "vars"}
    versions: dict[str, str] = {}
    refresh_pod_volumes(pod, dirs, lambda _kind: {}, versions, force=True, token_for=no_token)
    assert (tmp_path / "vars/vars.json").read_text() == '{"vendor":"amd"}'
    assert (tmp_path / "vars/labels").read_text() == 'app="x"\ntier="b"'
    assert (tmp_path / "vars/name").read_text() == "job-pod"
    pod["metadata"]["annotations"]["gpuop.dev/playbook-vars"] = '{"vendor":"nvidia"}'
    refresh_pod_volumes(pod, dirs, lambda _kind: {}, versions, force=False, token_for=no_token)
    assert (tmp_path / "vars/vars.json").read_text() == '{"vendor":"nvidia"}'


def test_downward_api_volume_with_an_unsupported_field_is_a_config_error(tmp_path: Path) -> None:
    from gpuop_sim.workloads.simkubelet.volumes import refresh_pod_volumes

    pod: dict[str, Any] = {
        "metadata": {"name": "p"},
        "spec": {
            "volumes": [
                {
                    "name": "v",
                    "downwardAPI": {"items": [{"path": "x", "fieldRef": {"fieldPath": "spec.nodeName"}}]},
                }
            ]
        },
    }
    with pytest.raises(ContainerConfigError, match=r"spec\.nodeName"):
        refresh_pod_volumes(pod, {"v": tmp_path / "v"}, lambda _kind: {}, {}, force=True, token_for=no_token)


@pytest.mark.parametrize(
    "image",
    ["ghcr.io/Nobody/upper:1", "busybox:1 ", "busybox::1", "registry:5000/", "a/b@sha256:xyz", "", "-lead"],
)
def test_malformed_reference_is_invalid_image_name_before_any_pull(scripts: Path, image: str) -> None:
    """Bad inputs: upper case in a path, a space, an empty tag, no path, a short digest, empty, a
    leading dash; each refused before looking for an image, with the kubelet's message."""
    with pytest.raises(ContainerConfigError) as caught:
        resolve_argv({"image": image}, scripts, {image: ["/bin/true"]})
    assert caught.value.reason == "InvalidImageName"
    assert caught.value.message == (
        f'Failed to apply default image tag "{image}": '
        f'couldn\'t parse image name "{image}": invalid reference format'
    )


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "docker.io/library/busybox:1.36",
        "localhost:5000/a/b_c:v1.0-rc",
        "ghcr.io/gpuop/x@sha256:" + "a" * 64,
    ],
)
def test_well_formed_references_parse(image: str) -> None:
    assert invalid_reference(image) == ""


def test_image_pull_back_off_doubles_from_ten_seconds_up_to_five_minutes() -> None:
    backoff = PullBackOff()
    delays = [backoff.failed("img", 1000.0) for _ in range(7)]
    assert delays == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert backoff.backing_off(["other", "img"], 1299.0) == "img"
    assert backoff.backing_off(["other", "img"], 1300.0) == ""

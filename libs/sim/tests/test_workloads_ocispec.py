"""Container mode's pure parts: the OCI runtime spec a pod's container gets, and its image's config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuop_sim.workloads.simkubelet.containermode import container_kubeconfig, image_env, runc_id
from gpuop_sim.workloads.simkubelet.identity import DEFAULT_CAPABILITIES, run_identity
from gpuop_sim.workloads.simkubelet.imagestore import ImageConfig, parse_image_config, pull_error
from gpuop_sim.workloads.simkubelet.ocispec import (
    MASKED_PATHS,
    Mount,
    RuntimeInputs,
    container_args,
    runtime_spec,
    volume_mounts,
)
from gpuop_sim.workloads.simkubelet.podspec import ContainerConfigError
from gpuop_sim.workloads.simkubelet.runc import CAPABILITIES, capabilities_in, start_failure

NODE_CAPS = frozenset(CAPABILITIES) - {"SYS_RESOURCE"}  # a sandboxed node, as CI's machine is
IMAGE = ImageConfig(
    reference="gpuop/gpuop-device-plugin:0.1.0",
    image_id="abc",
    env=(("PATH", "/app/bin:/usr/bin"), ("LANG", "C.UTF-8")),
    entrypoint=("/app/bin/gpuop-device-plugin",),
    cmd=(),
    user="65532:65532",
    working_dir="/src",
)


def _pod(container: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    main = {"name": "main", "image": IMAGE.reference, **(container or {})}
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"containers": [main], **spec},
    }


def _spec(pod: dict[str, Any], mounts: list[Mount] | None = None) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    inputs = RuntimeInputs(
        args=container_args(IMAGE, container),
        env=image_env(IMAGE, run_identity(pod, container, IMAGE.user)),
        working_dir="/src",
        identity=run_identity(pod, container, IMAGE.user),
        mounts=mounts or [],
        rootfs=Path("/bundle/rootfs"),
        hostname="p",
        node_capabilities=NODE_CAPS,
    )
    return runtime_spec(pod, container, inputs)


def _destinations(spec: dict[str, Any]) -> list[str]:
    return [m["destination"] for m in spec["mounts"]]


# -- the image's config ------------------------------------------------------------------------
def test_image_config_comes_from_podman_inspect_output() -> None:
    inspected = {
        "Id": "d24e75cc40ff",
        "Config": {
            "User": "65532:65532",
            "Env": ["PATH=/usr/local/bin:/usr/bin", "EMPTY=", "WITH_EQUALS=a=b"],
            "Entrypoint": ["/app/bin/gpuop-operator"],
            "Cmd": ["--help"],
            "WorkingDir": "/work",
        },
    }
    config = parse_image_config("gpuop/gpuop-operator:0.1.0", inspected)
    assert config.user == "65532:65532" and config.image_id == "d24e75cc40ff"
    assert config.env_map == {"PATH": "/usr/local/bin:/usr/bin", "EMPTY": "", "WITH_EQUALS": "a=b"}
    assert (config.entrypoint, config.cmd, config.working_dir) == (
        ("/app/bin/gpuop-operator",),
        ("--help",),
        "/work",
    )
    # An image with no config at all (a bare import): root, no command, nothing set.
    bare = parse_image_config("localhost/bare:1", {"Id": "x"})
    assert (bare.user, bare.entrypoint, bare.cmd, bare.env) == ("", (), (), ())


def test_a_missing_image_is_err_image_pull_with_podmans_message() -> None:
    error = pull_error("gpuop/nope:1", "IfNotPresent", "Error: gpuop/nope:1: image not known\n")
    assert (error.reason, error.message) == (
        "ErrImagePull",
        'Failed to pull image "gpuop/nope:1": gpuop/nope:1: image not known',
    )
    never = pull_error("gpuop/nope:1", "Never", "Error: gpuop/nope:1: image not known")
    assert never.reason == "ErrImageNeverPull"
    assert never.message == 'Container image "gpuop/nope:1" is not present with pull policy of Never'


# -- command and args --------------------------------------------------------------------------
def test_command_and_args_follow_kubernetes_over_entrypoint_and_cmd() -> None:
    image = ImageConfig("i", "x", entrypoint=("/entry",), cmd=("--default",))
    assert container_args(image, {}) == ["/entry", "--default"]
    assert container_args(image, {"args": ["--mine"]}) == ["/entry", "--mine"]
    # command replaces the entrypoint and drops the image's Cmd.
    assert container_args(image, {"command": ["/bin/sh"]}) == ["/bin/sh"]
    assert container_args(image, {"command": ["/bin/sh"], "args": ["-c", "true"]}) == [
        "/bin/sh",
        "-c",
        "true",
    ]


def test_an_image_with_no_entrypoint_and_no_command_is_containerds_no_command_specified() -> None:
    with pytest.raises(ContainerConfigError) as raised:
        container_args(ImageConfig("i", "x"), {"name": "main"})
    assert raised.value.reason == "CreateContainerError"
    assert "no command specified" in raised.value.message


# -- identity ----------------------------------------------------------------------------------
def test_the_image_user_and_run_as_user_reach_the_process() -> None:
    spec = _spec(_pod())
    assert spec["process"]["user"] == {"uid": 65532, "gid": 65532}
    spec = _spec(
        _pod(
            {"securityContext": {"runAsUser": 0}},
            securityContext={"supplementalGroups": [44], "fsGroup": 2000},
        )
    )
    assert spec["process"]["user"] == {"uid": 0, "gid": 0, "additionalGids": [44, 2000]}


def test_default_capabilities_and_add_drop() -> None:
    default = _spec(_pod())["process"]["capabilities"]
    assert default["bounding"] == sorted(f"CAP_{c}" for c in DEFAULT_CAPABILITIES)
    assert default["effective"] == default["permitted"] == default["bounding"]
    changed = _spec(
        _pod({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"], "drop": ["NET_RAW", "CAP_KILL"]}}})
    )
    caps = set(changed["process"]["capabilities"]["bounding"])
    assert "CAP_SYS_ADMIN" in caps and not {"CAP_NET_RAW", "CAP_KILL"} & caps
    only = _spec(_pod({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["SYS_CHROOT"]}}}))
    assert only["process"]["capabilities"]["bounding"] == ["CAP_SYS_CHROOT"]


def test_add_all_gives_every_capability_the_node_has_and_no_more() -> None:
    spec = _spec(_pod({"securityContext": {"capabilities": {"add": ["ALL"]}}}))
    assert set(spec["process"]["capabilities"]["bounding"]) == {f"CAP_{c}" for c in NODE_CAPS}
    assert "CAP_SYS_RESOURCE" not in spec["process"]["capabilities"]["bounding"]


def test_allow_privilege_escalation_false_sets_no_new_privileges() -> None:
    assert _spec(_pod())["process"]["noNewPrivileges"] is False
    spec = _spec(_pod({"securityContext": {"allowPrivilegeEscalation": False}}))
    assert spec["process"]["noNewPrivileges"] is True


def test_privileged_gets_every_node_capability_all_devices_and_no_masks() -> None:
    plain = _spec(_pod())
    assert plain["linux"]["maskedPaths"] == list(MASKED_PATHS)
    assert "ro" in next(m for m in plain["mounts"] if m["destination"] == "/sys")["options"]
    assert plain["linux"]["resources"]["devices"] == [{"allow": False, "access": "rwm"}]
    spec = _spec(_pod({"securityContext": {"privileged": True}}))
    assert set(spec["process"]["capabilities"]["bounding"]) == {f"CAP_{c}" for c in NODE_CAPS}
    assert "maskedPaths" not in spec["linux"] and "readonlyPaths" not in spec["linux"]
    assert spec["linux"]["resources"]["devices"] == [{"allow": True, "access": "rwm"}]
    assert "rw" in next(m for m in spec["mounts"] if m["destination"] == "/sys")["options"]


def test_read_only_root_filesystem() -> None:
    assert _spec(_pod())["root"] == {"path": "/bundle/rootfs", "readonly": False}
    spec = _spec(_pod({"securityContext": {"readOnlyRootFilesystem": True}}))
    assert spec["root"] == {"path": "/bundle/rootfs", "readonly": True}


# -- namespaces --------------------------------------------------------------------------------
def test_host_pid_and_host_network_leave_out_their_namespaces() -> None:
    types = [ns["type"] for ns in _spec(_pod())["linux"]["namespaces"]]
    assert set(types) == {"mount", "ipc", "pid", "uts"}  # never "network": docs/simulated-cluster.md
    assert _spec(_pod())["hostname"] == "p"
    host = _spec(_pod(hostPID=True, hostNetwork=True))
    assert {ns["type"] for ns in host["linux"]["namespaces"]} == {"mount", "ipc"}
    assert "hostname" not in host


# -- volumes -----------------------------------------------------------------------------------
VOLUMES = [
    {"name": "host", "hostPath": {"path": "/"}},
    {"name": "config", "configMap": {"name": "c"}},
    {"name": "creds", "secret": {"secretName": "s"}},
    {"name": "meta", "downwardAPI": {"items": []}},
    {"name": "token", "projected": {"sources": []}},
    {"name": "scratch", "emptyDir": {}},
]


def test_each_volume_kind_is_a_bind_mount_api_data_read_only() -> None:
    dirs = {v["name"]: Path("/vol") / v["name"] for v in VOLUMES}
    container = {
        "volumeMounts": [
            {"name": "host", "mountPath": "/host"},
            {"name": "config", "mountPath": "/etc/gpuop"},
            {"name": "creds", "mountPath": "/creds", "readOnly": False},
            {"name": "meta", "mountPath": "/meta"},
            {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
            {"name": "scratch", "mountPath": "/scratch/", "subPath": "a/b"},
            {"name": "host", "mountPath": "/host-ro", "readOnly": True},
        ]
    }
    mounts = volume_mounts(_pod(container, volumes=VOLUMES), container, dirs)
    assert [(m.destination, str(m.source), m.readonly) for m in mounts] == [
        ("/host", "/vol/host", False),
        ("/etc/gpuop", "/vol/config", True),
        ("/creds", "/vol/creds", True),  # the kubelet makes secret volumes read-only regardless
        ("/meta", "/vol/meta", True),
        ("/var/run/secrets/kubernetes.io/serviceaccount", "/vol/token", True),
        ("/scratch", "/vol/scratch/a/b", False),
        ("/host-ro", "/vol/host", True),
    ]
    binds = [m for m in _spec(_pod(container, volumes=VOLUMES), mounts)["mounts"] if m["type"] == "bind"]
    assert binds[0]["options"] == ["rbind", "rprivate", "rw"]
    assert next(b for b in binds if b["destination"] == "/etc/gpuop")["options"][-1] == "ro"


def test_a_host_path_over_sys_or_dev_replaces_the_runtimes_own_mount() -> None:
    mounts = [
        Mount("/sys", Path("/node/sys")),
        Mount("/dev", Path("/node/dev")),
        Mount("/host", Path("/node")),
    ]
    destinations = _destinations(_spec(_pod(), mounts))
    assert destinations.count("/sys") == 1 and destinations.count("/dev") == 1
    assert "/dev/pts" not in destinations and "/dev/shm" not in destinations
    sys_mount = next(m for m in _spec(_pod(), mounts)["mounts"] if m["destination"] == "/sys")
    assert sys_mount["type"] == "bind" and sys_mount["source"] == "/node/sys"
    # Mounts nest in path order: /host before anything under it.
    nested = _destinations(_spec(_pod(), [Mount("/host/sys", Path("/a")), Mount("/host", Path("/b"))]))
    assert nested.index("/host") < nested.index("/host/sys")


@pytest.mark.parametrize(
    ("mount", "says"),
    [
        ({"name": "missing", "mountPath": "/x"}, "volumeMount 'missing' names no pod volume"),
        ({"name": "scratch", "mountPath": "relative"}, "mountPath must be an absolute path"),
        (
            {"name": "scratch", "mountPath": "/x", "subPath": "../../etc"},
            "subPath '../../etc' leaves the volume",
        ),
        ({"name": "scratch", "mountPath": "/x", "subPath": "/etc"}, "subPath '/etc' leaves the volume"),
    ],
)
def test_bad_volume_mounts_are_config_errors_naming_the_mount(mount: dict[str, Any], says: str) -> None:
    container = {"volumeMounts": [mount]}
    with pytest.raises(ContainerConfigError) as raised:
        volume_mounts(_pod(container, volumes=VOLUMES), container, {"scratch": Path("/vol/scratch")})
    assert raised.value.reason == "CreateContainerConfigError"
    assert says in raised.value.message


# -- env, kubeconfig, ids, runc's answers ------------------------------------------------------
def test_image_env_reaches_the_process_with_home_for_its_user() -> None:
    env = _spec(_pod())["process"]["env"]
    assert "PATH=/app/bin:/usr/bin" in env and "LANG=C.UTF-8" in env and "HOME=/" in env


def test_the_container_kubeconfig_names_the_token_where_this_container_mounts_it() -> None:
    volumes = [
        {
            "name": "kube-api-access-x",
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"path": "token"}},
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                ]
            },
        }
    ]
    mount = {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    pod = _pod({"volumeMounts": [mount]}, volumes=volumes)
    config = container_kubeconfig(pod, pod["spec"]["containers"][0], "https://127.0.0.1:6443")
    assert config["users"][0]["user"] == {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
    assert (
        config["clusters"][0]["cluster"]["certificate-authority"]
        == "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    )
    # A container that does not mount the token gets no credentials at all.
    bare = container_kubeconfig(pod, {"name": "other"}, "http://127.0.0.1:1")
    assert bare["users"][0]["user"] == {}


def test_runc_ids_keep_only_the_characters_runc_accepts() -> None:
    assert runc_id("0b1c-uid", "main", 2) == "0b1c-uid-main-2"
    assert runc_id("u", "a/b c", 0) == "u-a_b_c-0"


def test_capability_masks_and_runc_start_errors(tmp_path: Path) -> None:
    assert capabilities_in(0x20000420) == {"KILL", "NET_BIND_SERVICE", "AUDIT_WRITE"}
    log = tmp_path / "runc.log"
    assert start_failure(log) is None  # no log: runc never complained
    log.write_text(
        '{"level":"warning","msg":"a warning","time":"t"}\n'
        "not json\n"
        '{"level":"error",'
        '"msg":"runc run failed: exec: \\"/nope\\": stat /nope: no such file or directory"}\n'
    )
    assert start_failure(log) == 'runc run failed: exec: "/nope": stat /nope: no such file or directory'

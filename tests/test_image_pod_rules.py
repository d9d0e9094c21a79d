"""The rules tests/images uses to start a chart's container from its image, on hand-written pods.

They run in `make test` (no images needed): the kubelet's runAsNonRoot refusals, the container's
securityContext winning over the pod's, and the podman options that follow from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.images.imagecheck import container_runs, non_root_refusal, numeric_user, run_options


def daemonset(pod_security: dict[str, Any], container_security: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "template": {
                "spec": {
                    "securityContext": pod_security,
                    "volumes": [
                        {"name": "sys", "hostPath": {"path": "/sys"}},
                        {"name": "scratch", "emptyDir": {}},
                    ],
                    "containers": [
                        {"name": "sidecar", "image": "busybox:1"},
                        {
                            "name": "agent",
                            "image": "ghcr.io/gpuop/gpuop-node-labeller:0.1.0@sha256:abc",
                            "securityContext": container_security,
                            "volumeMounts": [
                                {"name": "sys", "mountPath": "/sys", "readOnly": True},
                                {"name": "scratch", "mountPath": "/scratch"},
                            ],
                        },
                    ],
                }
            }
        },
    }


def test_container_fields_win_over_the_pods_and_other_images_are_left_out() -> None:
    pod = daemonset(
        {"runAsNonRoot": True, "runAsUser": 65532}, {"runAsUser": 1000, "readOnlyRootFilesystem": True}
    )
    (run,) = container_runs([pod], "gpuop-node-labeller")
    assert (run.workload, run.uid, run.run_as_non_root, run.read_only_root) == (
        "DaemonSet/agent/agent",
        1000,
        True,
        True,
    )
    assert [(m.path, m.kind, m.read_only, m.host_path) for m in run.mounts] == [
        ("/sys", "hostPath", True, "/sys"),
        ("/scratch", "emptyDir", False, ""),
    ]


@pytest.mark.parametrize(
    ("pod_security", "image_user", "refusal"),
    [
        ({"runAsNonRoot": True}, "nobody", "image has non-numeric user (nobody)"),
        ({"runAsNonRoot": True}, "", "image will run as root"),
        ({"runAsNonRoot": True}, "0:0", "image will run as root"),
        ({"runAsNonRoot": True, "runAsUser": 0}, "65532", "runAsUser breaks non-root policy"),
        ({"runAsNonRoot": True}, "65532:65532", None),
        ({"runAsNonRoot": True, "runAsUser": 65532}, "nobody", None),
        ({"runAsUser": 0}, "65532", None),
    ],
)
def test_run_as_non_root_is_refused_as_the_kubelet_refuses_it(
    pod_security: dict[str, Any], image_user: str, refusal: str | None
) -> None:
    (run,) = container_runs([daemonset(pod_security, {})], "gpuop-node-labeller")
    why = non_root_refusal(run, image_user)
    assert (why is None) == (refusal is None), why
    assert refusal is None or refusal in str(why)


@pytest.mark.parametrize(
    ("user", "parsed"), [("65532:65532", (65532, 65532)), ("0", (0, None)), ("", (0, None))]
)
def test_numeric_users_parse_and_names_do_not(user: str, parsed: tuple[int, int | None]) -> None:
    assert numeric_user(user) == parsed
    assert numeric_user("nobody") is None
    assert numeric_user("65532:nogroup") is None


def test_podman_options_follow_the_pod(tmp_path: Path) -> None:
    pod = daemonset(
        {"runAsUser": 0},
        {"readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
    )
    (run,) = container_runs([pod], "gpuop-node-labeller")
    sources = {"/sys": Path("/sys"), "/scratch": tmp_path}
    options = run_options(run, "65532:65532", sources)
    # runAsUser without runAsGroup: group 0, as containerd gives a uid the image's passwd lacks.
    assert options[:2] == ["--user", "0:0"]
    assert "--read-only" in options and "--read-only-tmpfs=false" in options
    assert options[options.index("--cap-drop") + 1] == "ALL"
    assert f"type=bind,src={tmp_path},dst=/scratch,rw" in options
    assert "type=bind,src=/sys,dst=/sys,ro" in options
    # No user in the pod: the image's, group included.
    (plain,) = container_runs([daemonset({}, {})], "gpuop-node-labeller")
    assert run_options(plain, "65532:65532", sources)[:2] == ["--user", "65532:65532"]

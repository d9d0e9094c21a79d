"""`process` containers run as the user, groups and capabilities a node's runtime gives them.

The containers are our own images (`ghcr.io/gpuop/gpuop-operator`: `USER 65532:65532` in its
Dockerfile) running the image's Python; what they see comes from the kernel (/proc/self/status,
a real chroot(2)), so each test fails for the reason it would on a node.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import EVENTS, JOBS, PODS, KubeRest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="changing a container's uid needs root")

NS = "default"
OPERATOR_IMAGE = "ghcr.io/gpuop/gpuop-operator:0.1.0"
CONFIG_MANAGER_IMAGE = "ghcr.io/gpuop/gpuop-config-manager:0.1.0"  # no USER: root
CHROOT = "import os, sys; os.chroot(sys.argv[1]); print('chroot ok')"
STATUS = "print(open('/proc/self/status').read())"
# Capability bit numbers (linux/capability.h) of the names these tests use.
CAP_BITS = {"CHOWN": 0, "KILL": 5, "NET_ADMIN": 12, "NET_RAW": 13, "SYS_CHROOT": 18}


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with SimCluster(profiles=["amd-single"], pods="process", device_plugins=False) as sim:
        yield sim


def _job(name: str, code: str, args: list[str], security: dict[str, Any], **pod_spec: Any) -> dict[str, Any]:
    """The operator's driver-Job shape: the operator's image, the host's / at /host, privileged."""
    container = {
        "name": "playbook",
        "image": OPERATOR_IMAGE,
        "command": ["python", "-c", code],
        "args": args,
        "securityContext": security,
        "volumeMounts": [{"name": "host", "mountPath": "/host"}],
    }
    spec = {
        "restartPolicy": "Never",
        "nodeName": "amd-0",
        "containers": [container],
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
        **pod_spec,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"backoffLimit": 0, "template": {"spec": spec}},
    }


def _finished_pod(cluster: SimCluster, job: str) -> dict[str, Any]:
    api = cluster.api()

    def done() -> dict[str, Any] | None:
        items, _ = api.list(PODS, NS, labelSelector=f"batch.kubernetes.io/job-name={job}")
        return next((p for p in items if p["status"].get("phase") in ("Succeeded", "Failed")), None)

    pod: dict[str, Any] = cluster.wait_for(done, 60, what=f"job {job}'s pod to finish")
    return pod


def _run(
    cluster: SimCluster, name: str, code: str, security: dict[str, Any], **pod_spec: Any
) -> tuple[str, str]:
    """(phase, log) of a Job pod running `code`."""
    cluster.api().create(JOBS, _job(name, code, ["/host"], security, **pod_spec), NS)
    pod = _finished_pod(cluster, name)
    return pod["status"]["phase"], cluster.pod_log(NS, pod["metadata"]["name"], "playbook")


def _status(log: str) -> dict[str, str]:
    fields = (line.split(":", 1) for line in log.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in fields}


def _caps(mask: str) -> set[str]:
    value = int(mask, 16)
    return {name for name, bit in CAP_BITS.items() if value >> bit & 1}


def test_privileged_job_as_the_image_user_cannot_chroot(cluster: SimCluster) -> None:
    # A node: privileged gives the bounding set every capability, but uid 65532 has none effective.
    phase, log = _run(cluster, "chroot-image-user", CHROOT, {"privileged": True})
    assert phase == "Failed"
    assert "PermissionError: [Errno 1] Operation not permitted" in log


def test_privileged_job_as_root_can_chroot(cluster: SimCluster) -> None:
    phase, log = _run(cluster, "chroot-root", CHROOT, {"privileged": True, "runAsUser": 0})
    assert phase == "Succeeded", log
    assert "chroot ok" in log


def test_image_user_with_groups_has_the_default_bounding_set_and_nothing_effective(
    cluster: SimCluster,
) -> None:
    phase, log = _run(
        cluster, "status-default", STATUS, {}, securityContext={"supplementalGroups": [5], "fsGroup": 7}
    )
    status = _status(log)
    assert phase == "Succeeded", log
    assert status["Uid"].split() == ["65532"] * 4
    assert status["Gid"].split() == ["65532"] * 4
    assert status["Groups"].split() == ["5", "7"]
    assert _caps(status["CapBnd"]) == {"CHOWN", "KILL", "NET_RAW", "SYS_CHROOT"}
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
    assert status["NoNewPrivs"] == "0"


def test_drop_all_as_root_leaves_no_capabilities(cluster: SimCluster) -> None:
    phase, log = _run(cluster, "status-drop-all", STATUS, {"runAsUser": 0, "capabilities": {"drop": ["ALL"]}})
    status = _status(log)
    assert phase == "Succeeded", log
    assert int(status["CapBnd"], 16) == 0 and int(status["CapEff"], 16) == 0


def test_drop_all_add_one_as_root_has_just_that_one(cluster: SimCluster) -> None:
    security = {"runAsUser": 0, "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}}
    phase, log = _run(cluster, "status-add", STATUS, security)
    status = _status(log)
    assert phase == "Succeeded", log
    assert int(status["CapEff"], 16) == 1 << CAP_BITS["NET_ADMIN"]
    assert int(status["CapBnd"], 16) == 1 << CAP_BITS["NET_ADMIN"]


def test_allow_privilege_escalation_false_sets_no_new_privs(cluster: SimCluster) -> None:
    phase, log = _run(cluster, "status-nnp", STATUS, {"allowPrivilegeEscalation": False})
    assert phase == "Succeeded", log
    assert _status(log)["NoNewPrivs"] == "1"


def test_run_as_non_root_with_a_root_image_is_never_started(cluster: SimCluster) -> None:
    api: KubeRest = cluster.api()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nonroot-refused", "namespace": NS},
        "spec": {
            "nodeName": "amd-0",
            "securityContext": {"runAsNonRoot": True},
            "containers": [{"name": "cm", "image": CONFIG_MANAGER_IMAGE}],
        },
    }
    created = api.create(PODS, pod, NS)
    uid = created["metadata"]["uid"]
    expected = (
        f'container has runAsNonRoot and image will run as root (pod: "nonroot-refused_{NS}({uid})", '
        "container: cm)"
    )

    def waiting(p: dict[str, Any]) -> bool:
        states = p["status"].get("containerStatuses") or []
        return (
            bool(states)
            and states[0]["state"].get("waiting", {}).get("reason") == "CreateContainerConfigError"
        )

    refused = cluster.wait_for_object(PODS, "nonroot-refused", NS, waiting, timeout=30)
    assert refused["status"]["phase"] == "Pending"
    assert refused["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == expected

    def failed_event() -> dict[str, Any] | None:
        items, _ = api.list(EVENTS, NS, fieldSelector="involvedObject.name=nonroot-refused")
        return next((e for e in items if e["reason"] == "Failed"), None)

    event = cluster.wait_for(failed_event, 30, what="the kubelet's Failed event")
    assert event["type"] == "Warning" and event["message"] == f"Error: {expected}"
    assert event["involvedObject"]["fieldPath"] == "spec.containers{cm}"

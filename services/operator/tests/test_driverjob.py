"""The per-node playbook Job's manifest (`driverjob.build_job`): what a real node needs of it.

The simulated kubelet runs a Job's pod whatever its security context says, so these checks are the
ones that stand for a real node: a Job without them fails there (`chroot /host` is EPERM as uid
65532; apt inside the chroot cannot resolve names from the pod's network namespace).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, get_args

import pytest
from gpuop_common.config.driver import DriverConfig
from gpuop_operator.driverjob import JobSettings, Operation, build_job, job_view, superseded, trim_job

SETTINGS = JobSettings(namespace="gpu-operator", release="gpuop", image="gpuop/gpuop-operator:0.1.0")


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("operation", get_args(Operation))
def test_every_job_kind_runs_as_root_in_the_hosts_namespaces(operation: Operation) -> None:
    pod = pod_spec(build_job(SETTINGS, operation, "node-a", "amd", DriverConfig(version="6.2")))
    (container,) = pod["containers"]
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsGroup": 0}
    assert pod["hostPID"] is True and pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"  # cluster DNS still works on the host network
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["nodeName"] == "node-a" and pod["tolerations"] == [{"operator": "Exists"}]
    assert container["args"][:2] == ["playbook", operation]


def test_the_priority_class_is_a_setting_and_empty_means_none() -> None:
    driver = DriverConfig(version="6.2")
    own = JobSettings(namespace="ns", release="r", image="i", priority_class="gpu-maintenance")
    assert pod_spec(build_job(own, "driver-install", "n", "amd", driver))["priorityClassName"] == (
        "gpu-maintenance"
    )
    none = JobSettings(namespace="ns", release="r", image="i", priority_class="")
    assert "priorityClassName" not in pod_spec(build_job(none, "driver-install", "n", "amd", driver))


def test_spec_driver_image_runs_the_jobs_and_empty_means_the_operators_own() -> None:
    custom = DriverConfig(image="registry.example:5000/gpuop/gpuop-operator:0.1.0", imagePullPolicy="Always")
    (container,) = pod_spec(build_job(SETTINGS, "driver-install", "n", "amd", custom))["containers"]
    assert (container["image"], container["imagePullPolicy"]) == (custom.image, "Always")
    (container,) = pod_spec(build_job(SETTINGS, "driver-install", "n", "amd", DriverConfig()))["containers"]
    assert (container["image"], container["imagePullPolicy"]) == (SETTINGS.image, SETTINGS.image_pull_policy)
    mirror = DriverConfig(image="mirror.example/gpuop-operator:0.1.0")  # no pull policy written
    (container,) = pod_spec(build_job(SETTINGS, "gpu-reset", "n", "amd", mirror))["containers"]
    assert (container["image"], container["imagePullPolicy"]) == (mirror.image, SETTINGS.image_pull_policy)


def test_the_trimmed_job_keeps_the_image_its_pod_runs() -> None:
    """What `superseded` compares with the image the field names now."""
    settings = JobSettings(namespace="gpu-operator", release="gpuop", image="ghcr.io/gpuop/gpuop-operator:1")
    job = build_job(settings, "driver-install", "n0", "amd", DriverConfig(version="6.2"))
    job["status"] = {"active": 1}
    view = job_view(trim_job(job))
    assert view is not None and view.image == "ghcr.io/gpuop/gpuop-operator:1"
    pulling = replace(view, pull_reason="ErrImagePull", pull_message="not found")
    assert pulling.pulling and not view.pulling
    assert superseded(pulling, "ghcr.io/gpuop/gpuop-operator:2")
    assert not superseded(pulling, "ghcr.io/gpuop/gpuop-operator:1") and not superseded(view, "other:1")

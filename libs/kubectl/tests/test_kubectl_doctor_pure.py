"""The doctor and the table on plain objects (the end-to-end scenarios run in
services/operator/tests/test_kubectl_gpuop.py against the operator on a simulated cluster)."""

from __future__ import annotations

from typing import Any

from gpuop_common import nodemeta
from gpuop_kubectl.doctor import diagnose
from gpuop_kubectl.findings import ALL_CODES
from gpuop_kubectl.gather import redact_pod
from gpuop_kubectl.snapshot import Snapshot
from gpuop_kubectl.table import node_rows


def gpu_node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {nodemeta.AMD_PRESENT_LABEL: "true", **labels}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"amd.com/gpu": "8"}},
    }


def config(name: str, **match: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "gpu-operator"},
        "spec": {"selector": {"matchLabels": match}},
    }


def test_codes_are_unique_and_documented() -> None:
    codes = [c.code for c in ALL_CODES]
    assert len(codes) == len(set(codes))
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "doctor.md").read_text()
    assert all(f"`{c.code}`" in doc for c in ALL_CODES)


def test_a_node_no_selector_matches_is_s001_and_a_matched_one_serves() -> None:
    snap = Snapshot(
        "gpu-operator", nodes=[gpu_node("a", pool="x"), gpu_node("b")], deviceconfigs=[config("x", pool="x")]
    )
    assert diagnose(snap, "a").ok and diagnose(snap, "a").serving == "amd.com/gpu=8"
    report = diagnose(snap, "b")
    assert not report.ok and report.verdict is not None and report.verdict.code.code == "GPUOP-S001"


def test_table_rows_come_from_labels() -> None:
    node = gpu_node("a", **{nodemeta.GPU_COUNT_LABEL: "8", nodemeta.GPU_MODEL_LABEL: "AMD-Instinct-MI300X"})
    (row,) = node_rows([node], [])
    assert (row.vendor, row.gpus, row.resources) == ("amd", "AMD-Instinct-MI300X x8", "amd.com/gpu=8")


def test_redact_pod_drops_secret_env_values() -> None:
    pod = {
        "spec": {
            "containers": [{"env": [{"name": "API_TOKEN", "value": "t"}, {"name": "MODE", "value": "m"}]}]
        }
    }
    env = redact_pod(pod)["spec"]["containers"][0]["env"]
    assert env == [{"name": "API_TOKEN", "value": "<redacted>"}, {"name": "MODE", "value": "m"}]


def test_a_node_in_the_driver_uninstall_walk_is_d005_and_a_failed_uninstall_d006() -> None:
    """`driver.enable: false` with `uninstallPolicy: Uninstall`: the doctor follows the walk although
    the DeviceConfig no longer enables the driver, and a finished uninstall is no finding at all."""
    disabled = config("x", pool="x")
    disabled["spec"]["driver"] = {"enable": False, "uninstallPolicy": "Uninstall"}
    state, version = nodemeta.DRIVER_UPGRADE_STATE_LABEL, nodemeta.DRIVER_VERSION_LABEL
    walking = gpu_node("walking", pool="x", **{state: "uninstalling", version: "6.12"})
    failed = gpu_node("failed", pool="x", **{state: "uninstall-failed", version: "6.12"})
    failed["metadata"]["annotations"] = {nodemeta.DRIVER_FAILURE_ANNOTATION: "driver uninstall Job failed"}
    done = gpu_node("done", pool="x")
    snap = Snapshot("gpu-operator", nodes=[walking, failed, done], deviceconfigs=[disabled])
    report = diagnose(snap, "walking")
    assert report.verdict is not None and report.verdict.code.code == "GPUOP-D005"
    assert any("driver-uninstall Job" in line for line in report.verdict.evidence)
    report = diagnose(snap, "failed")
    assert report.verdict is not None and report.verdict.code.code == "GPUOP-D006"
    assert "uninstall-required" in report.verdict.next_step
    assert not any(x.code.code.startswith("GPUOP-D") for x in diagnose(snap, "done").findings)


def test_a_driver_job_whose_pod_cannot_pull_its_image_is_d007_naming_the_image_and_the_field() -> None:
    """Bad input: spec.driver.image names an image the node cannot pull. The Job is active and its
    pod Pending (a kubelet never fails it), so without D007 the node read as D001 "wait"."""
    dc = config("x", pool="x")
    dc["spec"]["driver"] = {"enable": True, "image": "registry.invalid/gpuop/driver:6.12"}
    node = gpu_node("n0", pool="x")
    job = {
        "metadata": {
            "name": "gpuop-driver-n0",
            "namespace": "gpu-operator",
            "labels": {"gpuop.dev/operation": "driver-install"},
            "annotations": {"gpuop.dev/node": "n0"},
        },
        "status": {"active": 1},
    }
    image = "registry.invalid/gpuop/driver:6.12"
    for reason, message in (
        ("ImagePullBackOff", f'Back-off pulling image "{image}"'),
        ("InvalidImageName", f'Failed to apply default image tag "{image}": invalid reference format'),
    ):
        pod = {
            "metadata": {
                "name": "gpuop-driver-n0-a",
                "namespace": "gpu-operator",
                "labels": {"job-name": job["metadata"]["name"]},
            },
            "spec": {"nodeName": "n0"},
            "status": {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "playbook",
                        "image": image,
                        "state": {"waiting": {"reason": reason, "message": message}},
                    }
                ],
            },
        }
        report = diagnose(
            Snapshot("gpu-operator", nodes=[node], deviceconfigs=[dc], jobs=[job], pods=[pod]), "n0"
        )
        assert report.verdict is not None and report.verdict.code.code == "GPUOP-D007", report
        assert image in report.verdict.summary and reason in report.verdict.summary
        assert message in report.verdict.evidence
        assert "spec.driver.image" in report.verdict.next_step

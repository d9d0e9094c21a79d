"""`gpuop-operator` as a process: --apply-crd (the chart's upgrade hook), --once, settings errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from gpuop_operator.crd import CRD_NAME, device_config_crd
from gpuop_operator.crdapply import apply_crd
from gpuop_operator.kubeio import CRDS, DAEMONSETS, DEVICECONFIGS, KubeJson
from kubernetes import client

SCRIPT = Path(sys.executable).parent / "gpuop-operator"


def operator(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(SCRIPT),
            "--kubeconfig",
            str(kubeconfig),
            "--probe-port",
            "0",
            "--bind-address",
            "127.0.0.1",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_apply_crd_creates_then_leaves_then_updates(kube_api_client: client.ApiClient) -> None:
    kube = KubeJson(kube_api_client)
    assert apply_crd(kube) == "created"
    assert apply_crd(kube) == "unchanged"
    stale = kube.get(CRDS, CRD_NAME)
    stale["spec"]["versions"][0]["additionalPrinterColumns"] = []
    kube.replace(CRDS, CRD_NAME, stale)
    assert apply_crd(kube) == "updated"
    assert (
        kube.get(CRDS, CRD_NAME)["spec"]["versions"][0]["additionalPrinterColumns"]
        == (device_config_crd()["spec"]["versions"][0]["additionalPrinterColumns"])
    )


@pytest.mark.slow
def test_apply_crd_flag_exits_zero_with_the_crd_in_place(sim_kubeconfig: Path) -> None:
    done = operator(sim_kubeconfig, "--apply-crd")
    assert done.returncode == 0, done.stderr
    assert '"outcome": "created"' in done.stderr
    again = operator(sim_kubeconfig, "--apply-crd")
    assert again.returncode == 0 and '"outcome": "unchanged"' in again.stderr


@pytest.mark.slow
def test_once_reconciles_a_deviceconfig_and_exits(
    sim_kubeconfig: Path, kube_api_client: client.ApiClient
) -> None:
    kube = KubeJson(kube_api_client)
    apply_crd(kube)
    core = client.CoreV1Api(kube_api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="gpu-operator")))
    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(
                name="amd-0", labels={"feature.node.kubernetes.io/pci-1002.present": "true"}
            )
        )
    )
    custom = client.CustomObjectsApi(kube_api_client)
    custom.create_namespaced_custom_object(
        "gpuop.dev",
        "v1alpha1",
        "gpu-operator",
        "deviceconfigs",
        {"apiVersion": "gpuop.dev/v1alpha1", "kind": "DeviceConfig", "metadata": {"name": "amd"}, "spec": {}},
    )
    done = operator(sim_kubeconfig, "--once", "--namespace", "gpu-operator", "--no-leader-elect")
    assert done.returncode == 0, done.stderr
    node = core.read_node("amd-0")
    assert node.metadata.labels["gpuop.dev/deploy.device-plugin"] == "true"
    dc = custom.get_namespaced_custom_object("gpuop.dev", "v1alpha1", "gpu-operator", "deviceconfigs", "amd")
    conditions = {c["type"]: c for c in dc["status"]["conditions"]}
    # No operand chart is installed here: nothing to wait for, and the status says so.
    assert conditions["Degraded"]["status"] == "True"
    assert conditions["Degraded"]["reason"] == "OperandNotInstalled"
    assert "spec.devicePlugin" in conditions["Degraded"]["message"]


def test_bad_flag_is_one_line_naming_it(tmp_path: Path) -> None:
    done = operator(tmp_path / "missing-kubeconfig", "--workers", "0")
    assert done.returncode == 2
    assert "--workers" in done.stderr and "GPUOP_WORKERS" in done.stderr


@pytest.mark.slow
def test_once_waits_for_stage_two_when_the_operands_are_installed(
    sim_kubeconfig: Path, kube_api_client: client.ApiClient, kit: Any
) -> None:
    kube = KubeJson(kube_api_client)
    apply_crd(kube)
    core = client.CoreV1Api(kube_api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="gpu-operator")))
    for service in ("device-plugin", "node-labeller", "metrics-exporter"):
        kube.create(DAEMONSETS, kit.operand_daemonset(service), "gpu-operator")
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="n0")))
    kube.create(DEVICECONFIGS, kit.device_config("all"), "gpu-operator")
    done = operator(sim_kubeconfig, "--once", "--namespace", "gpu-operator", "--no-leader-elect")
    assert done.returncode == 0, done.stderr
    labels = core.read_node("n0").metadata.labels
    assert labels["gpuop.dev/deploy.device-plugin"] == labels["gpuop.dev/deploy.node-labeller"] == "true"
    assert "gpuop.dev/deploy.metrics-exporter" not in labels  # no stage-2 pod is Ready yet
    dc = kube.get(DEVICECONFIGS, "all", "gpu-operator")
    ready = next(c for c in dc["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "RolloutInProgress")

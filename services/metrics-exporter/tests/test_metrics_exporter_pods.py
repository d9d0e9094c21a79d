"""Pod attribution from the kubelet pod-resources API (served by the kubelet emulator over its socket)."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from gpuop_common.gpu import open_backends
from gpuop_common.gpu.changes import enumerate_all
from gpuop_common.gpu.dranames import gpu_name, mig_name
from gpuop_common.kubelet import podresources as pr
from gpuop_common.kubelet.assignments import PodRef, assignments_from, holders_of
from gpuop_metrics_exporter.entities import entities_for
from gpuop_sim.kubelet import KubeletEmulator


def pod_of(sample) -> tuple[str, str, str]:
    return sample.labels["namespace"], sample.labels["pod"], sample.labels["container"]


def test_gpu_held_by_a_pod_carries_its_labels(exporter_for, kubelet_emulator: KubeletEmulator):
    exporter = exporter_for("amd-mi210x8", pod_resources_socket=kubelet_emulator.pod_resources_socket)
    bdf = exporter.info.pci_addresses[2]
    kubelet_emulator.assign("train-0", "ml", "main", "amd.com/gpu", [bdf])
    scrape = exporter.scrape()
    held = scrape.find("gpu_junction_temperature", gpu_id="2")
    assert [pod_of(s) for s in held] == [("ml", "train-0", "main")]
    assert pod_of(scrape.find("gpuop_gpu_power_average_watts", gpu="2")[0]) == ("ml", "train-0", "main")
    free = scrape.find("gpu_junction_temperature", gpu_id="3")
    assert [pod_of(s) for s in free] == [("", "", "")]
    assert scrape.value("gpuop_exporter_pod_resources_up") == 1.0
    # The pod ends: the next snapshot has empty pod labels again.
    kubelet_emulator.release("train-0", "ml")
    assert pod_of(exporter.scrape().find("gpu_junction_temperature", gpu_id="2")[0]) == ("", "", "")


def test_partition_held_by_a_pod_labels_only_that_partition(exporter_for, kubelet_emulator):
    exporter = exporter_for("amd-mi300x-cpx", pod_resources_socket=kubelet_emulator.pod_resources_socket)
    kubelet_emulator.assign("infer", "serving", "model", "amd.com/cpx_nps4", ["amdgpu_xcp_2"])
    scrape = exporter.scrape()
    held = [s for s in scrape.named("gpu_health") if s.labels["pod"]]
    assert [(s.labels["gpu_id"], s.labels["gpu_partition_id"]) for s in held] == [("3", "3")]
    assert pod_of(held[0]) == ("serving", "infer", "model")
    assert scrape.find("gpuop_gpu_health", partition_id="amdgpu_xcp_2")[0].labels["pod"] == "infer"


def test_shared_and_mig_devices_on_nvidia(exporter_for, kubelet_emulator):
    exporter = exporter_for("nvidia-h100x8-mig", pod_resources_socket=kubelet_emulator.pod_resources_socket)
    scrape = exporter.scrape()
    gpu5 = scrape.find("DCGM_FI_DEV_GPU_UTIL", gpu="5")[0].labels["UUID"]
    mig = scrape.find("DCGM_FI_DEV_FB_TOTAL", gpu="1", GPU_I_ID="2")[0]
    mig_uuid = scrape.find("gpuop_gpu_health", gpu="1", partition="1")[0].labels["partition_id"]
    # Time-sliced replicas of one GPU held by two pods: the series is repeated per holder, as dcgm does.
    kubelet_emulator.assign("a", "team", "c", "nvidia.com/gpu", [f"{gpu5}::0"])
    kubelet_emulator.assign("b", "team", "c", "nvidia.com/gpu", [f"{gpu5}::1"])
    kubelet_emulator.assign("m", "team", "c", "nvidia.com/mig-3g.40gb", [mig_uuid])
    scrape = exporter.scrape()
    shared = scrape.find("DCGM_FI_DEV_GPU_UTIL", gpu="5")
    assert sorted(pod_of(s) for s in shared) == [("team", "a", "c"), ("team", "b", "c")]
    assert len({s.value for s in shared}) == 1
    held = scrape.find("DCGM_FI_DEV_FB_TOTAL", gpu="1", GPU_I_ID=mig.labels["GPU_I_ID"])
    assert [pod_of(s) for s in held] == [("team", "m", "c")]
    # The MIG GPU's own series is not attributed to the MIG device's pod.
    whole = [s for s in scrape.find("DCGM_FI_DEV_FB_TOTAL", gpu="1") if "GPU_I_ID" not in s.labels]
    assert pod_of(whole[0]) == ("", "", "")


def test_missing_socket_gives_empty_pod_labels_logged_once(exporter_for, tmp_path: Path, caplog):
    exporter = exporter_for("amd-single", pod_resources_socket=tmp_path / "absent.sock")
    with caplog.at_level(logging.WARNING, logger="gpuop_common.kubelet.assignments"):
        scrapes = [exporter.scrape() for _ in range(3)]
    assert [s.value("gpuop_exporter_pod_resources_up") for s in scrapes] == [0.0, 0.0, 0.0]
    assert scrapes[-1].value("gpuop_exporter_pod_resources_errors_total") == 3
    assert pod_of(scrapes[-1].find("gpu_health")[0]) == ("", "", "")
    warnings = [r for r in caplog.records if "pod-resources API unavailable" in r.getMessage()]
    assert len(warnings) == 1


def test_broken_socket_is_not_fatal_and_recovers(exporter_for, short_tmp_dir: Path, caplog):
    kubelet = KubeletEmulator(short_tmp_dir, endpoint_grace_s=30.0)
    exporter = exporter_for("amd-mi210x8", pod_resources_socket=kubelet.pod_resources_socket)
    # Something that is a socket but does not speak gRPC: List fails, the exporter keeps serving.
    kubelet.pod_resources_socket.parent.mkdir(parents=True, exist_ok=True)
    impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    impostor.bind(str(kubelet.pod_resources_socket))
    impostor.listen(1)
    try:
        with caplog.at_level(logging.WARNING):
            broken = exporter.scrape()
    finally:
        impostor.close()
        kubelet.pod_resources_socket.unlink()
    assert broken.value("gpuop_exporter_pod_resources_up") == 0.0
    assert broken.value("gpu_junction_temperature", gpu_id="0") == 42.0
    assert any("pod-resources API unavailable" in r.getMessage() for r in caplog.records)
    kubelet.start()
    try:
        kubelet.assign("p", "ns", "c", "amd.com/gpu", [exporter.info.pci_addresses[0]])
        healed = exporter.scrape()
    finally:
        kubelet.stop()
    assert healed.value("gpuop_exporter_pod_resources_up") == 1.0
    assert pod_of(healed.find("gpu_junction_temperature", gpu_id="0")[0]) == ("ns", "p", "c")


def test_assignments_keep_only_gpu_resources_and_dra_claims():
    response = pr.ListPodResourcesResponse(
        pod_resources=[
            pr.PodResources(
                name="p",
                namespace="ns",
                containers=[
                    pr.ContainerResources(
                        name="c",
                        devices=[
                            pr.ContainerDevices(resource_name="amd.com/gpu", device_ids=["0000:03:00.0"]),
                            pr.ContainerDevices(resource_name="example.com/nic", device_ids=["eth1"]),
                            pr.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-1::3"]),
                        ],
                        dynamic_resources=[
                            pr.DynamicResource(
                                claim_name="gpu",
                                claim_namespace="ns",
                                claim_resources=[
                                    pr.ClaimResource(driver_name="gpu.amd.com", device_name="gpu-7"),
                                    pr.ClaimResource(driver_name="other.io", device_name="x"),
                                ],
                            )
                        ],
                    )
                ],
            )
        ]
    )
    ref = (PodRef("ns", "p", "c"),)
    assert assignments_from(response) == {"0000:03:00.0": ref, "GPU-1": ref, "gpu-7": ref}


def _dra_holders(*holders: tuple[str, str]) -> pr.ListPodResourcesResponse:
    """Pods (name, DRA device) each holding one device of the gpuop DRA driver."""
    return pr.ListPodResourcesResponse(
        pod_resources=[
            pr.PodResources(
                name=pod,
                namespace="team",
                containers=[
                    pr.ContainerResources(
                        name="c",
                        dynamic_resources=[
                            pr.DynamicResource(
                                claim_name=f"claim-{pod}",
                                claim_namespace="team",
                                claim_resources=[
                                    pr.ClaimResource(driver_name="gpu.gpuop.dev", device_name=device)
                                ],
                            )
                        ],
                    )
                ],
            )
            for pod, device in holders
        ]
    )


def test_time_sliced_dra_devices_attribute_their_gpu_to_every_holder(gpu_node_root, monkeypatch):
    info = gpu_node_root("nvidia-h100x8-mig")
    for key, value in info.env.items():
        monkeypatch.setenv(key, value)
    backends = open_backends(info.root)
    try:
        gpus = sorted(enumerate_all(backends), key=lambda g: g.index)
    finally:
        for backend in backends:
            backend.close()
    entities = entities_for(gpus)
    whole = next(e for e in entities if e.partition_index is None and not e.gpu.mig_devices)
    mig = next(e for e in entities if e.mig is not None)
    # What the DRA driver publishes: replicas `<device>-ts-<n>` of a GPU and of a MIG device.
    gpu_device, mig_device = gpu_name(whole.gpu), mig_name(mig.gpu, mig.mig)
    response = _dra_holders(
        ("a", f"{gpu_device}-ts-0"), ("b", f"{gpu_device}-ts-3"), ("m", f"{mig_device}-ts-1")
    )
    assignments = assignments_from(response)
    assert holders_of(whole.device_ids, assignments) == (PodRef("team", "a", "c"), PodRef("team", "b", "c"))
    assert holders_of(mig.device_ids, assignments) == (PodRef("team", "m", "c"),)
    parent = next(e for e in entities if e.gpu is mig.gpu and e.mig is None)
    assert holders_of(parent.device_ids, assignments) == ()  # the MIG device's pod, not its GPU's

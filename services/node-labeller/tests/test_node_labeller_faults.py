"""Broken sysfs files: the labels built from them go missing with a log line naming the file; the rest
stay exactly right."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from gpuop_common.gpu import GpuDevice, open_backends
from gpuop_node_labeller import labels_for
from gpuop_sim.nodes import NodeRootInfo, set_garbage, vanish_gpu
from gpuop_sim.nodes.faults import amd_device_dir, remove_file

NodeGpus = Callable[..., tuple[NodeRootInfo, list[GpuDevice]]]


def read(info: NodeRootInfo) -> list[GpuDevice]:
    backends = open_backends(info.root)
    try:
        return [gpu for backend in backends for gpu in backend.enumerate()]
    finally:
        for backend in backends:
            backend.close()


def break_file(info: NodeRootInfo, gpu: int, name: str) -> str:
    path = amd_device_dir(info.root, info.pci_addresses[gpu]) / name
    set_garbage(info.root, str(path.relative_to(info.root)))
    return str(path)


def logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING)


def test_unparsable_vram_file_drops_that_gpu_from_vram_labels_only(
    node_gpus: NodeGpus, caplog: pytest.LogCaptureFixture
) -> None:
    info, gpus = node_gpus("amd-mi210x8")
    good = labels_for(gpus)
    path = break_file(info, 2, "mem_info_vram_total")
    with caplog.at_level(logging.WARNING):
        labels = labels_for(read(info))
    assert logged(caplog, path)
    assert labels["beta.amd.com/gpu.vram.64G"] == "7"  # the 7 readable GPUs
    assert labels["amd.com/gpu.vram"] == "64G"
    assert "gpuop.dev/gpu.memory-mib" not in labels  # "smallest GPU" is unknown now
    changed = {k for k in good.keys() | labels.keys() if good.get(k) != labels.get(k)}
    assert changed == {"beta.amd.com/gpu.vram.64G", "gpuop.dev/gpu.memory-mib"}


def test_garbage_partition_mode_drops_partition_labels_and_names_the_file(
    node_gpus: NodeGpus, caplog: pytest.LogCaptureFixture
) -> None:
    info, gpus = node_gpus("amd-mi300x-spx")
    good = labels_for(gpus)
    break_file(info, 5, "current_compute_partition")
    with caplog.at_level(logging.WARNING):
        labels = labels_for(read(info))
    assert logged(caplog, f"{info.pci_addresses[5]}/current_compute_partition")
    assert "amd.com/gpu.compute-memory-partition" not in labels
    assert "gpuop.dev/gpu.partition.compute" not in labels
    changed = {k for k in good.keys() | labels.keys() if good.get(k) != labels.get(k)}
    assert changed == {"amd.com/gpu.compute-memory-partition", "gpuop.dev/gpu.partition.compute"}


def test_garbage_driver_version_drops_the_driver_labels(
    node_gpus: NodeGpus, caplog: pytest.LogCaptureFixture
) -> None:
    info, gpus = node_gpus("amd-single")
    good = labels_for(gpus)
    set_garbage(info.root, "sys/module/amdgpu/version", "not a version!\n")
    with caplog.at_level(logging.WARNING):
        labels = labels_for(read(info))
    assert logged(caplog, "/sys/module/amdgpu/version")
    assert {k for k in good if k not in labels} == {
        "amd.com/gpu.driver-version",
        "gpuop.dev/gpu.driver-version",
    }
    assert all(labels[k] == v for k, v in good.items() if k in labels)


def test_garbage_srcversion_drops_only_the_src_version_label(
    node_gpus: NodeGpus, caplog: pytest.LogCaptureFixture
) -> None:
    info, gpus = node_gpus("amd-mi210x8")
    good = labels_for(gpus)
    assert good["amd.com/gpu.driver-src-version"]
    set_garbage(info.root, "sys/module/amdgpu/srcversion", "../../etc/passwd\n")
    with caplog.at_level(logging.WARNING):
        labels = labels_for(read(info))
    assert logged(caplog, "/sys/module/amdgpu/srcversion")
    assert {k for k in good if k not in labels} == {"amd.com/gpu.driver-src-version"}
    assert all(labels[k] == v for k, v in good.items() if k in labels)


def test_missing_srcversion_skips_only_that_label(node_gpus: NodeGpus) -> None:
    """The in-tree amdgpu may lack srcversion: the module file and every device's copy are gone."""
    info, gpus = node_gpus("amd-mi210x8")
    good = labels_for(gpus)
    remove_file(info.root, "sys/module/amdgpu/srcversion")
    for bdf in info.pci_addresses:
        path = amd_device_dir(info.root, bdf) / "driver/module/srcversion"
        remove_file(info.root, str(path.relative_to(info.root)))
    labels = labels_for(read(info))
    assert good.keys() - labels.keys() == {"amd.com/gpu.driver-src-version"}
    assert all(labels[k] == v for k, v in good.items() if k in labels)


def test_srcversion_falls_back_to_the_device_driver_module(node_gpus: NodeGpus) -> None:
    info, gpus = node_gpus("amd-single")
    good = labels_for(gpus)
    remove_file(info.root, "sys/module/amdgpu/srcversion")
    assert labels_for(read(info)) == good


def test_vanished_gpu_is_relabelled_and_restored(node_gpus: NodeGpus) -> None:
    info, gpus = node_gpus("amd-mi210x8")
    before = labels_for(gpus)
    gone = vanish_gpu(info.root, info.pci_addresses[7])
    labels = labels_for(read(info))
    assert labels["gpuop.dev/gpu.count"] == "7"
    assert labels["beta.amd.com/gpu.cu-count.104"] == "7"
    gone.restore()
    assert labels_for(read(info)) == before


def test_vanished_nvidia_gpu_reads_as_one_fewer(node_gpus: NodeGpus) -> None:
    info, gpus = node_gpus("nvidia-h100x8")
    assert labels_for(gpus)["nvidia.com/gpu.count"] == "8"
    vanish_gpu(info.root, "3")
    labels = labels_for(read(info))
    assert labels["nvidia.com/gpu.count"] == "7"
    assert labels["gpuop.dev/gpu.count"] == "7"

"""Vendor detection from a host root and backend selection."""

from __future__ import annotations

import pytest
from gpuop_common.gpu import (
    AmdSysfsBackend,
    GpuBackendError,
    NvmlBackend,
    Vendor,
    detect_vendors,
    open_backends,
)


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        ("amd-mi210x8", [Vendor.AMD]),
        ("amd-mi300x-cpx", [Vendor.AMD]),
        ("amd-mi300x-spx", [Vendor.AMD]),
        ("amd-single", [Vendor.AMD]),
        ("amd-radeon", [Vendor.AMD]),
        ("nvidia-h100x8", [Vendor.NVIDIA]),
        ("nvidia-h100x8-mig", [Vendor.NVIDIA]),
        ("cpu-only", []),
    ],
)
def test_detect_vendors(gpu_node_root, profile, expected):
    info = gpu_node_root(profile)
    assert detect_vendors(info.root) == expected
    assert info.vendor == (expected[0] if expected else None)


def test_amd_detected_from_pci_sysfs_alone(gpu_node_root):
    info = gpu_node_root("amd-radeon")
    # Without amdgpu loaded there is no KFD and no DRM node, only the PCI function.
    for sub in ("sys/class/kfd", "sys/class/drm"):
        for path in sorted((info.root / sub).rglob("*"), reverse=True):
            path.unlink() if path.is_symlink() or path.is_file() else path.rmdir()
    assert detect_vendors(info.root) == [Vendor.AMD]


def test_auto_opens_the_amd_backend(gpu_node_root):
    (backend,) = open_backends(gpu_node_root("amd-mi210x8").root)
    assert isinstance(backend, AmdSysfsBackend)
    assert len(backend.enumerate()) == 8


def test_auto_on_nvidia_node_uses_the_node_fake_nvml(gpu_node_root, monkeypatch):
    info = gpu_node_root("nvidia-h100x8")
    for key, value in info.env.items():
        monkeypatch.setenv(key, value)
    (backend,) = open_backends(info.root)
    assert isinstance(backend, NvmlBackend) and backend.available
    assert len(backend.enumerate()) == 8
    backend.close()


def test_auto_skips_nvidia_without_driver(gpu_node_root, monkeypatch, caplog):
    info = gpu_node_root("nvidia-h100x8")
    monkeypatch.setenv("GPUOP_NVML_MODULE", "gpuop_sim.nodes.fake_nvml")
    monkeypatch.setenv("GPUOP_FAKE_NVML_STATE", "")
    assert open_backends(info.root) == []
    assert any("no usable driver" in r.getMessage() for r in caplog.records)


def test_cpu_only_node_has_no_backends(gpu_node_root, monkeypatch):
    info = gpu_node_root("cpu-only")
    for key, value in info.env.items():
        monkeypatch.setenv(key, value)
    assert open_backends(info.root) == []
    (nvidia,) = open_backends(info.root, "nvidia")
    assert isinstance(nvidia, NvmlBackend) and not nvidia.available


def test_unknown_vendor_is_a_typed_error(tmp_path):
    with pytest.raises(GpuBackendError, match="intel"):
        open_backends(tmp_path, "intel")


def test_backends_sharing_a_topology_cache_read_kfd_once_per_kernel_rebuild(gpu_node_root, monkeypatch):
    import gpuop_common.gpu.amd_topology as topology_module
    from gpuop_common.gpu.amd_topology import TopologyCache
    from gpuop_sim.nodes.faults import set_kfd_property

    info = gpu_node_root("amd-mi300x-cpx")
    walks = []
    real_read = topology_module.read_topology
    monkeypatch.setattr(topology_module, "read_topology", lambda root: walks.append(root) or real_read(root))
    cache = TopologyCache()
    first = open_backends(info.root, "amd", topology=cache)[0].enumerate()
    again = open_backends(info.root, "amd", topology=cache)[0].enumerate()
    assert len(walks) == 1  # the second backend reused the first one's walk
    assert [g.id for g in again] == [g.id for g in first]
    set_kfd_property(info.root, 1, "simd_count", 0)  # the kernel rebuilds and bumps generation_id
    open_backends(info.root, "amd", topology=cache)[0].enumerate()
    assert len(walks) == 2
    open_backends(info.root, "amd")[0].enumerate()  # no shared cache: a walk of its own
    assert len(walks) == 3

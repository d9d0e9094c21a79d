"""The simulated amdgpu driver: partition writes re-lay KFD/DRM, refuse like the kernel (EINVAL/EBUSY)."""

from __future__ import annotations

import errno

import pytest
from gpuop_common.gpu import AmdSysfsBackend, PartitionWriteError
from gpuop_common.gpu.amd_topology import KFD_TOPOLOGY, read_topology
from gpuop_sim.nodes import amd_driver, hold_open
from gpuop_sim.nodes.faults import amd_device_dir


def _backend(info):
    return AmdSysfsBackend(info.root, writer=amd_driver.write_attr)


def _generation(info) -> int:
    return int((info.root / KFD_TOPOLOGY / "generation_id").read_text())


def _links(root):
    return {
        n.index: sorted((lk.node_to, lk.link_type, lk.weight, lk.max_bandwidth) for lk in n.io_links)
        for n in read_topology(root)
    }


def test_spx_to_cpx_and_back_relays_kfd_drm_and_bumps_generation(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    before_nodes = {n.index: n.props for n in read_topology(info.root)}
    before_links = _links(info.root)
    backend = _backend(info)
    gpus = backend.enumerate()
    generation = _generation(info)
    for gpu in gpus:
        assert backend.set_partition_mode(gpu.id, "CPX").compute == "CPX"
    assert _generation(info) > generation
    after = backend.enumerate()
    assert [len(g.partitions) for g in after] == [8] * 8
    assert all(p.compute_units == 38 for g in after for p in g.partitions)
    renders = sorted((info.root / "dev/dri").glob("renderD*"))
    assert len(renders) == 64
    assert len(list((info.root / "sys/devices/platform").glob("amdgpu_xcp_*"))) == 56
    ids = {p.id for g in after for p in g.partitions}
    assert len(ids) == 64 and "amdgpu_xcp_55" in ids
    # Back to SPX: the topology is the one the SPX profile was built with.
    for gpu in after:
        backend.set_partition_mode(gpu.id, "SPX")
    assert {n.index: n.props for n in read_topology(info.root)} == before_nodes
    assert _links(info.root) == before_links
    assert not list((info.root / "sys/devices/platform").glob("amdgpu_xcp_*"))
    assert len(list((info.root / "dev/dri").glob("renderD*"))) == 8


def test_cpx_nps4_capture_to_spx_nps1(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    backend = _backend(info)
    gpu = backend.enumerate()[0]
    state = backend.set_partition_mode(gpu.id, "spx_nps1")
    assert (state.compute, state.memory) == ("SPX", "NPS1")
    gpus = backend.enumerate()
    assert gpus[0].partitions == () and gpus[0].compute_units == 304
    # The other GPUs keep their CPX partitions (the capture's last GPU has 7, the box has 8 XCCs each).
    assert [len(g.partitions) for g in gpus[1:]] == [8] * 7
    assert backend.set_partition_mode(gpu.id, "cpx_nps4").key == "cpx_nps4"
    assert len(backend.enumerate()[0].partitions) == 8


@pytest.mark.parametrize(
    ("attr", "value"),
    [
        ("current_compute_partition", "TPX"),  # not in available_compute_partition
        ("current_compute_partition", "garbage"),
        ("current_compute_partition", "SPX"),  # refused while NPS4 is in force
        ("current_memory_partition", "NPS2"),  # not available on MI300X
        ("current_memory_partition", "NPS9"),
    ],
)
def test_invalid_write_is_einval_and_changes_nothing(gpu_node_root, attr, value):
    info = gpu_node_root("amd-mi300x-cpx")
    ddir = amd_device_dir(info.root, info.pci_addresses[0])
    generation = _generation(info)
    with pytest.raises(OSError) as excinfo:
        amd_driver.write_attr(ddir / attr, value)
    assert excinfo.value.errno == errno.EINVAL
    assert (ddir / "current_compute_partition").read_text().strip() == "CPX"
    assert (ddir / "current_memory_partition").read_text().strip() == "NPS4"
    assert _generation(info) == generation


def test_open_render_node_makes_that_gpu_busy(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    backend = _backend(info)
    gpus = backend.enumerate()
    with hold_open(info.root, f"/dev/dri/renderD{gpus[0].render_minor}"):
        with pytest.raises(PartitionWriteError) as excinfo:
            backend.set_partition_mode(gpus[0].id, "CPX")
        assert excinfo.value.errno_name == "EBUSY"
        assert backend.get_partition_mode(gpus[0].id).compute == "SPX"
        assert backend.set_partition_mode(gpus[1].id, "CPX").compute == "CPX"
    assert backend.set_partition_mode(gpus[0].id, "CPX").compute == "CPX"


def test_open_kfd_makes_every_gpu_busy(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    ddir = amd_device_dir(info.root, info.pci_addresses[3])
    handle = hold_open(info.root, "/dev/kfd")
    with pytest.raises(OSError) as excinfo:
        amd_driver.write_attr(ddir / "current_compute_partition", "DPX")
    assert excinfo.value.errno == errno.EBUSY
    handle.close()
    amd_driver.write_attr(ddir / "current_compute_partition", "dpx\n")
    assert len(_backend(info).enumerate()[3].partitions) == 2


def test_same_mode_is_accepted_without_a_rebuild(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    ddir = amd_device_dir(info.root, info.pci_addresses[0])
    generation = _generation(info)
    amd_driver.write_attr(ddir / "current_compute_partition", "SPX")
    assert _generation(info) == generation


def test_other_files_and_roots_without_the_driver_are_plain_writes(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    ddir = amd_device_dir(info.root, info.pci_addresses[0])
    amd_driver.write_attr(ddir / "power_dpm_force_performance_level", "manual")
    assert (ddir / "power_dpm_force_performance_level").read_text() == "manual\n"
    with pytest.raises(FileNotFoundError):
        hold_open(info.root, "/dev/dri/renderD999")


def test_profile_env_names_the_driver(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    assert info.env["GPUOP_SYSFS_WRITER"] == amd_driver.WRITER_SPEC

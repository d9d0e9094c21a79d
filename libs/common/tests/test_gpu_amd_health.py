"""AMD health flips on vanish / RAS rise / gfx_target_version 0 and back; partition mode writes."""

from __future__ import annotations

import errno
import logging
import os

import pytest
from gpuop_common.gpu import (
    AmdSysfsBackend,
    InvalidPartitionModeError,
    PartitionNotSupportedError,
    PartitionRefusedError,
    PartitionWriteError,
)
from gpuop_sim.nodes import raise_ras, set_kfd_property, vanish_gpu


def _codes(health):
    return {r.code for r in health.reasons}


def test_all_healthy_at_start(gpu_node_root):
    backend = AmdSysfsBackend(gpu_node_root("amd-mi210x8").root)
    health = backend.health()
    assert len(health) == 8 and all(h.healthy for h in health)


def test_vanished_gpu_is_unhealthy_then_healthy_after_restore(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    backend = AmdSysfsBackend(info.root)
    gpu_id = backend.enumerate()[3].id
    backend.health()
    gone = vanish_gpu(info.root, info.pci_addresses[3])
    assert len(backend.enumerate()) == 7
    health = {h.gpu_id: h for h in backend.health()}
    assert _codes(health[gpu_id]) == {"gpu_vanished"}
    assert sum(not h.healthy for h in health.values()) == 1
    gone.restore()
    assert all(h.healthy for h in backend.health())


def test_kfd_node_vanished_and_device_node_gone(gpu_node_root):
    info = gpu_node_root("amd-radeon")
    backend = AmdSysfsBackend(info.root)
    backend.health()
    kfd_node = info.root / "sys/class/kfd/kfd/topology/nodes/1"
    stash = info.root / "stash-node-1"
    kfd_node.rename(stash)
    (info.root / "dev/dri/renderD128").unlink()
    (health,) = backend.health()
    assert _codes(health) == {"kfd_node_vanished", "device_node_missing"}
    assert any(r.source == "/dev/dri/renderD128" for r in health.reasons)
    stash.rename(kfd_node)
    (info.root / "dev/dri/renderD128").write_text("")
    assert backend.health()[0].healthy


def test_ras_uncorrectable_rise_flips_health_until_reset(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    backend = AmdSysfsBackend(info.root)
    backend.health()
    raise_ras(info.root, info.pci_addresses[1], "umc", by=2)
    health = backend.health()
    bad = [h for h in health if not h.healthy]
    assert len(bad) == 1
    (reason,) = bad[0].reasons
    assert reason.code == "ras_uncorrectable_increase"
    assert "umc" in reason.message and "0 to 2" in reason.message
    assert reason.source.endswith("ras/umc_err_count")
    assert not backend.health()[1].healthy  # still above the baseline
    backend.reset_health()
    assert all(h.healthy for h in backend.health())


def test_gfx_target_version_zero_is_unhealthy(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    backend = AmdSysfsBackend(info.root)
    backend.health()
    set_kfd_property(info.root, 2, "gfx_target_version", 0)  # node 2 = 0000:63:00.0
    health = {h.gpu_id: h for h in backend.health()}
    bad = [h for h in health.values() if not h.healthy]
    assert [_codes(h) for h in bad] == [{"gfx_target_version_zero"}]
    set_kfd_property(info.root, 2, "gfx_target_version", 90010)
    assert all(h.healthy for h in backend.health())


def test_cpx_partition_vanish_marks_only_that_partition(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    backend = AmdSysfsBackend(info.root)
    backend.health()
    node = info.root / "sys/class/kfd/kfd/topology/nodes/5"  # GPU 0, partition 3 (renderD131)
    node.rename(info.root / "node-5")
    first = backend.health()[0]
    assert first.healthy
    unhealthy = [p for p in first.partitions if not p.healthy]
    assert [p.id for p in unhealthy] == ["amdgpu_xcp_2"]
    assert unhealthy[0].reasons[0].code == "kfd_node_vanished"


def test_unreadable_kfd_properties_skip_the_node_with_a_log(gpu_node_root, caplog):
    info = gpu_node_root("amd-mi210x8")
    props = info.root / "sys/class/kfd/kfd/topology/nodes/3/properties"
    props.write_text("")
    (info.root / "sys/class/kfd/kfd/topology/nodes/4/properties").write_text("simd_count lots\n")
    with caplog.at_level(logging.WARNING):
        gpus = AmdSysfsBackend(info.root).enumerate()
    # The DRM cards still exist, so the GPUs are listed, just without their KFD facts.
    assert len(gpus) == 8
    no_kfd = [g for g in gpus if not g.kfd_nodes]
    assert len(no_kfd) == 2 and all(g.compute_units is None for g in no_kfd)
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "nodes/3/properties" in messages and "nodes/4/properties" in messages


def test_set_partition_mode_writes_sysfs(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    backend = AmdSysfsBackend(info.root)
    gpu = backend.enumerate()[0]
    state = backend.set_partition_mode(gpu.id, "cpx_nps4")
    assert (state.compute, state.memory) == ("CPX", "NPS4")
    ddir = (info.root / "sys/bus/pci/devices" / gpu.pci_address).resolve()
    assert (ddir / "current_compute_partition").read_text().strip() == "CPX"
    assert (ddir / "current_memory_partition").read_text().strip() == "NPS4"
    assert backend.set_partition_mode(gpu.pci_address, "qpx").compute == "QPX"
    assert backend.get_partition_mode("0").memory == "NPS4"


def test_pair_the_driver_refuses_is_rejected_before_any_write(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    backend = AmdSysfsBackend(info.root)
    gpu = backend.enumerate()[0]
    # DPX needs NPS1 or NPS2; the GPU is in NPS4.
    with pytest.raises(PartitionRefusedError, match="DPX is refused with memory partition NPS4"):
        backend.set_partition_mode(gpu.id, "DPX")
    assert backend.get_partition_mode(gpu.id).compute == "CPX"
    # SPX/NPS1 from CPX/NPS4: NPS1 is written first, then SPX (SPX is refused under NPS4). A driver
    # that keeps NPS1 as a request (the file still reads NPS4) gets SPX only after its reload.
    written: list[tuple[str, str]] = []
    recording = AmdSysfsBackend(info.root, writer=lambda path, value: written.append((path.name, value)))
    state = recording.set_partition_mode(gpu.id, "spx_nps1")
    assert written == [("current_memory_partition", "NPS1")]
    assert (state.compute, state.memory, state.pending_memory) == ("CPX", "NPS4", "NPS1")

    # One that puts it in force at once (the file reads NPS1 after the write) gets both now.
    def applying(path, value):
        written.append((path.name, value))
        path.write_text(value + "\n")

    written.clear()
    state = AmdSysfsBackend(info.root, writer=applying).set_partition_mode(gpu.id, "spx_nps1")
    assert written == [("current_memory_partition", "NPS1"), ("current_compute_partition", "SPX")]
    assert state.pending_memory is None


def test_driver_errno_becomes_a_write_error_naming_it(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")

    def busy(path, value):
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))

    backend = AmdSysfsBackend(info.root, writer=busy)
    gpu = backend.enumerate()[0]
    with pytest.raises(PartitionWriteError) as excinfo:
        backend.set_partition_mode(gpu.id, "CPX")
    assert excinfo.value.errno_name == "EBUSY"
    assert "current_compute_partition" in str(excinfo.value)


def test_invalid_partition_mode_names_the_allowed_ones(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    backend = AmdSysfsBackend(info.root)
    gpu_id = backend.enumerate()[0].id
    with pytest.raises(InvalidPartitionModeError) as excinfo:
        backend.set_partition_mode(gpu_id, "TPX")
    assert excinfo.value.mode == "TPX"
    assert excinfo.value.allowed == ("SPX", "DPX", "QPX", "CPX")
    assert "TPX" in str(excinfo.value) and "QPX" in str(excinfo.value)
    with pytest.raises(InvalidPartitionModeError, match="NPS8"):
        backend.set_partition_mode(gpu_id, "NPS8")
    assert backend.get_partition_mode(gpu_id).compute == "CPX"


def test_gpu_without_partition_files_is_not_partitionable(gpu_node_root):
    backend = AmdSysfsBackend(gpu_node_root("amd-mi210x8").root)
    gpu_id = backend.enumerate()[0].id
    with pytest.raises(PartitionNotSupportedError):
        backend.set_partition_mode(gpu_id, "CPX")
    with pytest.raises(PartitionNotSupportedError):
        backend.get_partition_mode(gpu_id)


def test_host_root_without_dev_is_not_a_health_failure(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    for path in sorted((info.root / "dev").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    backend = AmdSysfsBackend(info.root)
    assert all(h.healthy for h in backend.health())


def test_xcc_count_comes_from_the_product_not_a_short_kfd_listing(gpu_node_root):
    # The CPX capture's last GPU shows 7 KFD partitions; an MI300X has 8 XCCs.
    backend = AmdSysfsBackend(gpu_node_root("amd-mi300x-cpx").root)
    counts = backend.xcc_counts()
    assert set(counts.values()) == {8}
    assert len(backend.enumerate()[7].partitions) == 7
    assert AmdSysfsBackend(gpu_node_root("amd-radeon").root).xcc_counts() == {
        g.id: 1 for g in AmdSysfsBackend(gpu_node_root("amd-radeon").root).enumerate()
    }

"""NVIDIA backend against the fake NVML of the simulated H100 nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuop_common.gpu import (
    FieldErrorKind,
    InvalidPartitionModeError,
    LinkType,
    NvmlBackend,
    TempSensor,
    Vendor,
)
from gpuop_sim.nodes import inject_xid, set_temperature, update_nvml_state, vanish_gpu
from gpuop_sim.nodes.fake_nvml import FakeNvml
from gpuop_sim.nodes.nvml_state import load_state

H100_BDFS = [f"0000:{bus}:00.0" for bus in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]


@pytest.fixture
def h100(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8")
    backend = NvmlBackend(FakeNvml(path=info.nvml_state_path), info.root)
    yield info, backend
    backend.close()


def test_h100x8_inventory(h100):
    info, backend = h100
    gpus = backend.enumerate()
    state = load_state(info.nvml_state_path)
    assert [g.pci_address for g in gpus] == H100_BDFS
    assert [g.id for g in gpus] == [g.uuid for g in state.gpus]
    first = gpus[0]
    assert first.vendor is Vendor.NVIDIA
    assert first.model == "NVIDIA H100 80GB HBM3"
    assert (first.pci.vendor_id, first.pci.device_id) == (0x10DE, 0x2330)
    assert (first.pci.subsystem_vendor_id, first.pci.subsystem_device_id) == (0x10DE, 0x16C1)
    assert first.pci.revision == 0xA1  # from the PCI sysfs of the host root
    assert first.family == "hopper" and first.compute_capability == "9.0"
    assert first.vram_total_bytes == 81559 * 1024**2
    assert first.driver_version == "550.54.15" and first.cuda_driver_version == "12.4"
    assert first.compute_units == 132
    assert [g.numa_node for g in gpus] == [0] * 4 + [1] * 4
    assert first.device_nodes == (
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    )
    assert first.partition is not None and first.partition.compute == "none"
    assert first.mig_devices == ()
    assert first.nvlink_clique is None  # HGX H100 is not fabric-attached


def test_h100_nvlink_peers(h100):
    _, backend = h100
    gpus = backend.enumerate()
    for gpu in gpus:
        assert len(gpu.links) == 7
        assert all(link.link_type is LinkType.NVLINK and link.count == 18 for link in gpu.links)
        assert {link.peer_id for link in gpu.links} == {g.id for g in gpus} - {gpu.id}


def test_without_nvlink_peers_fall_back_to_pcie_topology(h100):
    info, backend = h100
    update_nvml_state(info.root, lambda s: setattr(s, "nvlink_p2p", False))
    gpu = backend.enumerate()[0]
    assert {link.link_type for link in gpu.links} == {LinkType.PCIE}
    assert sorted(link.weight for link in gpu.links) == [40] * 3 + [50] * 4  # NODE / SYSTEM


def test_h100_telemetry_equals_state(h100):
    info, backend = h100
    state = load_state(info.nvml_state_path)
    readings = backend.telemetry()
    assert len(readings) == 8
    for gpu, reading in zip(state.gpus, readings, strict=True):
        assert reading.gpu_id == gpu.uuid
        assert reading.temperatures_c == {
            TempSensor.GPU: gpu.temperature_c,
            TempSensor.MEMORY: gpu.memory_temperature_c,
        }
        assert reading.power_w == gpu.power_mw / 1000
        assert reading.power_average_w == gpu.power_average_mw / 1000
        assert reading.power_cap_w == gpu.power_limit_mw / 1000
        assert reading.energy_j == gpu.energy_mj / 1000
        assert reading.gpu_util_percent == gpu.util_gpu
        assert reading.memory_util_percent == gpu.util_memory
        assert reading.vram_used_bytes == gpu.memory_used
        assert reading.vram_free_bytes == gpu.memory_total - gpu.memory_used
        assert reading.shader_clock_mhz == gpu.sm_clock_mhz
        assert reading.memory_clock_mhz == gpu.mem_clock_mhz
        assert (reading.pcie.current_gen, reading.pcie.current_width) == (5, 16)
        assert reading.pcie.tx_bytes_per_s == gpu.pcie_tx_kbs * 1024
        assert reading.link_count == 18
        assert reading.link_tx_bytes == gpu.nvlink_tx_kib_per_link * 18 * 1024
        assert reading.ecc["total"].uncorrectable == 0
        assert reading.throttle_reasons == ()
        assert reading.errors == ()


def test_not_supported_query_is_a_typed_field_error(h100):
    info, backend = h100

    def cripple(state):
        state.gpus[0].unsupported = ["nvmlDeviceGetPowerUsage", "field:82"]

    update_nvml_state(info.root, cripple)
    reading = backend.telemetry()[0]
    assert reading.power_w is None
    assert TempSensor.MEMORY not in reading.temperatures_c
    errors = {e.field: e for e in reading.errors}
    assert errors["power.current"].kind is FieldErrorKind.NOT_SUPPORTED
    assert errors["power.current"].source == "nvmlDeviceGetPowerUsage"
    assert errors["temperature.memory"].kind is FieldErrorKind.NOT_SUPPORTED
    assert reading.power_cap_w == 700.0


def test_set_temperature_fault(h100):
    info, backend = h100
    set_temperature(info.root, H100_BDFS[4], 91, sensor="gpu")
    assert backend.telemetry()[4].temperatures_c[TempSensor.GPU] == 91


def test_critical_xid_flips_health_ignored_xid_does_not(h100):
    info, backend = h100
    gpus = backend.enumerate()
    assert all(h.healthy for h in backend.health())
    inject_xid(info.root, gpus[1].id, 13)  # application error: ignored
    assert all(h.healthy for h in backend.health())
    inject_xid(info.root, gpus[1].id, 79)  # fallen off the bus
    health = {h.gpu_id: h for h in backend.health()}
    assert [r.code for r in health[gpus[1].id].reasons] == ["xid_critical"]
    assert "79" in health[gpus[1].id].reasons[0].message
    assert sum(not h.healthy for h in health.values()) == 1
    assert not backend.health()[1].healthy  # XIDs are sticky
    backend.reset_health()
    assert all(h.healthy for h in backend.health())


def test_lost_gpu_is_unhealthy_and_back_after_restore(h100):
    info, backend = h100
    backend.health()
    gone = vanish_gpu(info.root, "2")
    health = backend.health()
    assert [h.gpu_id for h in health if not h.healthy] == [health[2].gpu_id]
    assert {r.code for r in health[2].reasons} == {"device_lost"}
    assert len(backend.enumerate()) == 7
    gone.restore()
    assert all(h.healthy for h in backend.health())


def test_mig_profile_devices(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8-mig")
    backend = NvmlBackend(FakeNvml(path=info.nvml_state_path), info.root)
    gpus = backend.enumerate()
    assert [g.partition.compute for g in gpus] == ["mig"] * 3 + ["none"] * 5
    assert [m.profile for m in gpus[0].mig_devices] == ["1g.10gb"] * 7
    assert [m.profile for m in gpus[1].mig_devices] == ["3g.40gb"] * 2
    assert [m.profile for m in gpus[2].mig_devices] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert sum(len(g.mig_devices) for g in gpus) == info.partition_count == 12
    mig = gpus[0].mig_devices[0]
    assert mig.uuid.startswith("MIG-")
    assert (mig.gpu_instance_id, mig.compute_instance_id) == (7, 0)
    assert mig.memory_bytes == 9856 * 1024**2
    caps = [n for n in mig.device_nodes if n.startswith("/dev/nvidia-caps/")]
    assert len(caps) == 2 and all((info.root / c.lstrip("/")).exists() for c in caps)
    assert mig.device_nodes[0] == "/dev/nvidia0"
    readings = backend.telemetry()
    mig_readings = [r for r in readings if r.partition_id is not None]
    assert len(mig_readings) == 12
    assert mig_readings[0].vram_total_bytes == mig.memory_bytes


def test_mig_xid_marks_the_mig_device(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8-mig")
    backend = NvmlBackend(FakeNvml(path=info.nvml_state_path), info.root)
    gpu = backend.enumerate()[1]
    target = gpu.mig_devices[1]
    backend.health()
    inject_xid(info.root, gpu.id, 94, gpu_instance_id=target.gpu_instance_id, compute_instance_id=0)
    health = backend.health()[1]
    assert health.healthy
    assert [p.id for p in health.partitions if not p.healthy] == [target.uuid]


def test_mig_mode_set_and_invalid(h100):
    _, backend = h100
    gpu_id = backend.enumerate()[3].id
    state = backend.set_partition_mode(gpu_id, "mig")
    assert state.compute == "mig" and state.pending_compute == "mig"
    assert backend.enumerate()[3].partition.compute == "mig"
    assert backend.set_partition_mode(gpu_id, "none").compute == "none"
    with pytest.raises(InvalidPartitionModeError) as excinfo:
        backend.set_partition_mode(gpu_id, "CPX")
    assert excinfo.value.allowed == ("none", "mig")


def test_module_named_by_env_reads_the_node_state(gpu_node_root, monkeypatch):
    info = gpu_node_root("nvidia-h100x8")
    for key, value in info.env.items():
        monkeypatch.setenv(key, value)
    backend = NvmlBackend(host_root=info.root)
    assert backend.available
    assert len(backend.enumerate()) == 8
    backend.close()


def test_fake_module_without_state_is_the_no_driver_state(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("GPUOP_NVML_MODULE", "gpuop_sim.nodes.fake_nvml")
    monkeypatch.setenv("GPUOP_FAKE_NVML_STATE", str(tmp_path / "absent.json"))
    backend = NvmlBackend(host_root=tmp_path)
    assert not backend.available
    assert "Library Not Found" in backend.unavailable_reason
    assert backend.enumerate() == [] and backend.health() == [] and backend.telemetry() == []


def test_missing_python_module_is_the_no_driver_state(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("GPUOP_NVML_MODULE", "no_such_nvml_module")
    backend = NvmlBackend(host_root=tmp_path)
    assert not backend.available and "not importable" in backend.unavailable_reason


@pytest.mark.skipif(Path("/proc/driver/nvidia/version").exists(), reason="a real NVIDIA driver is present")
def test_real_pynvml_without_driver_is_the_no_driver_state(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("GPUOP_NVML_MODULE", "pynvml")
    backend = NvmlBackend(host_root=tmp_path)
    assert not backend.available
    assert backend.enumerate() == []

"""The JSON state behind the fake NVML: what each simulated NVIDIA GPU reports.

Stored at `<node root>/var/lib/gpuop-sim/nvml.json`; the fake module re-reads it when it changes, so
faults written by a test are seen by a service process that was started earlier.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from gpuop_sim.jsonfile import write_json_atomic

STATE_RELPATH = Path("var/lib/gpuop-sim/nvml.json")


class MigDeviceState(BaseModel):
    uuid: str
    slot: int
    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # e.g. 1g.10gb
    gi_slices: int
    ci_slices: int
    memory_total: int
    memory_used: int = 0
    multiprocessor_count: int
    # Processes running on this MIG device that no pod owns (a CUDA program or DCGM's nv-hostengine
    # started on the host): its compute instance cannot be destroyed (NVML_ERROR_IN_USE).
    processes: list[int] = Field(default_factory=list)


class GpuInstanceState(BaseModel):
    """A MIG GPU instance (memory + compute slices); its compute instances are the MIG devices."""

    id: int
    profile_id: int  # NVML_GPU_INSTANCE_PROFILE_*
    profile: str  # e.g. 3g.40gb
    start: int  # first memory slice of its placement
    size: int  # memory slices it spans


class GpuState(BaseModel):
    uuid: str
    name: str
    bus_id: str  # NVML format: 00000000:18:00.0
    pci_device_id: int  # (device << 16) | vendor
    pci_subsystem_id: int
    minor_number: int
    serial: str
    vbios_version: str
    numa_node: int
    compute_capability: tuple[int, int]
    architecture: int
    multiprocessor_count: int
    memory_total: int
    memory_used: int
    temperature_c: int
    memory_temperature_c: int
    power_mw: int
    power_average_mw: int
    power_limit_mw: int
    energy_mj: int
    util_gpu: int
    util_memory: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    pcie_gen: int
    pcie_width: int
    pcie_max_gen: int
    pcie_max_width: int
    pcie_tx_kbs: int
    pcie_rx_kbs: int
    pcie_replay: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    nvlinks_active: int = 18
    nvlink_tx_kib_per_link: int = 0
    nvlink_rx_kib_per_link: int = 0
    clocks_event_reasons: int = 0
    mig_current: int = 0
    mig_pending: int = 0
    mig_capable: bool = True
    # Processes holding the whole GPU that no pod owns (as for MIG devices): the driver cannot
    # unbind the GPU to switch MIG mode, so nvmlDeviceSetMigMode leaves the new mode pending and
    # answers activation status NVML_ERROR_IN_USE.
    processes: list[int] = Field(default_factory=list)
    mig_devices: list[MigDeviceState] = Field(default_factory=list)
    gpu_instances: list[GpuInstanceState] = Field(default_factory=list)
    lost: bool = False  # every query answers NVML_ERROR_GPU_IS_LOST
    unsupported: list[str] = Field(default_factory=list)  # NVML function names answering NotSupported


class XidEvent(BaseModel):
    seq: int
    uuid: str
    xid: int
    gpu_instance_id: int = 0xFFFFFFFF
    compute_instance_id: int = 0xFFFFFFFF


class NvmlState(BaseModel):
    library_present: bool = True
    driver_loaded: bool = True  # False: nvmlInit raises NVML_ERROR_DRIVER_NOT_LOADED (no kernel module)
    driver_version: str
    cuda_driver_version: int
    gpus: list[GpuState]
    events: list[XidEvent] = Field(default_factory=list)
    nvlink_p2p: bool = True  # every GPU pair reaches the others over NVLink (NVSwitch fabric)


def load_state(path: Path) -> NvmlState:
    return NvmlState.model_validate_json(path.read_text())


def save_state(path: Path, state: NvmlState) -> None:
    """Atomic replace, so a reader in another process never sees half a file."""
    write_json_atomic(path, state.model_dump(mode="json"))

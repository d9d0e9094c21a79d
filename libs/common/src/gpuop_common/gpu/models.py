"""Vendor-neutral GPU inventory, health and telemetry models.

Frozen dataclasses so that services can hash, compare and cache them freely; every optional field is
`None` when the hardware or driver does not provide it (never a made-up default).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Vendor(StrEnum):
    AMD = "amd"
    NVIDIA = "nvidia"


class LinkType(StrEnum):
    XGMI = "xgmi"
    PCIE = "pcie"
    NVLINK = "nvlink"
    OTHER = "other"


class TempSensor(StrEnum):
    """Temperature channels; AMD reports edge/junction/memory, NVIDIA gpu (die) and memory."""

    EDGE = "edge"
    JUNCTION = "junction"
    MEMORY = "memory"
    GPU = "gpu"


class FieldErrorKind(StrEnum):
    MISSING = "missing"  # the file or attribute does not exist on this GPU / driver
    UNREADABLE = "unreadable"  # exists but reading failed (EPERM, EIO, ENODATA, ...)
    INVALID = "invalid"  # read fine but the content is not what the format says
    NOT_SUPPORTED = "not_supported"  # the driver says the query is unsupported (NVML NotSupported)
    FAILED = "failed"  # any other driver error (NVML error code other than NotSupported)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One reading that could not be taken; `source` names the file or NVML call."""

    gpu_id: str
    field: str
    kind: FieldErrorKind
    source: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PciIds:
    vendor_id: int
    device_id: int
    subsystem_vendor_id: int | None = None
    subsystem_device_id: int | None = None
    revision: int | None = None


@dataclass(frozen=True, slots=True)
class GpuLink:
    """A link from one GPU to a peer GPU (peer_id is the peer's stable `GpuDevice.id`)."""

    peer_id: str
    link_type: LinkType
    weight: int | None = None  # KFD io_link weight (AMD) or NVML topology level (NVIDIA PCIe)
    hops: int | None = None
    max_bandwidth_mbps: int | None = None
    count: int = 1  # parallel links (NVLink lanes to the fabric, KFD links between partitions)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Current and allowed partition modes of one physical GPU.

    AMD: compute SPX/DPX/TPX/QPX/CPX and memory NPS1..NPS8; `pending_memory` is a memory partition
    just written that comes into force at the next driver reload (sysfs shows no pending request,
    so only the write's answer carries it). NVIDIA: compute `none`/`mig`, memory unused,
    `pending_compute` is the MIG mode that applies after the next GPU reset.
    """

    compute: str | None
    memory: str | None
    available_compute: tuple[str, ...] = ()
    available_memory: tuple[str, ...] = ()
    pending_compute: str | None = None
    pending_memory: str | None = None

    @property
    def key(self) -> str | None:
        """`<compute>_<memory>` lower-case, the AMD device plugin's partition resource key."""
        if self.compute is None or self.memory is None:
            return None
        return f"{self.compute}_{self.memory}".lower()


@dataclass(frozen=True, slots=True)
class ComputePartition:
    """One logical device of a partitioned AMD GPU (one KFD node, its own render node)."""

    id: str  # device-plugin id: parent BDF for partition 0, `amdgpu_xcp_<n>` for the others
    index: int
    kfd_node: int
    kfd_gpu_id: int | None
    render_minor: int
    card_minor: int | None
    device_nodes: tuple[str, ...]
    compute_units: int | None
    simd_count: int | None
    memory_bytes: int | None
    numa_node: int | None


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One NVIDIA MIG device (GPU instance + compute instance)."""

    uuid: str
    index: int
    profile: str | None  # e.g. `1g.10gb`
    memory_bytes: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    device_nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One physical GPU as seen by the driver."""

    vendor: Vendor
    id: str  # stable unique id: AMD unique_id (16 hex digits), NVIDIA UUID
    index: int
    pci_address: str  # DDDD:BB:DD.F, lower-case hex
    pci: PciIds
    model: str  # AMD marketing name from the PCI id table, NVIDIA nvmlDeviceGetName
    product_name: str | None = None  # AMD FRU product_name file
    family: str | None = None  # AMD libdrm family (AI, NV, GC_11_0_0), NVIDIA architecture (hopper)
    architecture: str | None = None  # AMD gfx target (gfx942), NVIDIA architecture name
    gfx_target_version: int | None = None
    compute_capability: str | None = None  # NVIDIA CUDA compute capability, e.g. `9.0`
    vram_total_bytes: int | None = None
    compute_units: int | None = None  # AMD CUs, NVIDIA multiprocessor count when known
    simd_count: int | None = None
    driver_version: str | None = None
    driver_src_version: str | None = None  # AMD amdgpu module srcversion (modpost's source checksum)
    cuda_driver_version: str | None = None
    vbios_version: str | None = None
    serial: str | None = None
    numa_node: int | None = None
    card_minor: int | None = None  # AMD /dev/dri/card<N>
    render_minor: int | None = None  # AMD /dev/dri/renderD<M>
    minor_number: int | None = None  # NVIDIA /dev/nvidia<N>
    kfd_nodes: tuple[int, ...] = ()
    device_nodes: tuple[str, ...] = ()
    links: tuple[GpuLink, ...] = ()
    hive_id: str | None = None  # AMD XGMI hive (decimal u64 as in KFD)
    nvlink_clique: str | None = None  # NVIDIA `<clusterUuid>.<cliqueId>`
    partition: PartitionState | None = None
    partitions: tuple[ComputePartition, ...] = ()
    mig_devices: tuple[MigDevice, ...] = ()

    @property
    def allocation_ids(self) -> tuple[str, ...]:
        """Every id a kubelet allocation may name part of this GPU by: the GPU id and PCI address
        (device plugin ids of a whole GPU), its partitions' ids and its MIG devices' UUIDs."""
        return (
            self.id,
            self.pci_address,
            *(part.id for part in self.partitions),
            *(mig.uuid for mig in self.mig_devices),
        )


@dataclass(frozen=True, slots=True)
class HealthReason:
    code: str  # machine-readable: kfd_node_vanished, ras_uncorrectable_increase, xid_critical, ...
    message: str
    source: str = ""


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    id: str
    reasons: tuple[HealthReason, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.reasons


@dataclass(frozen=True, slots=True)
class GpuHealth:
    gpu_id: str
    reasons: tuple[HealthReason, ...] = ()
    partitions: tuple[PartitionHealth, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.reasons


@dataclass(frozen=True, slots=True)
class EccCounts:
    correctable: int | None = None
    uncorrectable: int | None = None
    deferred: int | None = None


@dataclass(frozen=True, slots=True)
class PcieReading:
    current_gen: int | None = None
    current_speed_gts: float | None = None
    current_width: int | None = None
    max_gen: int | None = None
    max_speed_gts: float | None = None
    max_width: int | None = None
    rx_bytes_per_s: float | None = None
    tx_bytes_per_s: float | None = None
    replay_count: int | None = None


@dataclass(frozen=True, slots=True)
class GpuTelemetry:
    """Readings of one GPU or one partition; absent readings are `None` with a matching FieldError."""

    gpu_id: str
    partition_id: str | None = None
    temperatures_c: dict[TempSensor, float] = field(default_factory=dict)
    power_w: float | None = None
    power_average_w: float | None = None
    power_cap_w: float | None = None
    energy_j: float | None = None
    gpu_util_percent: float | None = None
    memory_util_percent: float | None = None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    vram_free_bytes: int | None = None
    shader_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    pcie: PcieReading = field(default_factory=PcieReading)
    ecc: dict[str, EccCounts] = field(default_factory=dict)
    link_count: int | None = None  # active XGMI / NVLink links
    link_rx_bytes: int | None = None
    link_tx_bytes: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    errors: tuple[FieldError, ...] = ()

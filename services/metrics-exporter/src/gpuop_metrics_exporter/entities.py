"""What a series describes: a whole GPU, one AMD compute partition or one NVIDIA MIG device.

A partitioned AMD GPU has no separate "whole GPU" entity: like the AMD exporter, device-wide readings
(power, temperatures, ECC, PCIe) go on partition 0 and the other partitions carry what is their own
(memory share, compute units, health). A MIG-enabled NVIDIA GPU keeps its GPU entity (dcgm-exporter
reports it) and adds one entity per MIG device.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuop_common.config.metrics_exporter import NamingSet
from gpuop_common.gpu import ComputePartition, GpuDevice, GpuHealth, HealthReason, MigDevice, Vendor
from gpuop_common.gpu.dranames import gpu_name, mig_name, partition_name

POD_LABELS = ("pod", "namespace", "container")
# Always present in the AMD exporter's output; gpuop has no Slurm integration, so they stay empty.
AMD_JOB_LABELS = ("job_id", "job_user", "job_partition")
AMD_DEPLOYMENT_MODE = "baremetal"
# Every label name the exporter sets itself; a configured extra label may not take any of them.
RESERVED_LABELS = frozenset(
    {
        *POD_LABELS, *AMD_JOB_LABELS, "gpu_id", "gpu_partition_id", "gpu_compute_partition_type",
        "gpu_memory_partition_type", "serial_number", "card_model", "gpu_uuid", "pci_bus_id", "hostname",
        "deployment_mode", "gpu", "UUID", "device", "modelName", "DCGM_FI_DRIVER_VERSION",
        "GPU_I_PROFILE", "GPU_I_ID", "uuid", "serial", "model", "vendor", "partition", "partition_id",
        "sensor", "clock", "clock_type", "clock_index", "block", "severity", "link_type", "reason",
        "field", "kind",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Entity:
    gpu: GpuDevice
    logical_index: int  # the AMD exporter's gpu_id: partitions numbered across the node
    partition_index: int | None  # None for an unpartitioned GPU (and a MIG GPU's own entity)
    partition_id: str  # device-plugin id of the partition or the MIG UUID; "" for a whole GPU
    device_ids: tuple[str, ...]  # ids the kubelet pod-resources API may list for this entity
    device_readings: bool  # carries the physical GPU's telemetry
    partition: ComputePartition | None = None
    mig: MigDevice | None = None

    @property
    def key(self) -> str:
        return self.partition_id or self.gpu.id


def entities_for(gpus: list[GpuDevice]) -> list[Entity]:
    """Entities of the node's GPUs, in index order (`gpus` is sorted by index)."""
    result: list[Entity] = []
    logical = 0
    for gpu in gpus:
        # Device plugin ids (UUID / BDF, partition and MIG ids) and the DRA driver's device names.
        whole_ids = (gpu.id, gpu.pci_address, gpu_name(gpu))
        if len(gpu.partitions) > 1:
            for part in gpu.partitions:
                own = (part.id, partition_name(gpu, part.index))
                ids = (*own, *whole_ids) if part.index == 0 else own
                result.append(Entity(gpu, logical, part.index, part.id, ids, part.index == 0, partition=part))
                logical += 1
            continue
        result.append(Entity(gpu, logical, None, "", whole_ids, True))
        logical += 1
        for mig in gpu.mig_devices:
            mig_ids = (mig.uuid, mig_name(gpu, mig))
            result.append(Entity(gpu, logical, mig.index, mig.uuid, mig_ids, False, mig=mig))
    return result


def nvml_bus_id(pci_address: str) -> str:
    """`0000:18:00.0` -> `00000000:18:00.0`, the form DCGM (and so dcgm-exporter) prints."""
    domain, _, rest = pci_address.partition(":")
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}"
    except ValueError:
        return pci_address


def _amd_labels(entity: Entity, hostname: str) -> dict[str, str]:
    gpu = entity.gpu
    state = gpu.partition
    labels = {
        "gpu_id": str(entity.logical_index),
        "gpu_partition_id": str(entity.partition_index or 0),
        "gpu_compute_partition_type": (state.compute or "").lower() if state else "",
        "gpu_memory_partition_type": (state.memory or "").lower() if state else "",
        "serial_number": gpu.serial or "",
        "card_model": gpu.model,
        "gpu_uuid": gpu.id,
        "pci_bus_id": gpu.pci_address,
        "hostname": hostname,
        "deployment_mode": AMD_DEPLOYMENT_MODE,
    }
    labels.update(dict.fromkeys(AMD_JOB_LABELS, ""))
    return labels


def _dcgm_labels(entity: Entity, hostname: str) -> dict[str, str]:
    gpu = entity.gpu
    labels = {
        "gpu": str(gpu.index),
        "UUID": gpu.id,
        "pci_bus_id": nvml_bus_id(gpu.pci_address),
        "device": f"nvidia{gpu.minor_number if gpu.minor_number is not None else gpu.index}",
        "modelName": gpu.model,
        "hostname": hostname,
        "DCGM_FI_DRIVER_VERSION": gpu.driver_version or "",
    }
    if entity.mig is not None:
        labels["GPU_I_PROFILE"] = entity.mig.profile or ""
        gi = entity.mig.gpu_instance_id
        labels["GPU_I_ID"] = str(gi) if gi is not None else ""
    return labels


def _neutral_labels(entity: Entity, hostname: str) -> dict[str, str]:
    gpu = entity.gpu
    return {
        "gpu": str(gpu.index),
        "uuid": gpu.id,
        "serial": gpu.serial or "",
        "pci_bus_id": gpu.pci_address,
        "model": gpu.model,
        "vendor": gpu.vendor.value,
        "hostname": hostname,
        "partition": "" if entity.partition_index is None else str(entity.partition_index),
        "partition_id": entity.partition_id,
    }


def applies(naming: NamingSet, vendor: Vendor) -> bool:
    """Vendor sets only describe their own vendor's GPUs; the neutral set describes all."""
    return naming == "neutral" or (naming == "amd") == (vendor == Vendor.AMD)


def entity_labels(entity: Entity, naming: NamingSet, hostname: str) -> dict[str, str]:
    """Identity labels of one entity in one naming set (pod labels are added by the caller)."""
    if naming == "amd":
        return _amd_labels(entity, hostname)
    if naming == "dcgm":
        return _dcgm_labels(entity, hostname)
    return _neutral_labels(entity, hostname)


def health_reasons(entity: Entity, health: GpuHealth | None) -> tuple[HealthReason, ...]:
    """Why this entity is unhealthy: its GPU's reasons plus its own partition's."""
    if health is None:
        return ()
    own: tuple[HealthReason, ...] = ()
    if entity.partition_id:
        for part in health.partitions:
            if part.id == entity.partition_id:
                own = part.reasons
    return health.reasons + own

"""Inventory: which resources a node advertises, from the backend's GPUs and the plugin config.

Pure functions. Naming follows the vendor plugins so existing pod specs keep working:
- AMD: device ids are the PCI address of a whole GPU or `amdgpu_xcp_<n>` of a partition;
  `single` puts everything under `amd.com/gpu`, `mixed` makes one `amd.com/<compute>_<memory>`
  resource per partition mode (or `amd.com/gpu` for GPUs that cannot be partitioned).
- NVIDIA: device ids are GPU/MIG UUIDs; MIG strategy `none` (full GPUs), `single` (MIG devices as
  `nvidia.com/gpu`, all identical) or `mixed` (`nvidia.com/mig-<profile>`).
- Sharing (time-slicing, NVIDIA MPS) turns each device into `replicas` devices `<id>::<n>` (resource
  `<name>.shared` with `renameByDefault`); the count per device is `gpuop_common.gpu.sharing`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from gpuop_common.config import DevicePluginConfig
from gpuop_common.config.device_plugin import ResourceFilter, Sharing
from gpuop_common.gpu import GpuDevice, LinkType, Vendor
from gpuop_common.gpu.sharing import DeviceSharing, mps_problems, replicas_for

from gpuop_device_plugin.devices import (
    MAX_DEVICE_ID_LENGTH,
    MpsClients,
    PluginDevice,
    ResourcePlan,
    replica_id,
)
from gpuop_device_plugin.mps import (
    client_memory_limit_mib,
    mps_pipe_dir,
    mps_shm_dir,
    thread_percentage,
)

AMD_DOMAIN = "amd.com"
NVIDIA_DOMAIN = "nvidia.com"
_FABRIC_LINKS = (LinkType.XGMI, LinkType.NVLINK)


def gpu_selected(gpu: GpuDevice, selection: ResourceFilter) -> bool:
    """The config's resource filter: every non-empty list must match (lists are alternatives)."""
    if selection.pci_addresses and gpu.pci_address not in selection.pci_addresses:
        return False
    if selection.indices and gpu.index not in selection.indices:
        return False
    if selection.models:
        names = " ".join(n for n in (gpu.model, gpu.product_name) if n).lower()
        if not any(model.lower() in names for model in selection.models):
            return False
    return True


def _peers(gpu: GpuDevice) -> frozenset[str]:
    return frozenset(
        link.peer_id for link in gpu.links if link.link_type in _FABRIC_LINKS and (link.hops or 1) == 1
    )


def _numa(value: int | None) -> int | None:
    return value if value is not None and value >= 0 else None


def amd_devices(gpu: GpuDevice, resource_for: str) -> list[PluginDevice]:
    """One device per compute partition, or the whole GPU when it is not partitioned."""
    common = {
        "resource": resource_for,
        "vendor": Vendor.AMD,
        "physical_id": gpu.id,
        "visible_id": f"GPU-{gpu.id}",
        "hive": gpu.hive_id,
        "linked_peers": _peers(gpu),
    }
    if not gpu.partitions:
        return [
            PluginDevice(
                id=gpu.pci_address,
                base_id=gpu.pci_address,
                device_nodes=gpu.device_nodes,
                numa_node=_numa(gpu.numa_node),
                **common,  # type: ignore[arg-type]
            )
        ]
    return [
        PluginDevice(
            id=part.id,
            base_id=part.id,
            device_nodes=part.device_nodes,
            numa_node=_numa(part.numa_node if part.numa_node is not None else gpu.numa_node),
            partition_index=part.index,
            **common,  # type: ignore[arg-type]
        )
        for part in gpu.partitions
    ]


def amd_resource(gpu: GpuDevice, strategy: str) -> str:
    if strategy == "mixed" and gpu.partition is not None and gpu.partition.key is not None:
        return f"{AMD_DOMAIN}/{gpu.partition.key}"
    return f"{AMD_DOMAIN}/gpu"


def amd_plan(gpus: Sequence[GpuDevice], strategy: str) -> tuple[list[PluginDevice], list[str]]:
    keys = sorted({gpu.partition.key for gpu in gpus if gpu.partition and gpu.partition.key})
    if strategy == "single" and len(keys) > 1:
        # The AMD plugin refuses such a node too: one amd.com/gpu would mix unequal devices.
        return [], [
            f"GPUs are partitioned differently ({', '.join(keys)}); "
            "resourceNamingStrategy single needs one mode per node, use mixed"
        ]
    devices: list[PluginDevice] = []
    for gpu in gpus:
        devices.extend(amd_devices(gpu, amd_resource(gpu, strategy)))
    return devices, []


def mig_resource_name(profile: str) -> str:
    return f"{NVIDIA_DOMAIN}/mig-{profile.replace('+', '.')}"


def _nvidia_device(gpu: GpuDevice, resource: str, dev_id: str, nodes: tuple[str, ...]) -> PluginDevice:
    return PluginDevice(
        id=dev_id,
        resource=resource,
        vendor=Vendor.NVIDIA,
        physical_id=gpu.id,
        base_id=dev_id,
        visible_id=dev_id,
        device_nodes=nodes,
        numa_node=_numa(gpu.numa_node),
        hive=gpu.nvlink_clique,
        linked_peers=_peers(gpu),
    )


def _mig_enabled(gpu: GpuDevice) -> bool:
    return gpu.partition is not None and gpu.partition.compute == "mig"


def nvidia_plan(gpus: Sequence[GpuDevice], strategy: str) -> tuple[list[PluginDevice], list[str]]:
    gpu_resource = f"{NVIDIA_DOMAIN}/gpu"
    if strategy == "none":
        return [_nvidia_device(g, gpu_resource, g.id, g.device_nodes) for g in gpus], []
    if strategy == "single":
        problems = [f"GPU {g.id} has MIG disabled" for g in gpus if not _mig_enabled(g)]
        problems += [f"GPU {g.id} has MIG enabled but no MIG devices" for g in gpus if not g.mig_devices]
        profiles = sorted({m.profile or "?" for g in gpus for m in g.mig_devices})
        if len(profiles) > 1:
            problems.append(f"MIG devices differ ({', '.join(profiles)})")
        if problems:
            return [], [f"migStrategy single: {'; '.join(problems)}"]
    devices: list[PluginDevice] = []
    errors: list[str] = []
    for gpu in gpus:
        if not _mig_enabled(gpu):
            devices.append(_nvidia_device(gpu, gpu_resource, gpu.id, gpu.device_nodes))
            continue
        for mig in gpu.mig_devices:
            if strategy == "mixed" and not mig.profile:
                errors.append(f"MIG device {mig.uuid} has no profile name; not advertised")
                continue
            resource = gpu_resource if strategy == "single" else mig_resource_name(mig.profile or "")
            devices.append(_nvidia_device(gpu, resource, mig.uuid, mig.device_nodes))
    return devices, errors


def _replicas(device: PluginDevice, shared: DeviceSharing, limit: int | None) -> list[PluginDevice]:
    return [
        dataclasses.replace(
            device,
            id=replica_id(device.base_id, n),
            resource=shared.resource,
            replica=n,
            mps_memory_limit_mib=limit,
        )
        for n in range(shared.replicas)
    ]


def apply_sharing(
    devices: Iterable[PluginDevice], gpus: Sequence[GpuDevice], sharing: Sharing, *, mps_ready: bool = True
) -> tuple[list[PluginDevice], frozenset[str], list[str]]:
    """Replace every shared device by its replicas (`<id>::<n>`, one count per GPU model or
    resource); returns the devices, the (possibly renamed) shared resource names and problems.

    MPS replicas wait for the control daemon (`mps_ready`): a pod must not get a replica before
    the pipe it connects to exists. MPS never covers MIG-enabled or AMD GPUs; those stay unshared."""
    by_id = {gpu.id: gpu for gpu in gpus}
    errors = mps_problems(gpus, sharing)
    out: list[PluginDevice] = []
    shared: set[str] = set()
    waiting = False
    for device in devices:
        gpu = by_id[device.physical_id]
        decision = replicas_for(device.resource, gpu, sharing, mig=_mig_enabled(gpu))
        if decision is None:
            out.append(device)
            continue
        if decision.strategy == "mps" and not mps_ready:
            waiting = True
            continue
        shared.add(decision.resource)
        limit = client_memory_limit_mib(gpu, sharing.mps) if sharing.mps else None
        out.extend(_replicas(device, decision, limit))
    if waiting:
        errors.append("sharing.mps: waiting for the MPS control daemon; MPS replicas not advertised yet")
    return out, frozenset(shared), errors


def mps_clients(sharing: Sharing, shared: frozenset[str]) -> dict[str, MpsClients]:
    """The MPS client settings of each MPS-shared resource."""
    if sharing.mps is None:
        return {}
    mps = sharing.mps
    clients = MpsClients(mps_pipe_dir(mps), mps_shm_dir(mps), thread_percentage(mps))
    return dict.fromkeys(shared, clients)


def build_plan(
    gpus: Sequence[GpuDevice], config: DevicePluginConfig, *, mps_ready: bool = True
) -> ResourcePlan:
    """All resources for these GPUs (any vendor mix) under this config."""
    selected = [gpu for gpu in gpus if gpu_selected(gpu, config.resource_filter)]
    amd, amd_errors = amd_plan(
        [g for g in selected if g.vendor == Vendor.AMD], config.resource_naming_strategy
    )
    nvidia, nvidia_errors = nvidia_plan(
        [g for g in selected if g.vendor == Vendor.NVIDIA], config.mig_strategy
    )
    sharing = config.sharing
    devices, shared, sharing_errors = apply_sharing([*amd, *nvidia], selected, sharing, mps_ready=mps_ready)
    errors = [*amd_errors, *nvidia_errors, *sharing_errors]
    resources: dict[str, list[PluginDevice]] = {}
    seen: set[str] = set()
    for device in devices:
        if len(device.id) > MAX_DEVICE_ID_LENGTH:
            errors.append(
                f"device id {device.id!r} is longer than {MAX_DEVICE_ID_LENGTH} characters; skipped"
            )
            continue
        if device.id in seen:
            errors.append(f"device id {device.id!r} appears twice; second one skipped")
            continue
        seen.add(device.id)
        resources.setdefault(device.resource, []).append(device)
    return ResourcePlan(
        resources={name: tuple(items) for name, items in sorted(resources.items())},
        errors=tuple(errors),
        shared=shared,
        fail_requests_greater_than_one=(
            sharing.mps.fail_requests_greater_than_one
            if sharing.mps is not None
            else sharing.time_slicing.fail_requests_greater_than_one
        ),
        mps=mps_clients(sharing, shared),
    )

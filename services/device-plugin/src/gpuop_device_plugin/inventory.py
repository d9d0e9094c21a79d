"""Inventory: which resources a node advertises, from the backend's GPUs and the plugin config.

Pure functions. Naming follows the vendor plugins so existing pod specs keep working:
- AMD: device ids are the PCI address of a whole GPU or `amdgpu_xcp_<n>` of a partition;
  `single` puts everything under `amd.com/gpu`, `mixed` makes one `amd.com/<compute>_<memory>`
  resource per partition mode (or `amd.com/gpu` for GPUs that cannot be partitioned).
- NVIDIA: device ids are GPU/MIG UUIDs; MIG strategy `none` (full GPUs), `single` (MIG devices as
  `nvidia.com/gpu`, all identical) or `mixed` (`nvidia.com/mig-<profile>`).
- Time-slicing turns each device into `replicas` devices `<id>::<n>` (resource `<name>.shared` with
  `renameByDefault`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuop_common.config import DevicePluginConfig
from gpuop_common.config.device_plugin import ResourceFilter, TimeSlicing
from gpuop_common.gpu import GpuDevice, LinkType, Vendor

from gpuop_device_plugin.devices import MAX_DEVICE_ID_LENGTH, PluginDevice, ResourcePlan, replica_id

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


def apply_time_slicing(
    devices: Iterable[PluginDevice], sharing: TimeSlicing
) -> tuple[list[PluginDevice], frozenset[str]]:
    """Replace every device of a shared resource by its replicas; returns the devices and the
    (possibly renamed) shared resource names."""
    replicas = {entry.name: entry.replicas for entry in sharing.resources}
    out: list[PluginDevice] = []
    shared: set[str] = set()
    for device in devices:
        count = replicas.get(device.resource)
        if count is None:
            out.append(device)
            continue
        name = f"{device.resource}.shared" if sharing.rename_by_default else device.resource
        shared.add(name)
        for n in range(count):
            out.append(
                PluginDevice(
                    id=replica_id(device.base_id, n),
                    resource=name,
                    vendor=device.vendor,
                    physical_id=device.physical_id,
                    base_id=device.base_id,
                    visible_id=device.visible_id,
                    device_nodes=device.device_nodes,
                    numa_node=device.numa_node,
                    hive=device.hive,
                    linked_peers=device.linked_peers,
                    partition_index=device.partition_index,
                    replica=n,
                )
            )
    return out, frozenset(shared)


def build_plan(gpus: Sequence[GpuDevice], config: DevicePluginConfig) -> ResourcePlan:
    """All resources for these GPUs (any vendor mix) under this config."""
    selected = [gpu for gpu in gpus if gpu_selected(gpu, config.resource_filter)]
    amd, amd_errors = amd_plan(
        [g for g in selected if g.vendor == Vendor.AMD], config.resource_naming_strategy
    )
    nvidia, nvidia_errors = nvidia_plan(
        [g for g in selected if g.vendor == Vendor.NVIDIA], config.mig_strategy
    )
    devices, shared = apply_time_slicing([*amd, *nvidia], config.sharing.time_slicing)
    errors = [*amd_errors, *nvidia_errors]
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
        fail_requests_greater_than_one=config.sharing.time_slicing.fail_requests_greater_than_one,
    )

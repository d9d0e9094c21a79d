"""What a container gets for a set of device ids (pure; the gRPC adapter turns it into protobuf).

AMD: `/dev/kfd` plus each GPU's `/dev/dri/card*` and `renderD*`, and ROCR_VISIBLE_DEVICES /
HIP_VISIBLE_DEVICES by unique id (`GPU-<unique_id>`). NVIDIA: `/dev/nvidia<N>`, `/dev/nvidiactl`,
`/dev/nvidia-uvm*` (+ MIG caps) and NVIDIA_VISIBLE_DEVICES by UUID; MPS replicas add the control
daemon's pipe directory and its shared memory (`<root>/shm` as `/dev/shm`). With CDI the device nodes are
left to the runtime (CDI names in the CRI field and the `cdi.k8s.io/` annotation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuop_common.gpu import Vendor
from gpuop_common.gpu.cdi import visible_devices_env

from gpuop_device_plugin.cdi import cdi_device_name
from gpuop_device_plugin.devices import HEALTHY, MpsClients, PluginDevice
from gpuop_device_plugin.mps import DEV_SHM

CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"


class AllocationRequestError(ValueError):
    """A request the plugin refuses as a whole; `code` is the gRPC status name to answer with."""

    def __init__(self, message: str, code: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str
    permissions: str = "rw"


@dataclass(frozen=True, slots=True)
class HostMount:
    host_path: str
    container_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class ContainerGrant:
    """Everything one container response carries."""

    device_ids: tuple[str, ...]
    envs: dict[str, str] = field(default_factory=dict)
    devices: tuple[DeviceNode, ...] = ()
    cdi_devices: tuple[str, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    mounts: tuple[HostMount, ...] = ()


def validate_request(
    resource: str,
    ids: Sequence[str],
    devices: Mapping[str, PluginDevice],
    health: Mapping[str, str],
    *,
    shared: bool = False,
    fail_requests_greater_than_one: bool = False,
) -> list[PluginDevice]:
    """The devices of a container request, or an error naming every bad id (never a partial answer)."""
    if not ids:
        raise AllocationRequestError(f"{resource}: container request names no devices")
    unknown = sorted({i for i in ids if i not in devices})
    if unknown:
        raise AllocationRequestError(f"{resource}: unknown device ids: {', '.join(unknown)}")
    unhealthy = sorted({i for i in ids if health.get(i) != HEALTHY})
    if unhealthy:
        raise AllocationRequestError(
            f"{resource}: devices are unhealthy: {', '.join(unhealthy)}", code="FAILED_PRECONDITION"
        )
    if shared and fail_requests_greater_than_one and len(ids) > 1:
        raise AllocationRequestError(
            f"{resource}: maximum request size for shared resources is 1 (got {len(ids)})"
        )
    return [devices[i] for i in ids]


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def mps_env(chosen: Sequence[PluginDevice], mps: MpsClients) -> dict[str, str]:
    """What an MPS client reads: the control daemon's pipe and its share of the GPU (the daemon's
    defaults say the same; the env keeps a client from asking for more)."""
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": mps.pipe_dir,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(mps.active_thread_percentage),
    }
    limits = _unique([f"{d.visible_id}={d.mps_memory_limit_mib}M" for d in chosen if d.mps_memory_limit_mib])
    if limits:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(limits)
    return env


def grant(
    resource: str, chosen: Sequence[PluginDevice], *, cdi: bool, mps: MpsClients | None = None
) -> ContainerGrant:
    """The container response for these (validated) devices; replicas collapse to their device."""
    ids = tuple(device.id for device in chosen)
    envs: dict[str, str] = {}
    for vendor in (Vendor.AMD, Vendor.NVIDIA):
        envs.update(visible_devices_env(vendor, [d.visible_id for d in chosen if d.vendor == vendor]))
    mounts: tuple[HostMount, ...] = ()
    if mps is not None:
        envs.update(mps_env(chosen, mps))
        # Clients attach through the pipes and POSIX shared memory: the daemon's /dev/shm (a tmpfs
        # at <root>/shm) replaces the container's own private one, read-write as segments are made.
        mounts = (HostMount(mps.pipe_dir, mps.pipe_dir), HostMount(mps.shm_dir, DEV_SHM))
    if cdi:
        names = tuple(_unique([cdi_device_name(d) for d in chosen]))
        key = CDI_ANNOTATION_PREFIX + "gpuop-device-plugin_" + resource.replace("/", "_")
        return ContainerGrant(ids, envs, cdi_devices=names, annotations={key: ",".join(names)}, mounts=mounts)
    nodes = _unique([node for device in chosen for node in device.device_nodes])
    return ContainerGrant(ids, envs, devices=tuple(DeviceNode(path) for path in nodes), mounts=mounts)

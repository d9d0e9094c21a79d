"""What the plugin advertises: one `PluginDevice` per kubelet device id, grouped by resource name.

Plain frozen dataclasses so the resource manager's pure functions can compare and hash them; the
gRPC adapter converts them to protobuf messages at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuop_common.gpu import Vendor

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
REPLICA_SEPARATOR = "::"
MAX_DEVICE_ID_LENGTH = 63  # kubelet limit on Device.ID


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One schedulable device: a whole GPU, an AMD compute partition, a MIG device, or a replica.

    `physical_id` is the stable id of the GPU it lives on (AMD unique_id, NVIDIA UUID): health,
    topology and packing are decided per physical GPU. `base_id` is the device without a replica
    suffix (equal to `id` when the resource is not shared).
    """

    id: str
    resource: str
    vendor: Vendor
    physical_id: str
    base_id: str
    visible_id: str  # what ROCR/HIP_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES name it by
    device_nodes: tuple[str, ...]
    numa_node: int | None = None
    hive: str | None = None  # XGMI hive id or NVLink clique: GPUs with a fast direct fabric
    linked_peers: frozenset[str] = field(default_factory=frozenset)  # physical ids of direct peers
    partition_index: int | None = None
    replica: int | None = None
    # MPS replicas: the pinned device memory each client may use (the daemon's default limit).
    mps_memory_limit_mib: int | None = None

    @property
    def shared(self) -> bool:
        return self.replica is not None


@dataclass(frozen=True, slots=True)
class MpsClients:
    """What an MPS client container needs: the control daemon's pipe directory (host path, mounted
    at the same path), its shared-memory directory (host path, mounted at /dev/shm) and the
    per-client compute share."""

    pipe_dir: str
    shm_dir: str
    active_thread_percentage: int


@dataclass(frozen=True, slots=True)
class ResourcePlan:
    """Every resource the node should advertise, plus the reasons some GPUs could not be."""

    resources: dict[str, tuple[PluginDevice, ...]]
    errors: tuple[str, ...] = ()
    # Resources whose devices are time-slicing replicas, and whether >1 replica per request fails.
    shared: frozenset[str] = frozenset()
    fail_requests_greater_than_one: bool = False
    mps: dict[str, MpsClients] = field(default_factory=dict)  # resource -> MPS client settings

    def device(self, device_id: str) -> PluginDevice | None:
        for devices in self.resources.values():
            for device in devices:
                if device.id == device_id:
                    return device
        return None

    def all_devices(self) -> list[PluginDevice]:
        return [device for name in sorted(self.resources) for device in self.resources[name]]


def replica_id(base_id: str, replica: int) -> str:
    """`<id>::<n>`, the NVIDIA plugin's annotated id for one time-slicing replica."""
    return f"{base_id}{REPLICA_SEPARATOR}{replica}"


def socket_name(resource: str, vendor: Vendor) -> str:
    """The socket file in the device-plugins dir: `amd.com_<name>` (AMD plugin) or
    `nvidia-<name>.sock` (NVIDIA plugin), so tooling that looks for either keeps working."""
    domain, _, name = resource.partition("/")
    if vendor == Vendor.NVIDIA:
        return f"nvidia-{name}.sock"
    return f"{domain}_{name}"

"""Pure kubelet device-manager rules: registration checks, device sets, counts, device selection."""

from __future__ import annotations

import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuop_common.kubelet import deviceplugin as dp


class KubeletEmulatorError(Exception):
    """Base class of the emulator's own errors."""


class AllocationError(KubeletEmulatorError):
    """An allocation the kubelet would refuse (unknown resource, too few devices, plugin error)."""


class DraError(KubeletEmulatorError):
    """A DRA call that could not be made (driver not registered, RPC failure)."""


@dataclass(frozen=True)
class DeviceInfo:
    """One device as the plugin last reported it in ListAndWatch."""

    id: str
    health: str
    numa_nodes: tuple[int, ...] = ()

    @property
    def healthy(self) -> bool:
        return dp.is_healthy(self.health)


@dataclass(frozen=True)
class DeviceSnapshot:
    """The device manager's view at one moment: resource -> device id -> device."""

    devices: Mapping[str, Mapping[str, DeviceInfo]] = field(default_factory=dict)

    def resources(self) -> dict[str, dict[str, str]]:
        return {res: {dev_id: d.health for dev_id, d in devs.items()} for res, devs in self.devices.items()}

    def capacity(self) -> dict[str, int]:
        """Node status.capacity: every device the plugin reports, healthy or not."""
        return {res: len(devs) for res, devs in self.devices.items()}

    def allocatable(self) -> dict[str, int]:
        """Node status.allocatable: healthy devices only."""
        return {res: sum(1 for d in devs.values() if d.healthy) for res, devs in self.devices.items()}


def devices_from_response(devices: Iterable[dp.Device]) -> dict[str, DeviceInfo]:
    """A ListAndWatch message is the complete device set of the resource: build it from scratch."""
    return {
        d.ID: DeviceInfo(id=d.ID, health=d.health, numa_nodes=tuple(n.ID for n in d.topology.nodes))
        for d in devices
    }


def register_request_error(version: str, resource_name: str, endpoint: str, socket_dir: Path) -> str | None:
    """Why the kubelet would refuse this Register call, or None when it is acceptable."""
    if version not in dp.SUPPORTED_VERSIONS:
        return (
            f"requested device plugin API version {version!r} is not supported by kubelet; "
            f"supported versions are {list(dp.SUPPORTED_VERSIONS)}"
        )
    if not dp.is_extended_resource_name(resource_name):
        return f"invalid extended resource name {resource_name!r}: expected <domain>/<name>"
    return endpoint_error(endpoint, socket_dir)


def endpoint_error(endpoint: str, socket_dir: Path) -> str | None:
    """The endpoint must name a socket file directly inside the device-plugins directory."""
    if not endpoint or "/" in endpoint or endpoint in {".", ".."}:
        return f"invalid endpoint {endpoint!r}: must be a socket file name in {socket_dir}"
    path = socket_dir / endpoint
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return f"device plugin endpoint {path} does not exist"
    if not stat.S_ISSOCK(mode):
        return f"device plugin endpoint {path} is not a unix socket"
    return None


def choose_devices(available: Sequence[str], count: int, preferred: Sequence[str] = ()) -> list[str]:
    """Kubelet selection: honour the plugin's preference where valid, then fill up in a stable order.

    The preference is advisory: ids outside `available` and duplicates are dropped, and a short
    answer is completed from the remaining available devices.
    """
    if count < 1:
        raise AllocationError(f"allocation size must be at least 1, got {count}")
    if len(available) < count:
        raise AllocationError(f"requested {count} devices but only {len(available)} are available")
    allowed = set(available)
    chosen: list[str] = []
    for device_id in preferred:
        if device_id in allowed and device_id not in chosen:
            chosen.append(device_id)
        if len(chosen) == count:
            return chosen
    chosen.extend(d for d in available if d not in chosen)
    return chosen[:count]


def explicit_devices_error(
    resource: str, wanted: Sequence[str], devices: Mapping[str, DeviceInfo], in_use: set[str]
) -> str | None:
    """Why an explicit list of devices cannot be allocated, or None."""
    if not wanted:
        return "no devices requested"
    if len(set(wanted)) != len(wanted):
        return f"duplicate device ids in {list(wanted)}"
    for device_id in wanted:
        device = devices.get(device_id)
        if device is None:
            return f"device {device_id!r} is not a {resource} device of this node"
        if not device.healthy:
            return f"device {device_id!r} of {resource} is {device.health!r}, not Healthy"
        if device_id in in_use:
            return f"device {device_id!r} of {resource} is already allocated"
    return None

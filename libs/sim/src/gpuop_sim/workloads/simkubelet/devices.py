"""Pod admission of device-plugin resources, the kubelet device manager's part of starting a pod."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuop_common.kubeobj import is_extended

from gpuop_sim.workloads.simkubelet.podspec import ContainerConfigError


class DeviceAllocator(Protocol):
    """The kubelet device manager side a pod needs (KubeletEmulator implements it)."""

    def allocate(
        self,
        resource: str,
        devices: int,
        *,
        pod: str | None = None,
        namespace: str = "default",
        container: str = "main",
    ) -> Any: ...
    def release(self, pod: str, namespace: str = "default") -> bool: ...


@dataclass
class Granted:
    """What the plugins' Allocate answers give one container."""

    env: dict[str, str] = field(default_factory=dict)
    mounts: list[tuple[str, Path]] = field(default_factory=list)


def extended_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """Device-plugin resources a container asks for (limits; requests must equal them)."""
    resources = container.get("resources") or {}
    wanted = dict(resources.get("requests") or {})
    wanted.update(resources.get("limits") or {})
    out = {}
    for name, value in wanted.items():
        if not is_extended(name):
            continue
        try:
            count = int(str(value))
        except ValueError:
            continue
        if count > 0:
            out[name] = count
    return out


def admit_devices(
    devices: DeviceAllocator | None,
    node_root: Path,
    pod: tuple[str, str],
    containers: Sequence[Mapping[str, Any]],
) -> dict[str, Granted] | None:
    """Allocate every container's devices; None when the pod asks for none.

    `pod` is (namespace, name). Plugin envs reach the container and plugin mounts become path
    rewrites; any failure releases what was taken and raises UnexpectedAdmissionError, as the
    kubelet fails such a pod rather than retrying it.
    """
    wanted = [(c, r, n) for c in containers for r, n in extended_requests(c).items()]
    if not wanted:
        return None
    namespace, name = pod
    if devices is None:
        raise ContainerConfigError(
            "UnexpectedAdmissionError", f"no device manager on this node for {wanted[0][1]}"
        )
    granted: dict[str, Granted] = {}
    try:
        for container, resource, count in wanted:
            container_name = str(container.get("name") or "")
            allocation = devices.allocate(
                resource, count, pod=name, namespace=namespace, container=container_name
            )
            grant = granted.setdefault(container_name, Granted())
            grant.env.update(dict(allocation.response.envs))
            for mount in allocation.response.mounts:
                host = node_root / str(mount.host_path).lstrip("/")
                grant.mounts.append((str(mount.container_path).rstrip("/") or "/", host))
    except Exception as error:
        devices.release(name, namespace)
        raise ContainerConfigError(
            "UnexpectedAdmissionError", f"Allocate failed due to {error}, which is unexpected"
        ) from error
    return granted

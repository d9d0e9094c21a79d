"""Kubelet device plugin API v1beta1: messages, stubs, servicers, constants and name validation.

from gpuop_common.kubelet import deviceplugin as dp
dp.RegistrationStub(channel).Register(dp.RegisterRequest(version=dp.VERSION, ...))
"""

from __future__ import annotations

import re

from ._generated.deviceplugin_v1beta1_pb2 import (
    AllocateRequest,
    AllocateResponse,
    CDIDevice,
    ContainerAllocateRequest,
    ContainerAllocateResponse,
    ContainerPreferredAllocationRequest,
    ContainerPreferredAllocationResponse,
    Device,
    DevicePluginOptions,
    DeviceSpec,
    Empty,
    ListAndWatchResponse,
    Mount,
    NUMANode,
    PreferredAllocationRequest,
    PreferredAllocationResponse,
    PreStartContainerRequest,
    PreStartContainerResponse,
    RegisterRequest,
    TopologyInfo,
)
from ._generated.deviceplugin_v1beta1_pb2_grpc import (
    DevicePluginServicer,
    DevicePluginStub,
    RegistrationServicer,
    RegistrationStub,
    add_DevicePluginServicer_to_server,
    add_RegistrationServicer_to_server,
)

VERSION = "v1beta1"
SUPPORTED_VERSIONS: tuple[str, ...] = (VERSION,)
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET_NAME = "kubelet.sock"
KUBELET_SOCKET = DEVICE_PLUGIN_PATH + KUBELET_SOCKET_NAME
# The kubelet's own state file in the device-plugins dir; plugins must never delete it.
KUBELET_CHECKPOINT_NAME = "kubelet_internal_checkpoint"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
PRE_START_CONTAINER_TIMEOUT_S = 30.0
MAX_DEVICE_ID_LENGTH = 63

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_REQUESTS_PREFIX = "requests."


def is_qualified_name(value: str) -> bool:
    """Kubernetes qualified name: optional DNS-subdomain prefix (<= 253) + "/" + name (<= 63)."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return False
    else:
        return False
    return 0 < len(name) <= 63 and _QUALIFIED_NAME_PART.fullmatch(name) is not None


def is_extended_resource_name(name: str) -> bool:
    """The kubelet's rule for device plugin resource names, e.g. `amd.com/gpu`.

    Must contain "/", must not be in the kubernetes.io domain (native resources), must not start with
    "requests.", and "requests.<name>" must be a qualified name (so quota can refer to it).
    """
    if "/" not in name or "kubernetes.io/" in name or name.startswith(_REQUESTS_PREFIX):
        return False
    return is_qualified_name(_REQUESTS_PREFIX + name)


def is_healthy(health: str) -> bool:
    """Exactly "Healthy" counts as healthy; any other string is unhealthy, as in the kubelet."""
    return health == HEALTHY


__all__ = [
    "DEVICE_PLUGIN_PATH",
    "HEALTHY",
    "KUBELET_CHECKPOINT_NAME",
    "KUBELET_SOCKET",
    "KUBELET_SOCKET_NAME",
    "MAX_DEVICE_ID_LENGTH",
    "PRE_START_CONTAINER_TIMEOUT_S",
    "SUPPORTED_VERSIONS",
    "UNHEALTHY",
    "VERSION",
    "AllocateRequest",
    "AllocateResponse",
    "CDIDevice",
    "ContainerAllocateRequest",
    "ContainerAllocateResponse",
    "ContainerPreferredAllocationRequest",
    "ContainerPreferredAllocationResponse",
    "Device",
    "DevicePluginOptions",
    "DevicePluginServicer",
    "DevicePluginStub",
    "DeviceSpec",
    "Empty",
    "ListAndWatchResponse",
    "Mount",
    "NUMANode",
    "PreStartContainerRequest",
    "PreStartContainerResponse",
    "PreferredAllocationRequest",
    "PreferredAllocationResponse",
    "RegisterRequest",
    "RegistrationServicer",
    "RegistrationStub",
    "TopologyInfo",
    "add_DevicePluginServicer_to_server",
    "add_RegistrationServicer_to_server",
    "is_extended_resource_name",
    "is_healthy",
    "is_qualified_name",
]

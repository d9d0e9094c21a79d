"""Kubelet DRA resource health stream (package `v1alpha1`, service `DRAResourceHealth`), optional.

A DRA driver that serves it on its service socket, next to DRAPlugin, lists `SERVICE` in
PluginInfo.supported_versions after its DRAPlugin versions (the kubelet picks the first DRAPlugin
name it knows and skips the rest). The kubelet then opens `NodeWatchResources` and reads it for as
long as the driver stays registered: every message is the driver's complete device list, and the
kubelet copies each device's health into the status of the pods holding it
(`status.containerStatuses[].allocatedResourcesStatus`).

The kubelet trusts a report for `health_check_timeout_seconds` (DEFAULT_TIMEOUT_S when 0) counted
from when the message arrived; a device not reported again within that time reads Unknown. A stream
that ends is opened again STREAM_RETRY_S seconds later.
"""

from __future__ import annotations

from ._generated.dra_health_v1alpha1_pb2 import (
    HEALTHY,
    UNHEALTHY,
    UNKNOWN,
    DeviceHealth,
    DeviceIdentifier,
    HealthStatus,
    NodeWatchResourcesRequest,
    NodeWatchResourcesResponse,
)
from ._generated.dra_health_v1alpha1_pb2_grpc import (
    DRAResourceHealthServicer,
    DRAResourceHealthStub,
    add_DRAResourceHealthServicer_to_server,
)

SERVICE = "v1alpha1.DRAResourceHealth"
DEFAULT_TIMEOUT_S = 30
STREAM_RETRY_S = 5.0
MAX_MESSAGE_CHARS = 1024
# The kubelet's own names of the three states, as a pod's allocatedResourcesStatus shows them.
STATUS_NAMES: dict[int, str] = {UNKNOWN: "Unknown", HEALTHY: "Healthy", UNHEALTHY: "Unhealthy"}


def status_name(value: int) -> str:
    """`Healthy` / `Unhealthy` / `Unknown`; an enum value this proto does not know reads Unknown."""
    return STATUS_NAMES.get(value, "Unknown")


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "HEALTHY",
    "MAX_MESSAGE_CHARS",
    "SERVICE",
    "STATUS_NAMES",
    "STREAM_RETRY_S",
    "UNHEALTHY",
    "UNKNOWN",
    "DRAResourceHealthServicer",
    "DRAResourceHealthStub",
    "DeviceHealth",
    "DeviceIdentifier",
    "HealthStatus",
    "NodeWatchResourcesRequest",
    "NodeWatchResourcesResponse",
    "add_DRAResourceHealthServicer_to_server",
    "status_name",
]

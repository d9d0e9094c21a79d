"""Kubelet DRA plugin API. Top-level names are v1beta1; `v1` holds the v1 module (adds Device.share_id).

A DRA driver serves `DRAPlugin` on its service socket and advertises the service names it implements
(`SERVICE_V1`, `SERVICE_V1BETA1`) in PluginInfo.supported_versions; the kubelet uses the first name in
the driver's order that it supports.
"""

from __future__ import annotations

from ._generated import dra_v1_pb2 as v1
from ._generated import dra_v1_pb2_grpc as v1_grpc
from ._generated import dra_v1beta1_pb2 as v1beta1
from ._generated import dra_v1beta1_pb2_grpc as v1beta1_grpc
from ._generated.dra_v1beta1_pb2 import (
    Claim,
    Device,
    NodePrepareResourceResponse,
    NodePrepareResourcesRequest,
    NodePrepareResourcesResponse,
    NodeUnprepareResourceResponse,
    NodeUnprepareResourcesRequest,
    NodeUnprepareResourcesResponse,
)
from ._generated.dra_v1beta1_pb2_grpc import (
    DRAPluginServicer,
    DRAPluginStub,
    add_DRAPluginServicer_to_server,
)

SERVICE_V1 = "v1.DRAPlugin"
SERVICE_V1BETA1 = "v1beta1.DRAPlugin"
# What a 1.36 kubelet accepts in PluginInfo.supported_versions.
KUBELET_SUPPORTED_SERVICES: tuple[str, ...] = (SERVICE_V1, SERVICE_V1BETA1)
PLUGINS_DIR = "/var/lib/kubelet/plugins/"
PREPARE_TIMEOUT_S = 45.0


def choose_service(supported_versions: list[str] | tuple[str, ...]) -> str | None:
    """The first service in the plugin's own order that the kubelet supports, or None."""
    for name in supported_versions:
        if name in KUBELET_SUPPORTED_SERVICES:
            return name
    return None


__all__ = [
    "KUBELET_SUPPORTED_SERVICES",
    "PLUGINS_DIR",
    "PREPARE_TIMEOUT_S",
    "SERVICE_V1",
    "SERVICE_V1BETA1",
    "Claim",
    "DRAPluginServicer",
    "DRAPluginStub",
    "Device",
    "NodePrepareResourceResponse",
    "NodePrepareResourcesRequest",
    "NodePrepareResourcesResponse",
    "NodeUnprepareResourceResponse",
    "NodeUnprepareResourcesRequest",
    "NodeUnprepareResourcesResponse",
    "add_DRAPluginServicer_to_server",
    "choose_service",
    "v1",
    "v1_grpc",
    "v1beta1",
    "v1beta1_grpc",
]

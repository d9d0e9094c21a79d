"""Kubelet pod-resources API v1: which devices each container got, and what the node can allocate.

    from gpuop_common.kubelet import podresources as pr, unix_channel
    pr.PodResourcesListerStub(unix_channel(pr.POD_RESOURCES_SOCKET)).List(pr.ListPodResourcesRequest())

The kubelet rate-limits this socket (POD_RESOURCES_QPS, burst POD_RESOURCES_BURST); clients must
tolerate RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

from ._generated.podresources_v1_pb2 import (
    AllocatableResourcesRequest,
    AllocatableResourcesResponse,
    CDIDevice,
    ClaimResource,
    ContainerDevices,
    ContainerMemory,
    ContainerResources,
    DynamicResource,
    GetPodResourcesRequest,
    GetPodResourcesResponse,
    ListPodResourcesRequest,
    ListPodResourcesResponse,
    NUMANode,
    PodResources,
    TopologyInfo,
)
from ._generated.podresources_v1_pb2_grpc import (
    PodResourcesListerServicer,
    PodResourcesListerStub,
    add_PodResourcesListerServicer_to_server,
)

VERSION = "v1"
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources/"
POD_RESOURCES_SOCKET_NAME = "kubelet.sock"
POD_RESOURCES_SOCKET = POD_RESOURCES_DIR + POD_RESOURCES_SOCKET_NAME
POD_RESOURCES_QPS = 100.0
POD_RESOURCES_BURST = 10

__all__ = [
    "POD_RESOURCES_BURST",
    "POD_RESOURCES_DIR",
    "POD_RESOURCES_QPS",
    "POD_RESOURCES_SOCKET",
    "POD_RESOURCES_SOCKET_NAME",
    "VERSION",
    "AllocatableResourcesRequest",
    "AllocatableResourcesResponse",
    "CDIDevice",
    "ClaimResource",
    "ContainerDevices",
    "ContainerMemory",
    "ContainerResources",
    "DynamicResource",
    "GetPodResourcesRequest",
    "GetPodResourcesResponse",
    "ListPodResourcesRequest",
    "ListPodResourcesResponse",
    "NUMANode",
    "PodResources",
    "PodResourcesListerServicer",
    "PodResourcesListerStub",
    "TopologyInfo",
    "add_PodResourcesListerServicer_to_server",
]

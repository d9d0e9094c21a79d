"""Kubelet plugin registration API (package `pluginregistration`, API dir v1).

A plugin serves `Registration` on a socket it creates under PLUGINS_REGISTRY_DIR; the kubelet's plugin
watcher dials it, calls GetInfo, registers the plugin with the handler for its type and reports the
outcome through NotifyRegistrationStatus.
"""

from __future__ import annotations

from ._generated.pluginregistration_v1_pb2 import (
    InfoRequest,
    PluginInfo,
    RegistrationStatus,
    RegistrationStatusResponse,
)
from ._generated.pluginregistration_v1_pb2_grpc import (
    RegistrationServicer,
    RegistrationStub,
    add_RegistrationServicer_to_server,
)

PLUGINS_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry/"
CSI_PLUGIN = "CSIPlugin"
DEVICE_PLUGIN = "DevicePlugin"
DRA_PLUGIN = "DRAPlugin"
PLUGIN_TYPES: tuple[str, ...] = (CSI_PLUGIN, DEVICE_PLUGIN, DRA_PLUGIN)
# Kubelet-side deadlines of the registration handshake.
DIAL_TIMEOUT_S = 10.0
GET_INFO_TIMEOUT_S = 1.0
NOTIFY_TIMEOUT_S = 5.0

__all__ = [
    "CSI_PLUGIN",
    "DEVICE_PLUGIN",
    "DIAL_TIMEOUT_S",
    "DRA_PLUGIN",
    "GET_INFO_TIMEOUT_S",
    "NOTIFY_TIMEOUT_S",
    "PLUGINS_REGISTRY_DIR",
    "PLUGIN_TYPES",
    "InfoRequest",
    "PluginInfo",
    "RegistrationServicer",
    "RegistrationStatus",
    "RegistrationStatusResponse",
    "RegistrationStub",
    "add_RegistrationServicer_to_server",
]

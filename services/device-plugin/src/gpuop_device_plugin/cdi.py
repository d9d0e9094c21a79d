"""CDI (Container Device Interface) specs for the advertised devices.

One spec file per vendor kind (`amd.com/gpu`, `nvidia.com/gpu`) in the runtime's CDI dir
(`/var/run/cdi`); each device is named by its base device id, so a replica or partition resolves to
the device nodes of exactly that device. The kubelet hands the names to the runtime through the CRI
`cdi_devices` field and the `cdi.k8s.io/` annotation.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuop_common.gpu import Vendor
from gpuop_common.gpu.cdi import DEFAULT_CDI_DIR, device_node_edits, versioned, write_spec_file

from gpuop_device_plugin.devices import PluginDevice

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_CDI_DIR", "build_spec", "cdi_device_name", "cdi_kind", "write_spec"]
_KINDS = {Vendor.AMD: "amd.com/gpu", Vendor.NVIDIA: "nvidia.com/gpu"}


def cdi_kind(vendor: Vendor) -> str:
    return _KINDS[vendor]


def cdi_device_name(device: PluginDevice) -> str:
    """Fully qualified CDI name `vendor.com/class=name`."""
    return f"{cdi_kind(device.vendor)}={device.base_id}"


def spec_file_name(vendor: Vendor) -> str:
    return "gpuop-" + cdi_kind(vendor).replace("/", "-") + ".json"


def build_spec(vendor: Vendor, devices: Iterable[PluginDevice]) -> dict[str, Any]:
    """The CDI spec of one vendor's devices (replicas collapse to their device)."""
    entries: dict[str, list[str]] = {}
    for device in devices:
        if device.vendor == vendor:
            entries.setdefault(device.base_id, list(device.device_nodes))
    spec: dict[str, Any] = {
        "kind": cdi_kind(vendor),
        "devices": [
            {
                "name": name,
                "containerEdits": {"deviceNodes": device_node_edits(nodes)},
            }
            for name, nodes in sorted(entries.items())
        ],
    }
    # A spec needs a device to be valid; without one write_spec removes the file instead.
    return versioned(spec) if spec["devices"] else spec


def write_spec(directory: Path, vendor: Vendor, spec: dict[str, Any]) -> bool:
    """Write the spec atomically when it changed; an empty device list removes the file.

    Returns True when the file changed. Errors are logged, never raised: without the file the
    runtime refuses CDI names, which surfaces at container start with the name in the message.
    """
    path = directory / spec_file_name(vendor)
    try:
        if not spec["devices"]:
            if path.exists():
                path.unlink()
                return True
            return False
        if not write_spec_file(path, spec):
            return False
    except OSError as exc:
        log.error("cannot write CDI spec", extra={"path": str(path), "error": str(exc)})
        return False
    log.info("CDI spec written", extra={"path": str(path), "devices": len(spec["devices"])})
    return True

"""One CDI spec per prepared claim (pure, apart from the file helpers).

Kind `k8s.gpu.gpuop.dev/claim`; one CDI device per allocated device, named `<claim uid>-<device>`,
with that device's nodes (`/dev/kfd` + `/dev/dri/card*` + `renderD*`, or `/dev/nvidia<N>` +
`/dev/nvidiactl` + `/dev/nvidia-uvm*` and MIG caps). The spec-wide edits carry the vendor's
visibility variables for all of the claim's devices and the driver's name. The file name carries
the claim uid, so unprepare (and a restarted driver) finds it without any other state.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuop_common.gpu import Vendor
from gpuop_common.gpu.cdi import device_node_edits, qualified_name, versioned, visible_devices_env

from gpuop_dra_driver.claims import AllocatedDevice

CDI_KIND = "k8s.gpu.gpuop.dev/claim"
SPEC_PREFIX = "gpuop-dra-"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{SPEC_PREFIX}{claim_uid}.json"


def cdi_device(claim_uid: str, device_name: str) -> str:
    return f"{claim_uid}-{device_name}"


def cdi_id(claim_uid: str, device_name: str) -> str:
    return qualified_name(CDI_KIND, cdi_device(claim_uid, device_name))


def claim_spec(
    claim_uid: str, driver: str, node: str, allocated: Sequence[AllocatedDevice]
) -> dict[str, Any]:
    env = [f"DRA_RESOURCE_DRIVER_NAME={driver}", f"KUBERNETES_NODE_NAME={node}"]
    for vendor in (Vendor.AMD, Vendor.NVIDIA):
        ids = [a.device.visible_id for a in allocated if a.device.vendor == vendor]
        env += [f"{k}={v}" for k, v in visible_devices_env(vendor, ids).items()]
    unique = {a.device.name: a.device for a in allocated}
    return versioned(
        {
            "kind": CDI_KIND,
            "containerEdits": {"env": env},
            "devices": [
                {
                    "name": cdi_device(claim_uid, name),
                    "containerEdits": {"deviceNodes": device_node_edits(device.device_nodes)},
                }
                for name, device in sorted(unique.items())
            ],
        }
    )

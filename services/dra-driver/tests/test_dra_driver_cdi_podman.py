"""The DRA driver's per-claim CDI spec, judged by a real CDI consumer: podman 4.3 (Debian 12) with runc.

NodePrepareResources through the kubelet emulator writes the claim's spec; podman resolves the CDI
ids the driver answered, and the container must see exactly the claimed GPUs' nodes and the env the
spec names (driver, node, the vendor's visibility variables).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from gpuop_common.kubelet import dra
from gpuop_dra_driver import DRIVER_NAME
from gpuop_dra_driver.cdi import spec_path
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo
from gpuop_sim.oci import CdiJudge

pytestmark = pytest.mark.slow
NODE = "gpu-node-1"  # conftest's node
MakeRoot = Callable[..., NodeRootInfo]
StartDriver = Callable[..., Any]  # conftest.run_driver -> DriverHandle
Claims = Any  # conftest.ClaimFactory
LOCAL_MAJOR = 240  # Linux's range for local and experimental use: no real driver's numbers


def test_podman_gives_the_container_the_claimed_gpus_nodes_and_env(
    gpu_node_root: MakeRoot,
    run_driver: StartDriver,
    kubelet_emulator: KubeletEmulator,
    claims: Claims,
    cdi_judge: CdiJudge,
) -> None:
    handle = run_driver(gpu_node_root("amd-mi210x8"), publish=False)
    kubelet_emulator.wait_for(
        lambda: kubelet_emulator.dra_drivers() == {DRIVER_NAME: dra.SERVICE_V1}, timeout=15
    )
    gpus = sorted(n for n, d in handle.service.inventory.devices().items() if d.type == "gpu")
    claim = claims.make(
        [{"request": "gpu", "driver": DRIVER_NAME, "pool": NODE, "device": name} for name in gpus[1:3]]
    )
    answer = kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid]
    assert answer.error == ""
    cdi_ids = [cdi_id for device in answer.devices for cdi_id in device.cdi_device_ids]
    path = spec_path(handle.cdi_dir, claim.uid)
    spec = json.loads(path.read_text())

    numbers: dict[str, tuple[int, int]] = {}
    for device in spec["devices"]:
        for node in device["containerEdits"]["deviceNodes"]:
            numbers.setdefault(node["path"], (LOCAL_MAJOR, len(numbers)))
    for node_path, (major, minor) in numbers.items():
        cdi_judge.host.add_char_device(node_path, major, minor)
    cdi_judge.host.add_spec(path.name, spec)

    seen = cdi_judge.container_view(cdi_ids)
    assert len(cdi_ids) == 2
    assert seen.devices == numbers  # both GPUs' nodes (and /dev/kfd once), nothing else
    spec_env = dict(entry.split("=", 1) for entry in spec["containerEdits"]["env"])
    assert {name: seen.env.get(name) for name in spec_env} == spec_env
    assert spec_env["DRA_RESOURCE_DRIVER_NAME"] == DRIVER_NAME
    assert len(spec_env["ROCR_VISIBLE_DEVICES"].split(",")) == 2

"""The device plugin's CDI spec, judged by a real CDI consumer: podman 4.3 (Debian 12) with runc.

The plugin allocates in CDI mode against the kubelet emulator; its spec file goes into the host view
podman reads, with every node it names made by mknod; the container must see exactly the allocated
device's nodes (no other GPU's) with their numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from gpuop_common.config import DevicePluginConfig
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo
from gpuop_sim.oci import CdiJudge

pytestmark = pytest.mark.slow
MakeRoot = Callable[..., NodeRootInfo]
StartPlugin = Callable[..., Any]  # conftest.run_plugin -> PluginHandle
SPEC_FILE = "gpuop-amd.com-gpu.json"
LOCAL_MAJOR = 240  # Linux's range for local and experimental use: no real driver's numbers


def test_podman_gives_the_container_exactly_the_allocated_gpus_nodes(
    gpu_node_root: MakeRoot,
    run_plugin: StartPlugin,
    kubelet_emulator: KubeletEmulator,
    cdi_judge: CdiJudge,
) -> None:
    info = gpu_node_root("amd-mi210x8")
    run_plugin(info, DevicePluginConfig(cdi=True))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("amd.com/gpu") == 8, timeout=10)
    one = sorted(kubelet_emulator.resources()["amd.com/gpu"])[2]
    (cdi_name,) = [d.name for d in kubelet_emulator.allocate("amd.com/gpu", [one]).response.cdi_devices]
    spec = json.loads((info.root / "var/run/cdi" / SPEC_FILE).read_text())

    numbers: dict[str, tuple[int, int]] = {}
    for device in spec["devices"]:
        for node in device["containerEdits"]["deviceNodes"]:
            numbers.setdefault(node["path"], (LOCAL_MAJOR, len(numbers)))
    for path, (major, minor) in numbers.items():
        cdi_judge.host.add_char_device(path, major, minor)
    cdi_judge.host.add_spec(SPEC_FILE, spec)

    seen = cdi_judge.container_view([cdi_name])
    (entry,) = [d for d in spec["devices"] if f"amd.com/gpu={d['name']}" == cdi_name]
    expected = {node["path"]: numbers[node["path"]] for node in entry["containerEdits"]["deviceNodes"]}
    assert "/dev/kfd" in expected and any(p.startswith("/dev/dri/renderD") for p in expected)
    assert seen.devices == expected

"""Fault helpers change the node root the way the backend tests rely on, and restore it."""

from __future__ import annotations

import pytest
from gpuop_sim.nodes import FaultError, raise_ras, remove_file, set_garbage, set_temperature, vanish_gpu
from gpuop_sim.nodes.nvml_state import load_state


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".gpuop-sim-stash" not in p.parts)


def test_vanish_and_restore_amd_gpu(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    before = _listing(info.root)
    gone = vanish_gpu(info.root, info.pci_addresses[0])
    after = _listing(info.root)
    assert "dev/dri/renderD128" not in after and "dev/dri/renderD135" not in after
    assert "sys/class/kfd/kfd/topology/nodes/2" not in after
    assert "dev/dri/renderD136" in after  # the next GPU is untouched
    gone.restore()
    assert _listing(info.root) == before


def test_vanish_and_restore_nvidia_gpu(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8")
    gone = vanish_gpu(info.root, info.pci_addresses[1])
    state = load_state(info.nvml_state_path)
    assert [g.lost for g in state.gpus] == [False, True] + [False] * 6
    assert not (info.root / "dev/nvidia1").exists()
    gone.restore()
    assert not any(g.lost for g in load_state(info.nvml_state_path).gpus)
    assert (info.root / "dev/nvidia1").exists()


def test_raise_ras_and_file_faults(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    bdf = info.pci_addresses[0]
    assert raise_ras(info.root, bdf, "gfx", by=3) == 3
    ras = (info.root / "sys/bus/pci/devices" / bdf / "ras/gfx_err_count").read_text()
    assert ras == "ue: 3\nce: 0\n"
    set_garbage(info.root, f"sys/bus/pci/devices/{bdf}/unique_id")
    remove_file(info.root, f"sys/bus/pci/devices/{bdf}/vbios_version")
    assert not (info.root / "sys/bus/pci/devices" / bdf / "vbios_version").exists()


def test_fault_targets_that_do_not_exist(gpu_node_root):
    info = gpu_node_root("amd-radeon")
    with pytest.raises(FaultError):
        vanish_gpu(info.root, "0000:99:00.0")
    with pytest.raises(FaultError):
        raise_ras(info.root, info.pci_addresses[0])  # Radeon has no RAS
    with pytest.raises(FaultError):
        remove_file(info.root, "sys/nothing")
    with pytest.raises(FaultError, match="hotspot"):
        set_temperature(info.root, info.pci_addresses[0], 50, sensor="hotspot-x")

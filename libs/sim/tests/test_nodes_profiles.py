"""Simulated GPU node roots: every profile lays a consistent host root."""

from __future__ import annotations

import json

import pytest
from gpuop_common.gpu.amd_topology import read_topology
from gpuop_common.gpu.models import Vendor
from gpuop_sim.nodes import PROFILES, UnknownProfileError, build_node_root
from gpuop_sim.nodes.__main__ import main as nodes_main
from gpuop_sim.nodes.captures import CAPTURE_NAMES, capture_files
from gpuop_sim.nodes.nvml_state import load_state

from tools.shared_fixtures import shared_dir

# The shared/ folder sits beside the checkout (and beside CI's clone): a missing one is a
# setup error to fix, not a reason to skip.
SHARED_CAPTURES = shared_dir() / "fixtures" / "amd-kfd-topology"
EXPECTED = {
    "amd-mi210x8": (Vendor.AMD, 8, 0),
    "amd-mi300x-cpx": (Vendor.AMD, 8, 63),
    "amd-mi300x-spx": (Vendor.AMD, 8, 0),
    "amd-single": (Vendor.AMD, 1, 0),
    "amd-radeon": (Vendor.AMD, 1, 0),
    "nvidia-h100x8": (Vendor.NVIDIA, 8, 0),
    "nvidia-h100x8-mig": (Vendor.NVIDIA, 8, 12),
    "cpu-only": (None, 0, 0),
}


def test_profile_list_is_complete():
    assert set(PROFILES) == set(EXPECTED)
    assert all(p.description for p in PROFILES.values())


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_profile_builds_what_it_says(gpu_node_root, profile):
    info = gpu_node_root(profile)
    vendor, gpus, partitions = EXPECTED[profile]
    assert (info.vendor, info.gpu_count, info.partition_count) == (vendor, gpus, partitions)
    assert len(info.pci_addresses) == gpus
    assert info.env["GPUOP_NVML_MODULE"] == "gpuop_sim.nodes.fake_nvml"
    assert info.env["GPUOP_HOST_ROOT"] == str(info.root)
    if vendor is Vendor.NVIDIA:
        assert info.nvml_state_path is not None
        assert info.env["GPUOP_FAKE_NVML_STATE"] == str(info.nvml_state_path)
        assert (info.root / "proc/driver/nvidia/version").read_text().startswith("NVRM version")
        assert len(load_state(info.nvml_state_path).gpus) == gpus
        for bdf in info.pci_addresses:
            assert (info.root / "sys/bus/pci/devices" / bdf / "vendor").read_text().strip() == "0x10de"
    else:
        assert info.env["GPUOP_FAKE_NVML_STATE"] == ""


@pytest.mark.parametrize(
    "profile", ["amd-mi210x8", "amd-mi300x-cpx", "amd-mi300x-spx", "amd-single", "amd-radeon"]
)
def test_amd_dev_nodes_match_kfd_render_minors(gpu_node_root, profile):
    info = gpu_node_root(profile)
    nodes = read_topology(info.root)
    # Only the first of the duplicated single-GPU nodes is a real device.
    minors = {n.render_minor for n in nodes if n.is_gpu} - ({129} if profile == "amd-single" else set())
    renders = {int(p.name.removeprefix("renderD")) for p in (info.root / "dev/dri").glob("renderD*")}
    assert renders == minors
    assert (info.root / "dev/kfd").exists()
    for render in renders:
        device = (info.root / f"sys/class/drm/renderD{render}/device").resolve()
        assert device.name.startswith(("0000:", "amdgpu_xcp_"))


def test_cpx_partitions_are_xcp_platform_devices(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    xcps = sorted((info.root / "sys/devices/platform").glob("amdgpu_xcp_*"))
    assert len(xcps) == 63 - 8


@pytest.mark.parametrize("capture", CAPTURE_NAMES)
def test_packed_captures_equal_the_shared_fixtures(capture):
    packed = capture_files(capture)
    source = SHARED_CAPTURES / capture
    base = source / "topology" if (source / "topology").is_dir() else source
    on_disk = {
        str(p.relative_to(base)): p.read_text()
        for p in base.rglob("*")
        if p.is_file() and p.relative_to(base).parts[0] in ("nodes", "generation_id", "system_properties")
    }
    assert packed == on_disk


def test_node_name_seeds_nvidia_uuids(tmp_path):
    a = build_node_root("nvidia-h100x8", tmp_path / "a", node_name="node-a")
    b = build_node_root("nvidia-h100x8", tmp_path / "b", node_name="node-b")
    uuids_a = {g.uuid for g in load_state(a.nvml_state_path).gpus}
    uuids_b = {g.uuid for g in load_state(b.nvml_state_path).gpus}
    assert len(uuids_a) == 8 and not uuids_a & uuids_b


def test_bad_arguments(tmp_path):
    with pytest.raises(UnknownProfileError, match="amd-mi210x8"):
        build_node_root("amd-mi999", tmp_path / "x")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    with pytest.raises(FileExistsError):
        build_node_root("cpu-only", tmp_path / "busy")


def test_command_line_lays_a_root(tmp_path, capsys):
    assert nodes_main(["amd-radeon", str(tmp_path / "r")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["gpu_count"] == 1 and printed["vendor"] == "amd"
    assert nodes_main(["amd-radeon", str(tmp_path / "r")]) == 1  # not empty any more

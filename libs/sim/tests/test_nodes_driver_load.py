"""Nodes without a driver yet: the PCI devices only, until the host fakes install and load it."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from gpuop_common.gpu.amd import AmdSysfsBackend
from gpuop_sim import drivertree, hostfakes
from gpuop_sim.nodes import build_node_root
from gpuop_sim.nodes.fake_nvml import FakeNvml
from gpuop_sim.nodes.fake_nvml_api import NVML_ERROR_DRIVER_NOT_LOADED, NVMLError

KERNEL = hostfakes.DEFAULT_KERNEL


def run(root: Path, *argv: str) -> int:
    return hostfakes.main(["--root", str(root), *argv])


def tree(root: Path) -> dict[str, str]:
    """Every path under root (outside the simulator's own state) -> file content or link target."""
    out: dict[str, str] = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if rel.parts[0] in (".gpuop-sim", ".gpuop-fakes"):
            continue
        if path.is_symlink():
            out[str(rel)] = "-> " + str(path.readlink())
        elif path.is_file():
            out[str(rel)] = path.read_text()
        elif not any(path.iterdir()):
            continue  # an empty directory left where a moved tree was
    return out


def install_amdgpu(root: Path, release: str = "6.3.4") -> str:
    """apt installs the amdgpu release's DKMS package from its repository; returns its version."""
    set_kernel = root / hostfakes.KERNEL
    kernel = set_kernel.read_text().strip() if set_kernel.is_file() else KERNEL
    version = hostfakes.add_vendor_repository(root, "amd", release)
    assert run(root, "apt-get", "install", "-y", f"linux-headers-{kernel}") == 0
    assert run(root, "apt-get", "install", "-y", f"amdgpu-dkms={version}") == 0
    return version


@pytest.mark.parametrize("profile", ["amd-mi300x-cpx", "amd-mi210x8"])
def test_amd_node_without_driver_has_pci_devices_only_until_modprobe(tmp_path: Path, profile: str) -> None:
    full = build_node_root(profile, tmp_path / "full")
    bare = build_node_root(profile, tmp_path / "bare", driver_loaded=False)
    assert not bare.driver_loaded and full.driver_loaded
    assert bare.pci_addresses == full.pci_addresses and len(bare.pci_addresses) == 8
    for bdf in bare.pci_addresses:
        device = bare.root / "sys/bus/pci/devices" / bdf
        assert (device / "vendor").read_text().strip() == "0x1002"
        assert (device / "class").read_text().strip().startswith(("0x03", "0x12"))
        assert (device / "device").is_file()
        assert not (device / "mem_info_vram_total").exists() and not (device / "hwmon").exists()
    for gone in ("sys/class/kfd", "sys/module/amdgpu", "dev/kfd", "dev/dri", "sys/class/drm"):
        assert not (bare.root / gone).exists(), gone
    assert AmdSysfsBackend(bare.root).enumerate() == []

    assert run(bare.root, "modprobe", "amdgpu") == 1  # nothing built yet
    installed = install_amdgpu(bare.root)
    assert run(bare.root, "modprobe", "amdgpu") == 0
    assert (bare.root / "etc/os-release").is_file()  # a host the driver playbooks can run on
    host_os = ("etc/", "usr/lib/systemd/", "var/lib/")
    loaded = {k: v for k, v in tree(bare.root).items() if not k.startswith(host_os)}
    reference = tree(full.root)
    version = "sys/module/amdgpu/version"
    assert loaded.pop(version) == f"{installed}\n"  # the DKMS build's version
    reference.pop(version)
    assert loaded == reference  # exactly the profile's tree, not the minimal bare-host layout
    gpus = AmdSysfsBackend(bare.root).enumerate()
    assert [g.pci_address for g in gpus] == [g.pci_address for g in AmdSysfsBackend(full.root).enumerate()]

    assert run(bare.root, "modprobe", "-r", "amdgpu") == 0
    assert not (bare.root / "sys/class/kfd").exists() and not (bare.root / "dev/kfd").exists()
    assert AmdSysfsBackend(bare.root).enumerate() == []


def test_reboot_keeps_a_driver_listed_in_modules_load_d_and_drops_one_that_is_not(tmp_path: Path) -> None:
    info = build_node_root("amd-single", tmp_path / "n", driver_loaded=False)
    install_amdgpu(info.root)
    assert run(info.root, "modprobe", "amdgpu") == 0
    hostfakes.boot(info.root)
    assert not (info.root / "dev/kfd").exists()  # loaded by hand only: gone after the boot
    hostfakes.write_file(info.root / "etc/modules-load.d/amdgpu.conf", "amdgpu")
    hostfakes.boot(info.root)
    assert (info.root / "dev/kfd").is_file() and (info.root / "sys/class/kfd/kfd/topology/nodes").is_dir()
    assert len(AmdSysfsBackend(info.root).enumerate()) == 1


def test_profile_with_a_driver_keeps_it_across_reboots_and_modprobe_needs_no_build(tmp_path: Path) -> None:
    info = build_node_root("amd-mi300x-spx", tmp_path / "n")
    before = tree(info.root)
    hostfakes.boot(info.root)
    assert tree(info.root) == before
    assert run(info.root, "modprobe", "-r", "amdgpu") == 0
    assert not (info.root / "dev/kfd").exists()
    assert run(info.root, "modprobe", "amdgpu") == 0
    assert tree(info.root) == before


def test_nvidia_node_without_driver_answers_driver_not_loaded_until_modprobe(tmp_path: Path) -> None:
    full = build_node_root("nvidia-h100x8", tmp_path / "full", node_name="n")
    bare = build_node_root("nvidia-h100x8", tmp_path / "bare", node_name="n", driver_loaded=False)
    assert bare.nvml_state_path is not None
    for bdf in bare.pci_addresses:
        assert (bare.root / "sys/bus/pci/devices" / bdf / "vendor").read_text().strip() == "0x10de"
    assert not list((bare.root / "dev").glob("nvidia*"))
    assert not (bare.root / "proc/driver/nvidia").exists()
    nvml = FakeNvml(path=bare.nvml_state_path)
    with pytest.raises(NVMLError) as raised:
        nvml.nvmlInit()
    assert raised.value.value == NVML_ERROR_DRIVER_NOT_LOADED
    assert type(raised.value).__name__ == "NVMLError_DriverNotLoaded"

    assert run(bare.root, "apt-get", "install", "-y", f"linux-headers-{KERNEL}") == 0
    hostfakes.add_vendor_repository(bare.root, "nvidia", "ubuntu2404")
    assert run(bare.root, "apt-get", "install", "-y", "nvidia-driver-570-open") == 0
    for module in ("nvidia", "nvidia-modeset", "nvidia-uvm"):
        assert run(bare.root, "modprobe", module) == 0
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetCount() == 8
    nvml.nvmlShutdown()
    for index in range(8):
        assert (bare.root / f"dev/nvidia{index}").is_file()
    assert (bare.root / "dev/nvidiactl").is_file()
    assert filecmp.cmp(full.root / "proc/driver/nvidia/version", bare.root / "proc/driver/nvidia/version")

    assert run(bare.root, "modprobe", "-r", "nvidia-uvm", "nvidia-modeset", "nvidia") == 0
    assert not (bare.root / "dev/nvidia0").exists()
    with pytest.raises(NVMLError):
        nvml.nvmlInit()


def test_bare_playbook_roots_keep_the_minimal_layout(tmp_path: Path) -> None:
    from gpuop_sim.bare_host import lay_bare_host

    lay_bare_host(tmp_path, "ubuntu-22.04", "amd", gpus=1)
    assert not drivertree.managed(tmp_path, "amdgpu")
    install_amdgpu(tmp_path)
    assert run(tmp_path, "modprobe", "amdgpu") == 0
    assert (tmp_path / "dev/kfd").is_file()
    assert (tmp_path / "sys/class/kfd/kfd/topology/nodes/1/gpu_id").is_file()

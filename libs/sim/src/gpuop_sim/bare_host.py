"""A bare GPU host root for the driver playbooks: an OS, PCI GPUs, a container runtime, no driver.

What a freshly provisioned node has before the operator installs a driver: `/etc/os-release`, the
PCI devices (`/sys/bus/pci/devices/<bdf>/{vendor,device,class}`), a container runtime's unit and
config, and nothing of the GPU driver (no `/sys/class/kfd`, no `/sys/module/amdgpu`, no `/dev/kfd`,
no `/dev/nvidia*`). Host commands go to `gpuop_sim.hostfakes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpuop_sim import hostfakes

OS_RELEASES: dict[str, str] = {
    "ubuntu-22.04": 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=jammy\n',
    "ubuntu-24.04": 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=noble\n',
    "rocky-9.4": 'NAME="Rocky Linux"\nVERSION_ID="9.4"\nID="rocky"\nID_LIKE="rhel centos fedora"\n',
    "rhel-9.4": 'NAME="Red Hat Enterprise Linux"\nVERSION_ID="9.4"\nID="rhel"\nID_LIKE="fedora"\n',
    "debian-12": 'NAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\nVERSION_CODENAME=bookworm\n',
    "ubuntu-20.04": 'NAME="Ubuntu"\nVERSION_ID="20.04"\nID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=focal\n',
}
KERNELS = {"ubuntu": "6.8.0-40-generic", "rocky": "5.14.0-427.13.1.el9_4.x86_64"}
# `containerd config default` of containerd 1.7 (config version 2), cut to what matters here.
CONTAINERD_V2_CONFIG = """version = 2

[plugins]

  [plugins."io.containerd.grpc.v1.cri"]
    cdi_spec_dirs = ["/etc/cdi"]
    enable_cdi = false
    sandbox_image = "registry.k8s.io/pause:3.8"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
"""
# containerd 2.x (config version 3): the CDI keys moved to the CRI runtime plugin.
CONTAINERD_V3_CONFIG = """version = 3

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
"""
PCI_DEVICE_IDS = {"amd": ("0x1002", "0x74a1", "0x120000"), "nvidia": ("0x10de", "0x2330", "0x030200")}
Runtime = Literal["containerd-v2", "containerd-v3", "crio", "none"]


@dataclass(frozen=True)
class BareHost:
    root: Path
    distro: str
    vendor: str
    kernel: str
    pci_addresses: tuple[str, ...]

    @property
    def host_exec(self) -> str:
        return hostfakes.host_exec_for(self.root)


def lay_host_os(root: Path, distro: str, runtime: Runtime = "containerd-v2") -> str:
    """The OS part of a host: `/etc/os-release`, the running kernel, the directories the playbooks
    write into and the container runtime's unit and config. Returns the kernel release."""
    if distro not in OS_RELEASES:
        raise ValueError(f"unknown simulated OS {distro!r} (known: {', '.join(sorted(OS_RELEASES))})")
    hostfakes.write_file(root / "etc/os-release", OS_RELEASES[distro])
    kernel = KERNELS["ubuntu" if distro.startswith(("ubuntu", "debian")) else "rocky"]
    hostfakes.set_kernel(root, kernel)
    debian = distro.startswith(("ubuntu", "debian"))
    for directory in ("etc/modprobe.d", "etc/modules-load.d", "usr/src", "var/lib"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    (root / ("etc/apt/sources.list.d" if debian else "etc/yum.repos.d")).mkdir(parents=True, exist_ok=True)
    if runtime.startswith("containerd"):
        hostfakes.write_file(
            root / "usr/lib/systemd/system/containerd.service", "[Service]\nExecStart=/usr/bin/containerd"
        )
        config = CONTAINERD_V2_CONFIG if runtime == "containerd-v2" else CONTAINERD_V3_CONFIG
        hostfakes.write_file(root / "etc/containerd/config.toml", config)
    elif runtime == "crio":
        hostfakes.write_file(
            root / "usr/lib/systemd/system/crio.service", "[Service]\nExecStart=/usr/bin/crio"
        )
        (root / "etc/crio/crio.conf.d").mkdir(parents=True, exist_ok=True)
    return kernel


def lay_bare_host(
    root: Path,
    distro: str,
    vendor: Literal["amd", "nvidia"],
    gpus: int = 2,
    runtime: Runtime = "containerd-v2",
) -> BareHost:
    """Lay `root` as a node with `gpus` PCI GPUs of `vendor` on `distro` (a key of OS_RELEASES)."""
    kernel = lay_host_os(root, distro, runtime)
    vendor_id, device_id, pci_class = PCI_DEVICE_IDS[vendor]
    addresses = tuple(f"0000:{0x41 + 0x20 * i:02x}:00.0" for i in range(gpus))
    for bdf in addresses:
        device = root / "sys/bus/pci/devices" / bdf
        for name, value in (("vendor", vendor_id), ("device", device_id), ("class", pci_class)):
            hostfakes.write_file(device / name, value)
    return BareHost(root=root, distro=distro, vendor=vendor, kernel=kernel, pci_addresses=addresses)

"""The recording host-command fakes behave like the tools the driver playbooks rely on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpuop_sim import hostfakes
from gpuop_sim.bare_host import lay_bare_host


def run(root: Path, *argv: str) -> int:
    return hostfakes.main(["--root", str(root), *argv])


def test_every_call_is_recorded_in_order_even_a_failing_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(tmp_path, "uname", "-r") == 0
    assert run(tmp_path, "ls", "/") == 127
    assert hostfakes.recorded(tmp_path) == [["uname", "-r"], ["ls", "/"]]
    assert "ls: command not found" in capsys.readouterr().err


def test_usage_without_root(capsys: pytest.CaptureFixture[str]) -> None:
    assert hostfakes.main(["apt-get", "update"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_package_state_is_what_dpkg_query_and_rpm_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(tmp_path, "dpkg-query", "-W", "-f=${Status}", "curl") == 1
    assert run(tmp_path, "apt-get", "install", "-y", "curl") == 0
    capsys.readouterr()
    assert run(tmp_path, "dpkg-query", "-W", "-f=${Status}", "curl") == 0
    assert capsys.readouterr().out == "install ok installed"
    assert run(tmp_path, "dnf", "remove", "-y", "curl") == 0
    assert run(tmp_path, "rpm", "-q", "curl") == 1
    assert "package curl is not installed" in capsys.readouterr().out


def test_apt_cache_madison_answers_from_the_repositories_of_the_last_update(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = tmp_path / "etc/apt/sources.list.d"
    radeon = "file:///srv/radeon/amdgpu/6.3.4/ubuntu/"
    hostfakes.write_file(sources / "amdgpu.list", f"deb [arch=amd64 signed-by=/k.asc] {radeon} jammy main")
    assert run(tmp_path, "apt-cache", "madison", "amdgpu-dkms") == 0
    assert capsys.readouterr().out == ""  # written, not read by an `apt-get update` yet
    hostfakes.write_file(sources / "cuda.list", "deb https://cuda.example/repos/debian12/x86_64/ /")
    assert run(tmp_path, "apt-get", "update") == 0
    assert run(tmp_path, "apt-cache", "madison", "amdgpu-dkms", "nvidia-open", "linux-headers-6.1.0") == 0
    assert capsys.readouterr().out.splitlines() == [  # the format of apt 2.6 (Debian 12)
        "amdgpu-dkms | 1:6.10.5.60304-2125197.22.04 | file:/srv/radeon/amdgpu/6.3.4/ubuntu jammy/main amd64"
        " Packages",
        *(
            f"nvidia-open | {driver}-1 | https://cuda.example/repos/debian12/x86_64  Packages"
            for driver in reversed(hostfakes.NVIDIA_DRIVERS)
        ),
    ]


def test_apt_install_refuses_a_vendor_package_or_version_the_updated_lists_lack_as_apt_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lay_bare_host(tmp_path, "ubuntu-22.04", "amd", gpus=1)
    headers = "linux-headers-6.8.0-40-generic"
    # No vendor repository: apt knows no amdgpu-dkms, installs nothing (not even the headers).
    assert run(tmp_path, "apt-get", "install", "-y", headers, "amdgpu-dkms") == 100
    assert capsys.readouterr().err == "E: Unable to locate package amdgpu-dkms\n"
    assert run(tmp_path, "dpkg-query", "-W", headers) == 1
    # Added but not read by an `apt-get update` yet: still unknown.
    radeon = "deb file:///srv/radeon/amdgpu/6.3.4/ubuntu/ jammy main"
    hostfakes.write_file(tmp_path / "etc/apt/sources.list.d/amdgpu.list", radeon)
    assert run(tmp_path, "apt-get", "install", "-y", "amdgpu-dkms") == 100
    assert "Unable to locate package amdgpu-dkms" in capsys.readouterr().err
    assert run(tmp_path, "apt-get", "update") == 0
    # A version the repository does not hold (the release of another repository).
    assert run(tmp_path, "apt-get", "install", "-y", "amdgpu-dkms=6.12.0") == 100
    assert capsys.readouterr().err == "E: Version '6.12.0' for 'amdgpu-dkms' was not found\n"
    held = hostfakes.amd_dkms_version("6.3.4")
    assert run(tmp_path, "apt-get", "install", "-y", headers, f"amdgpu-dkms={held}") == 0
    assert run(tmp_path, "dpkg-query", "-W", "-f=${Version}", "amdgpu-dkms") == 0
    assert capsys.readouterr().out.endswith(held)


def test_a_dkms_package_needs_headers_and_builds_for_the_running_kernel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = lay_bare_host(tmp_path, "ubuntu-22.04", "amd", gpus=1)
    version = hostfakes.add_vendor_repository(tmp_path, "amd", "6.3.4")
    assert run(tmp_path, "apt-get", "install", "-y", "amdgpu-dkms") == 100
    assert "kernel headers for kernel 6.8.0-40-generic cannot be found" in capsys.readouterr().err
    assert run(tmp_path, "modprobe", "amdgpu") == 1
    assert "Module amdgpu not found" in capsys.readouterr().err
    assert run(tmp_path, "apt-get", "install", "-y", f"linux-headers-{host.kernel}", "amdgpu-dkms") == 0
    capsys.readouterr()
    assert run(tmp_path, "dkms", "status", "-m", "amdgpu") == 0
    assert capsys.readouterr().out == f"amdgpu/{version}, {host.kernel}, x86_64: installed\n"
    assert run(tmp_path, "modprobe", "amdgpu", "noretry=1") == 0
    assert (tmp_path / "sys/module/amdgpu/parameters/noretry").read_text().strip() == "1"
    assert (tmp_path / "dev/kfd").exists() and (tmp_path / "dev/dri/renderD128").exists()
    assert (tmp_path / "sys/class/drm/renderD128/device").resolve().name == host.pci_addresses[0]
    assert run(tmp_path, "modprobe", "-r", "amdgpu") == 0
    assert not (tmp_path / "sys/module/amdgpu/initstate").exists()


def test_an_injected_dkms_failure_fails_the_package_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lay_bare_host(tmp_path, "rocky-9.4", "nvidia", gpus=1)
    hostfakes.fail(tmp_path, "dkms", "nvidia.ko: error: implicit declaration")
    kernel = "5.14.0-427.13.1.el9_4.x86_64"
    assert run(tmp_path, "dnf", "install", "-y", f"kernel-devel-{kernel}", "kmod-nvidia-open-dkms-570.1") == 1
    assert "implicit declaration" in capsys.readouterr().err
    assert run(tmp_path, "rpm", "-q", "kmod-nvidia-open-dkms-570.1") == 1
    assert run(tmp_path, "dkms", "status") == 10


def test_modprobe_nvidia_lays_one_node_per_gpu_and_reboot_counts(tmp_path: Path) -> None:
    lay_bare_host(tmp_path, "ubuntu-24.04", "nvidia", gpus=3)
    hostfakes.add_vendor_repository(tmp_path, "nvidia", "ubuntu2404")
    assert (
        run(tmp_path, "apt-get", "install", "-y", "linux-headers-6.8.0-40-generic", "nvidia-driver-570-open")
        == 0
    )
    assert run(tmp_path, "modprobe", "-a", "nvidia", "nvidia-modeset", "nvidia-uvm") == 0
    assert sorted(p.name for p in (tmp_path / "dev").iterdir()) == [
        "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidia2", "nvidiactl",
    ]  # fmt: skip
    assert run(tmp_path, "systemctl", "is-active", "containerd") == 0
    assert run(tmp_path, "systemctl", "is-active", "crio") == 3
    assert run(tmp_path, "reboot") == 0 and hostfakes.boots(tmp_path) == 1


def test_unknown_simulated_os_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown simulated OS 'arch-1'"):
        lay_bare_host(tmp_path, "arch-1", "amd")


def test_a_reboot_unloads_everything_and_loads_modules_load_d_if_built_for_the_new_kernel(
    tmp_path: Path,
) -> None:
    host = lay_bare_host(tmp_path, "ubuntu-22.04", "amd", gpus=1)
    hostfakes.add_vendor_repository(tmp_path, "amd", "6.3.4")
    assert run(tmp_path, "apt-get", "install", "-y", f"linux-headers-{host.kernel}", "amdgpu-dkms") == 0
    hostfakes.write_file(tmp_path / "etc/modules-load.d/gpu.conf", "# boot\namdgpu")
    assert run(tmp_path, "reboot") == 0
    assert (tmp_path / "sys/module/amdgpu/initstate").exists() and (tmp_path / "dev/kfd").exists()
    hostfakes.boot(tmp_path, kernel="6.8.0-45-generic")
    assert not (tmp_path / "sys/module").exists() and not (tmp_path / "dev/kfd").exists()
    assert run(tmp_path, "apt-get", "install", "-y", "linux-headers-6.8.0-45-generic") == 0
    assert run(tmp_path, "dkms", "autoinstall", "-k", "6.8.0-45-generic") == 0
    assert run(tmp_path, "modprobe", "amdgpu") == 0
    assert hostfakes.boots(tmp_path) == 2


MPS_START = 'mount --bind "$1" /dev/shm && exec nvidia-cuda-mps-control -d'


def test_mps_daemon_under_unshare_has_the_bound_dir_as_its_dev_shm_and_the_host_keeps_its_own(
    tmp_path: Path,
) -> None:
    (tmp_path / "dev/shm").mkdir(parents=True)
    (tmp_path / "run/mps/shm").mkdir(parents=True)
    assert run(tmp_path, "mountpoint", "-q", "/run/mps/shm") == 32
    assert run(tmp_path, "mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", "/run/mps/shm") == 0
    assert run(tmp_path, "mountpoint", "-q", "/run/mps/shm") == 0
    ns = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", MPS_START, "x", "/run/mps/shm"]
    assert run(tmp_path, *ns) == 0
    assert hostfakes.mps_state(tmp_path)["dev_shm"] == "/run/mps/shm"
    assert "/dev/shm" not in hostfakes.mounts(tmp_path)  # the bind stayed in the daemon's namespace


def test_a_missing_shm_dir_fails_the_bind_and_the_daemon_never_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "dev/shm").mkdir(parents=True)
    ns = ["unshare", "--mount", "--", "sh", "-c", MPS_START, "x", "/run/mps/shm"]
    assert run(tmp_path, *ns) == 32
    assert "special device /run/mps/shm does not exist" in capsys.readouterr().err
    assert hostfakes.mps_state(tmp_path)["running"] is False


@pytest.mark.skipif(os.geteuid() != 0, reason="setpriv needs root to drop a capability")
def test_unshare_and_mount_need_cap_sys_admin(tmp_path: Path) -> None:
    (tmp_path / "run/mps/shm").mkdir(parents=True)
    fake = [sys.executable, "-m", "gpuop_sim.hostfakes", "--root", str(tmp_path)]
    # As the simulated kubelet starts a container without CAP_SYS_ADMIN (setpriv, kernel-enforced).
    without = [shutil.which("setpriv") or "setpriv", "--bounding-set=-sys_admin", "--inh-caps=-all", "--"]
    done = subprocess.run(
        [*without, *fake, "unshare", "--mount", "--", "sh", "-c", MPS_START, "x", "/run/mps/shm"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "unshare failed: Operation not permitted" in done.stderr
    done = subprocess.run(
        [*without, *fake, "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/run/mps/shm"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 32 and "Operation not permitted" in done.stderr
    assert hostfakes.mounts(tmp_path) == {}

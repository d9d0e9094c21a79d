"""The driver playbooks on a real Debian 12 root, entered with the default `chroot` host_exec.

apt, apt-cache, dpkg and curl are the real ones (`gpuop_sim.debian_root`): an install (with another
amdgpu release left configured, whose higher package must not win), an upgrade (v1 -> v2), a
downgrade (v2 -> v1) and an uninstall are judged by the root's dpkg database. The vendors'
repositories are local `file:` mirrors shaped like theirs, which the DeviceConfig's repository URL
fields point at, as an air-gapped site does. The base root is built in the background from the
start of the session (`debian_base_root`). One root per vendor; the steps run once in a module
fixture and the tests read what each left.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpuop_operator.jobresult import PlaybookSummary
from gpuop_operator.playbookrun import PlaybookVars, run_playbook
from gpuop_sim import debian_root
from gpuop_sim.debian_root import KERNEL, RepoPackage, VendorMirror

pytestmark = pytest.mark.slow

# ROCm release -> the amdgpu-dkms version its repository holds (the DKMS driver's own numbering).
AMD_RELEASES = {"6.2.4": "1:6.8.5.60204-2070768.22.04", "6.3.4": "1:6.10.5.60304-2125197.22.04"}
# NVIDIA driver version -> package version in the CUDA debian12 repository.
NVIDIA_RELEASES = {"570.124.06": "570.124.06-1", "570.133.20": "570.133.20-1"}
HEADERS = RepoPackage(f"linux-headers-{KERNEL}", "6.1.119-1", creates=f"/usr/src/linux-headers-{KERNEL}")


@dataclass(frozen=True)
class Step:
    summary: PlaybookSummary
    packages: dict[str, str]
    dkms: list[str]
    marker: dict[str, Any]
    loaded: bool


def _run_steps(
    root: Path, vendor: str, driver: dict[str, Any], steps: list[tuple[str, str, str]]
) -> dict[str, Step]:
    done: dict[str, Step] = {}
    module = "amdgpu" if vendor == "amd" else "nvidia"
    for name, playbook, version in steps:
        settings = PlaybookVars.model_validate(
            {"vendor": vendor, "containerRuntime": "none", "driver": {**driver, "version": version}}
        )
        summary = run_playbook(playbook, root, settings, quiet=True)
        marker_path = root / f"var/lib/gpuop/driver/{vendor}.json"
        done[name] = Step(
            summary,
            debian_root.installed(root),
            debian_root.dkms_builds(root),
            json.loads(marker_path.read_text()) if marker_path.is_file() else {},
            (root / "sys/module" / module / "initstate").is_file(),
        )
    return done


@pytest.fixture(scope="module")
def amd(tmp_path_factory: pytest.TempPathFactory, debian_base_root: Path) -> dict[str, Step]:
    root = debian_root.fresh_root(tmp_path_factory.mktemp("debian-amd") / "root", "amd")
    mirror = VendorMirror(root)
    try:
        mirror.distribution([HEADERS])
        mirror.write_key("radeon/rocm/rocm.gpg.key")
        for release, version in AMD_RELEASES.items():
            package = RepoPackage("amdgpu-dkms", version, dkms_module="amdgpu")
            mirror.dists_repo(f"radeon/amdgpu/{release}/ubuntu", "jammy", [package])
        driver = {"amdgpuInstallerRepoURL": mirror.url("radeon")}
        # A release left configured by hand: apt lists its higher amdgpu-dkms too, which must not win.
        (root / "etc/apt/sources.list.d/rocm-old.list").write_text(
            "deb [arch=amd64 signed-by=/etc/apt/keyrings/amdgpu.asc]"
            f" {mirror.url('radeon')}/amdgpu/6.3.4/ubuntu jammy main\n"
        )
        steps = [
            ("install", "driver-install", "6.2.4"),
            ("again", "driver-install", "6.2.4"),
            ("upgrade", "driver-install", "6.3.4"),
            ("downgrade", "driver-install", "6.2.4"),
            ("uninstall", "driver-uninstall", "6.2.4"),
        ]
        return _run_steps(root, "amd", driver, steps)
    finally:
        mirror.close()
        shutil.rmtree(root, ignore_errors=True)  # 220 MB; the tests read the steps' records


@pytest.fixture(scope="module")
def nvidia(tmp_path_factory: pytest.TempPathFactory, debian_base_root: Path) -> dict[str, Step]:
    root = debian_root.fresh_root(tmp_path_factory.mktemp("debian-nvidia") / "root", "nvidia")
    mirror = VendorMirror(root)
    try:
        mirror.distribution([HEADERS])
        mirror.write_key("cuda/debian12/x86_64/3bf863cc.pub")
        drivers = [RepoPackage("nvidia-open", v, dkms_module="nvidia") for v in NVIDIA_RELEASES.values()]
        mirror.flat_repo("cuda/debian12/x86_64", drivers)
        mirror.write_key("libnvidia-container/gpgkey")
        mirror.flat_repo(
            "libnvidia-container/stable/deb/amd64", [RepoPackage("nvidia-container-toolkit", "1.17.5-1")]
        )
        driver = {
            "cudaRepoURL": mirror.url("cuda"),
            "containerToolkitRepoURL": mirror.url("libnvidia-container"),
        }
        steps = [
            ("install", "driver-install", "570.124.06"),
            ("upgrade", "driver-install", "570.133.20"),
            ("uninstall", "driver-uninstall", "570.133.20"),
        ]
        return _run_steps(root, "nvidia", driver, steps)
    finally:
        mirror.close()
        shutil.rmtree(root, ignore_errors=True)


def test_amd_install_puts_the_release_amdgpu_dkms_on_and_loads_it(amd: dict[str, Step]) -> None:
    step = amd["install"]
    assert step.summary.succeeded, step.summary.failed_tasks
    assert step.packages["amdgpu-dkms"] == AMD_RELEASES["6.2.4"]
    assert step.packages[HEADERS.name] == HEADERS.version
    assert step.dkms == [f"amdgpu/6.8.5.60204-2070768.22.04/{KERNEL}"]
    assert step.loaded
    assert step.marker["version"] == "6.2.4" and step.marker["package_version"] == AMD_RELEASES["6.2.4"]
    assert step.summary.facts["driver_version"] == "6.2.4"
    assert step.summary.facts["driver_package"] == f"amdgpu-dkms={AMD_RELEASES['6.2.4']}"


def test_amd_second_run_changes_nothing(amd: dict[str, Step]) -> None:
    step = amd["again"]
    assert step.summary.succeeded, step.summary.failed_tasks
    assert step.summary.changed == 0
    assert step.packages["amdgpu-dkms"] == AMD_RELEASES["6.2.4"]


def test_amd_upgrade_installs_the_new_release_package(amd: dict[str, Step]) -> None:
    step = amd["upgrade"]
    assert step.summary.succeeded, step.summary.failed_tasks
    assert step.packages["amdgpu-dkms"] == AMD_RELEASES["6.3.4"]
    assert step.dkms == [f"amdgpu/6.10.5.60304-2125197.22.04/{KERNEL}"]
    assert step.marker["version"] == "6.3.4" and step.marker["package_version"] == AMD_RELEASES["6.3.4"]
    assert step.summary.facts["driver_version"] == "6.3.4"


def test_amd_downgrade_goes_back_to_the_old_release_package(amd: dict[str, Step]) -> None:
    step = amd["downgrade"]
    assert step.summary.succeeded, step.summary.failed_tasks
    assert step.packages["amdgpu-dkms"] == AMD_RELEASES["6.2.4"]
    assert step.dkms == [f"amdgpu/6.8.5.60204-2070768.22.04/{KERNEL}"]
    assert step.marker["version"] == "6.2.4"


def test_amd_uninstall_purges_the_package_and_its_build(amd: dict[str, Step]) -> None:
    step = amd["uninstall"]
    assert step.summary.succeeded, step.summary.failed_tasks
    assert "amdgpu-dkms" not in step.packages
    assert step.dkms == [] and not step.loaded and step.marker == {}


def test_nvidia_install_upgrade_uninstall(nvidia: dict[str, Step]) -> None:
    install, upgrade, uninstall = nvidia["install"], nvidia["upgrade"], nvidia["uninstall"]
    assert install.summary.succeeded, install.summary.failed_tasks
    assert install.packages["nvidia-open"] == "570.124.06-1"
    assert install.packages["nvidia-container-toolkit"] == "1.17.5-1"
    assert install.loaded and install.summary.facts["driver_version"] == "570.124.06"
    assert upgrade.summary.succeeded, upgrade.summary.failed_tasks
    assert upgrade.packages["nvidia-open"] == "570.133.20-1"
    assert upgrade.dkms == [f"nvidia/570.133.20-1/{KERNEL}"]
    assert (
        upgrade.marker["version"] == "570.133.20" and upgrade.summary.facts["driver_version"] == "570.133.20"
    )
    assert uninstall.summary.succeeded, uninstall.summary.failed_tasks
    assert "nvidia-open" not in uninstall.packages and uninstall.dkms == []
    assert uninstall.packages["nvidia-container-toolkit"] == "1.17.5-1"  # other workloads may use it

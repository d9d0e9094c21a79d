"""The real driver playbooks through ansible-runner against temp host roots with recording fakes.

Every run is a real `ansible-playbook` (local connection); the host commands land in
`gpuop_sim.hostfakes`, which keep package, DKMS and module state under the root. Runs are slow on a
shared 2-core machine, so a scenario's first and second run happen once in a module fixture and
the tests read their outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_operator.jobresult import PlaybookSummary
from gpuop_operator.playbookrun import PlaybookError, PlaybookVars, run_playbook
from gpuop_sim import hostfakes
from gpuop_sim.bare_host import BareHost, Runtime, lay_bare_host

pytestmark = pytest.mark.slow

AMD_UBUNTU_22 = [
    ["uname", "-r"],
    ["curl", "-fsSL", "--create-dirs", "-o", "/etc/apt/keyrings/amdgpu.asc", "https://repo.radeon.com/rocm/rocm.gpg.key"],
    ["apt-get", "update"],
    ["apt-cache", "madison", "amdgpu-dkms"],
    ["dpkg-query", "-W", "-f=${Status} ${Version}", "linux-headers-6.8.0-40-generic"],
    ["dpkg-query", "-W", "-f=${Status} ${Version}", "linux-modules-extra-6.8.0-40-generic"],
    ["dpkg-query", "-W", "-f=${Status} ${Version}", "amdgpu-dkms"],
    [
        "apt-get", "install", "-y", "--no-install-recommends", "--allow-downgrades",
        "linux-headers-6.8.0-40-generic", "linux-modules-extra-6.8.0-40-generic",
        "amdgpu-dkms=1:6.10.5.60204-2125197.22.04",
    ],
    ["depmod", "-a", "6.8.0-40-generic"],
    ["dkms", "status", "-m", "amdgpu"],
    ["modprobe", "amdgpu"],
    ["systemctl", "is-active", "containerd"],
    ["systemctl", "is-active", "crio"],
    ["systemctl", "restart", "containerd"],
    ["dpkg-query", "-W", "-f=${Status} ${Version}", "amdgpu-dkms"],
]  # fmt: skip
NVIDIA_UBUNTU_24 = [
    ["uname", "-r"],
    [
        "curl", "-fsSL", "--create-dirs", "-o", "/etc/apt/keyrings/cuda.asc",
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub",
    ],
    [
        "curl", "-fsSL", "--create-dirs", "-o", "/etc/apt/keyrings/nvidia-container-toolkit.asc",
        "https://nvidia.github.io/libnvidia-container/gpgkey",
    ],
    ["apt-get", "update"],
    ["apt-cache", "madison", "nvidia-driver-570-open"],
    ["dpkg-query", "-W", "-f=${Status} ${Version}", "linux-headers-6.8.0-40-generic"],
    ["dpkg-query", "-W", "-f=${Status} ${Version}", "nvidia-driver-570-open"],
    ["dpkg-query", "-W", "-f=${Status} ${Version}", "nvidia-container-toolkit"],
    [
        "apt-get", "install", "-y", "--no-install-recommends", "--allow-downgrades",
        "linux-headers-6.8.0-40-generic", "nvidia-driver-570-open=570.86.15-0ubuntu1",
        "nvidia-container-toolkit",
    ],
    ["depmod", "-a", "6.8.0-40-generic"],
    ["dkms", "status", "-m", "nvidia"],
    ["modprobe", "-a", "nvidia", "nvidia-modeset", "nvidia-uvm"],
    ["systemctl", "is-active", "containerd"],
    ["systemctl", "is-active", "crio"],
    ["update-initramfs", "-u", "-k", "6.8.0-40-generic"],
    ["systemctl", "restart", "containerd"],
    ["dpkg-query", "-W", "-f=${Status} ${Version}", "nvidia-driver-570-open"],
]  # fmt: skip
ROCKY_KERNEL = "5.14.0-427.13.1.el9_4.x86_64"
RPM_QUERY = ["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}"]
AMD_ROCKY_9 = [
    ["uname", "-r"],
    ["dnf", "makecache"],
    [
        "dnf",
        "repoquery",
        "--quiet",
        "--disablerepo=*",
        "--enablerepo=amdgpu",
        "--queryformat",
        "%{version}-%{release}",
        "amdgpu-dkms",
    ],
    [*RPM_QUERY, f"kernel-headers-{ROCKY_KERNEL}"],
    [*RPM_QUERY, f"kernel-devel-{ROCKY_KERNEL}"],
    [*RPM_QUERY, "amdgpu-dkms"],
    [
        "dnf",
        "install",
        "-y",
        f"kernel-headers-{ROCKY_KERNEL}",
        f"kernel-devel-{ROCKY_KERNEL}",
        "amdgpu-dkms-6.10.5.60300-2125197.el9",
    ],
    ["depmod", "-a", ROCKY_KERNEL],
    ["dkms", "status", "-m", "amdgpu"],
    ["modprobe", "amdgpu", "ppfeaturemask=0xffffffff", "noretry=1"],
    ["systemctl", "is-active", "containerd"],
    ["systemctl", "is-active", "crio"],
    ["dracut", "-f", "--kver", ROCKY_KERNEL],
    ["systemctl", "restart", "containerd"],
    [*RPM_QUERY, "amdgpu-dkms"],
]


# An override that uses the built-in tree's variables (vars/*.yml sit next to it in the run's project).
SITE_REBOOT = """
- name: Site reboot
  hosts: all
  gather_facts: false
  vars_files: [vars/defaults.yml, vars/derived.yml]
  tasks:
    - name: Reboot later
      ansible.builtin.command:
        argv: "{{ host_exec_argv + ['systemctl', 'reboot', '--when=+5min'] }}"
      changed_when: true
"""


@dataclass(frozen=True)
class Scenario:
    distro: str
    vendor: str
    driver: dict[str, Any]
    runtime: Runtime
    expected: list[list[str]]


SCENARIOS = {
    "ubuntu-22.04-amd": Scenario("ubuntu-22.04", "amd", {}, "containerd-v2", AMD_UBUNTU_22),
    "ubuntu-24.04-nvidia": Scenario(
        "ubuntu-24.04",
        "nvidia",
        {"version": "570.86.15", "blacklist": True},
        "containerd-v3",
        NVIDIA_UBUNTU_24,
    ),
    "rocky-9-amd": Scenario(
        "rocky-9.4",
        "amd",
        {
            "version": "6.3",
            "blacklist": True,
            "kernelModuleParameters": ["ppfeaturemask=0xffffffff", "noretry=1"],
        },
        "containerd-v2",
        AMD_ROCKY_9,
    ),
}


@dataclass(frozen=True)
class Installed:
    name: str
    scenario: Scenario
    host: BareHost
    first: PlaybookSummary
    first_commands: list[list[str]]
    second: PlaybookSummary
    second_commands: list[list[str]]


def play(
    host: BareHost, name: str = "driver-install", overrides: Path | None = None, **extra: Any
) -> PlaybookSummary:
    settings = PlaybookVars.model_validate({"vendor": host.vendor, "host_exec": host.host_exec, **extra})
    return run_playbook(name, host.root, settings, overrides=overrides, quiet=True)


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def installed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    scenario = SCENARIOS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    host = lay_bare_host(root, scenario.distro, scenario.vendor, gpus=2, runtime=scenario.runtime)  # type: ignore[arg-type]
    first = play(host, driver=scenario.driver)
    first_commands = hostfakes.recorded(root)
    second = play(host, driver=scenario.driver)
    return Installed(
        request.param,
        scenario,
        host,
        first,
        first_commands,
        second,
        hostfakes.recorded(root)[len(first_commands) :],
    )


def test_first_run_installs_the_driver_with_these_host_commands_in_order(installed: Installed) -> None:
    assert installed.first.succeeded, installed.first.failed_tasks
    assert installed.first_commands == installed.scenario.expected
    assert installed.first.changed > 0


def test_second_run_changes_nothing_and_only_looks(installed: Installed) -> None:
    assert installed.second.succeeded, installed.second.failed_tasks
    assert installed.second.changed == 0
    verbs = {tuple(c[:2]) for c in installed.second_commands}
    looks = ("uname", "dpkg-query", "rpm", "dkms", "systemctl")
    assert all(
        c[0] in looks or c[:2] in (["dnf", "repoquery"], ["apt-cache", "madison"])
        for c in installed.second_commands
    ), verbs
    assert ("systemctl", "restart") not in verbs


def test_devices_marker_and_runtime_config_after_install(installed: Installed) -> None:
    root, scenario = installed.host.root, installed.scenario
    marker = json.loads((root / f"var/lib/gpuop/driver/{scenario.vendor}.json").read_text())
    assert marker["vendor"] == scenario.vendor
    assert marker["kernel"] == installed.host.kernel
    assert marker["version"] == scenario.driver.get(
        "version", {"amd": "6.2.4", "nvidia": "550.127.05"}[scenario.vendor]
    )
    assert marker["installed_at"].endswith("Z")
    facts = installed.first.facts
    assert facts["kernel"] == installed.host.kernel and facts["gpus"] == "2"
    assert facts["os"] == scenario.distro.replace("-", " ")
    config = (root / "etc/containerd/config.toml").read_text()
    assert "enable_cdi = true" in config and '"/var/run/cdi"' in config
    if scenario.vendor == "amd":
        assert (root / "dev/kfd").exists() and facts["device_nodes"].split()[1:] == [
            "/dev/dri/renderD128",
            "/dev/dri/renderD129",
        ]
    else:
        assert facts["device_nodes"].split() == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"]


def test_blacklist_and_module_parameters_are_persisted_for_the_next_boot(installed: Installed) -> None:
    modprobe_d = installed.host.root / "etc/modprobe.d"
    files = sorted(p.name for p in modprobe_d.iterdir())
    if installed.name == "ubuntu-22.04-amd":
        assert files == []
    elif installed.name == "ubuntu-24.04-nvidia":
        assert files == ["gpuop-blacklist-nouveau.conf"]
        assert "blacklist nouveau" in (modprobe_d / files[0]).read_text()
    else:
        assert files == ["gpuop-amdgpu-options.conf", "gpuop-blacklist-amdgpu.conf"]
        assert "options amdgpu ppfeaturemask=0xffffffff noretry=1" in (modprobe_d / files[0]).read_text()
    repo = installed.host.root / ("etc/yum.repos.d/amdgpu.repo" if installed.name == "rocky-9-amd" else "")
    if installed.name == "rocky-9-amd":
        assert "baseurl=https://repo.radeon.com/amdgpu/6.3/el/9.4/main/x86_64/" in repo.read_text()


def test_unsupported_os_stops_at_the_first_task_before_touching_the_host(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path, "ubuntu-20.04", "amd")
    summary = play(host)
    assert summary.status == "failed" and summary.changed == 0
    assert [f.task for f in summary.failed_tasks] == ["Check the OS is supported"]
    assert summary.failed_tasks[0].message == "Unsupported OS ubuntu 20.04"
    assert hostfakes.recorded(tmp_path) == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from gpuop_operator.main import main; raise SystemExit(main())",
            "playbook",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )


def test_failing_dkms_build_fails_the_cli_run_with_the_task_and_its_error(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path / "root", "ubuntu-22.04", "amd")
    hostfakes.fail(host.root, "dkms", "amdgpu/6.8.5: make: *** [Makefile:1965: /var/lib/dkms/amdgpu] Error 2")
    extra = tmp_path / "vars.yml"
    extra.write_text(
        yaml.safe_dump({"vendor": "amd", "host_exec": host.host_exec, "driver": {"version": "6.2.4"}})
    )
    log = tmp_path / "termination-log"
    done = _cli(
        "driver-install",
        "--host-root",
        str(host.root),
        "--extra-vars-file",
        str(extra),
        "--termination-log",
        str(log),
    )
    assert done.returncode == 1, done.stderr
    summary = PlaybookSummary.model_validate_json(log.read_text())
    assert summary.status == "failed" and summary.rc != 0
    [failure] = summary.failed_tasks
    assert failure.task == "Install the packages for amdgpu"
    assert failure.command.endswith(
        "apt-get install -y --no-install-recommends --allow-downgrades linux-headers-6.8.0-40-generic "
        "linux-modules-extra-6.8.0-40-generic amdgpu-dkms=1:6.10.5.60204-2125197.22.04"
    )
    assert "Error 2" in failure.stderr_tail and "bad exit status" in failure.stderr_tail
    assert not any(c[0] == "modprobe" for c in hostfakes.recorded(host.root))
    assert not (host.root / "var/lib/gpuop/driver/amd.json").exists()


def test_broken_override_is_refused_naming_its_configmap_key(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path / "root", "ubuntu-22.04", "amd")
    overrides = tmp_path / "overrides"
    overrides.mkdir()
    (overrides / "driver-install.yaml").write_text(
        "- name: Broken\n  hosts: all\n  tasks:\n    - ansible.builtin.nope: {}\n"
    )
    with pytest.raises(PlaybookError, match=r"override driver-install.yaml \(ConfigMap key\).*syntax-check"):
        play(host, overrides=overrides)
    assert hostfakes.recorded(host.root) == []
    extra = tmp_path / "vars.yml"
    extra.write_text(yaml.safe_dump({"vendor": "amd", "host_exec": host.host_exec}))
    log = tmp_path / "termination-log"
    done = _cli("driver-install", "--host-root", str(host.root), "--extra-vars-file", str(extra),
                "--overrides-dir", str(overrides), "--termination-log", str(log))  # fmt: skip
    assert done.returncode == 2 and "driver-install.yaml" in done.stderr
    [failure] = PlaybookSummary.model_validate_json(log.read_text()).failed_tasks
    assert "driver-install.yaml (ConfigMap key)" in failure.message


def test_override_replaces_the_built_in_playbook_and_can_use_its_variables(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path / "root", "ubuntu-22.04", "amd")
    overrides = tmp_path / "overrides"
    overrides.mkdir()
    (overrides / "node-reboot.yml").write_text(SITE_REBOOT)
    summary = play(host, "node-reboot", overrides=overrides)
    assert summary.succeeded and summary.changed == 1
    assert hostfakes.recorded(host.root) == [["systemctl", "reboot", "--when=+5min"]]


def test_node_reboot_asks_the_host_to_reboot(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path, "rocky-9.4", "nvidia")
    summary = play(host, "node-reboot")
    assert summary.succeeded and summary.facts["kernel"] == ROCKY_KERNEL
    assert hostfakes.recorded(tmp_path) == [["uname", "-r"], ["reboot"]]
    assert hostfakes.boots(tmp_path) == 1


def _copy(installed: Installed, root: Path) -> BareHost:
    shutil.copytree(installed.host.root, root, symlinks=True)
    return BareHost(
        root,
        installed.host.distro,
        installed.host.vendor,
        installed.host.kernel,
        installed.host.pci_addresses,
    )


@pytest.mark.parametrize("installed", ["ubuntu-22.04-amd"], indirect=True)
def test_after_a_kernel_update_install_adds_the_headers_and_builds_the_module_for_it(
    installed: Installed, tmp_path: Path
) -> None:
    host = _copy(installed, tmp_path / "root")
    new = "6.8.0-45-generic"
    hostfakes.boot(host.root, kernel=new)  # amdgpu is not built for the new kernel: nothing loads at boot
    before = len(hostfakes.recorded(host.root))
    summary = play(host)
    assert summary.succeeded, summary.failed_tasks
    assert hostfakes.recorded(host.root)[before:] == [
        ["uname", "-r"],
        ["apt-cache", "madison", "amdgpu-dkms"],
        ["dpkg-query", "-W", "-f=${Status} ${Version}", f"linux-headers-{new}"],
        ["dpkg-query", "-W", "-f=${Status} ${Version}", f"linux-modules-extra-{new}"],
        ["dpkg-query", "-W", "-f=${Status} ${Version}", "amdgpu-dkms"],
        [
            "apt-get",
            "install",
            "-y",
            "--no-install-recommends",
            "--allow-downgrades",
            f"linux-headers-{new}",
            f"linux-modules-extra-{new}",
        ],
        ["depmod", "-a", new],
        ["dkms", "status", "-m", "amdgpu"],
        ["dkms", "autoinstall", "-k", new],
        ["modprobe", "amdgpu"],
        ["systemctl", "is-active", "containerd"],
        ["systemctl", "is-active", "crio"],
        ["dpkg-query", "-W", "-f=${Status} ${Version}", "amdgpu-dkms"],
    ]
    assert json.loads((host.root / "var/lib/gpuop/driver/amd.json").read_text())["kernel"] == new


@pytest.mark.parametrize("installed", ["ubuntu-22.04-amd", "ubuntu-24.04-nvidia"], indirect=True)
def test_another_version_replaces_the_installed_driver_instead_of_keeping_it(
    installed: Installed, tmp_path: Path
) -> None:
    """apt leaves an installed package at its version whatever the repository now offers, so the
    new version is installed by exact version (`name=VERSION --allow-downgrades`): amdgpu-dkms is
    replaced in place. An NVIDIA branch change names other packages (nvidia-driver-550-open ->
    nvidia-driver-570-open): the old branch's come off first, or both would stay installed."""
    root = tmp_path / "root"
    host = _copy(installed, root)
    old = json.loads((root / f"var/lib/gpuop/driver/{host.vendor}.json").read_text())["version"]
    new = {"amd": "6.3", "nvidia": "575.57.08"}[host.vendor]  # NVIDIA: 570 -> 575, another branch
    before = len(hostfakes.recorded(root))
    summary = play(host, driver={**installed.scenario.driver, "version": new})
    assert summary.succeeded, summary.failed_tasks
    commands = hostfakes.recorded(root)[before:]
    install = next(i for i, argv in enumerate(commands) if argv[:2] == ["apt-get", "install"])
    pinned = [arg for arg in commands[install] if "=" in arg and not arg.startswith("-")]
    assert pinned, commands[install]  # the driver package at an exact version, never "whatever is newest"
    purges = [i for i, argv in enumerate(commands) if argv[:2] == ["apt-get", "purge"]]
    if host.vendor == "amd":
        assert purges == [], commands  # same package name: replaced in place by the exact install
    else:
        (purge,) = purges
        assert purge < install, commands
        removed = set(commands[purge][3:])
        assert removed and all(old.split(".")[0] in name for name in removed), commands[purge]
        assert not removed & {arg.split("=")[0] for arg in pinned}, commands
    assert (
        json.loads((root / f"var/lib/gpuop/driver/{host.vendor}.json").read_text())["version"] == new != old
    )
    again = play(host, driver={**installed.scenario.driver, "version": new})
    assert again.succeeded and again.changed == 0


def test_stale_lists_are_refreshed_once_and_another_amdgpu_release_does_not_count(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path, "ubuntu-22.04", "amd")
    radeon = "deb [arch=amd64 signed-by=/etc/apt/keyrings/amdgpu.asc] https://repo.radeon.com/amdgpu"
    hostfakes.write_file(tmp_path / "etc/apt/keyrings/amdgpu.asc", "key")
    hostfakes.write_file(tmp_path / "etc/apt/sources.list.d/rocm.list", f"{radeon}/6.3.4/ubuntu jammy main")
    assert hostfakes.main(["--root", str(tmp_path), "apt-get", "update"]) == 0
    # The playbook's own repository file is already there, unchanged, but apt never read it.
    hostfakes.write_file(tmp_path / "etc/apt/sources.list.d/amdgpu.list", f"{radeon}/6.2.4/ubuntu jammy main")
    before = len(hostfakes.recorded(tmp_path))
    summary = play(host, driver={"version": "6.2.4"}, containerRuntime="none")
    assert summary.succeeded, summary.failed_tasks
    commands = hostfakes.recorded(tmp_path)[before:]
    madison = ["apt-cache", "madison", "amdgpu-dkms"]
    assert commands[1:4] == [madison, ["apt-get", "update"], madison]
    wanted = hostfakes.amd_dkms_version("6.2.4")
    assert any(c[0] == "apt-get" and f"amdgpu-dkms={wanted}" in c for c in commands)
    assert summary.facts["driver_package"] == f"amdgpu-dkms={wanted}"


def test_a_driver_version_the_repository_lacks_fails_naming_package_version_and_repository(
    tmp_path: Path,
) -> None:
    host = lay_bare_host(tmp_path, "ubuntu-24.04", "nvidia")
    summary = play(host, driver={"version": "570.999.99"}, containerRuntime="none")
    assert summary.status == "failed"
    assert [f.task for f in summary.failed_tasks] == [
        "Stop when the repository has no version for nvidia-driver-570-open"
    ]
    cuda = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
    assert summary.failed_tasks[0].message == (
        f"No nvidia-driver-570-open for nvidia driver 570.999.99 in the repository {cuda} /"
    )
    madison = ["apt-cache", "madison", "nvidia-driver-570-open"]
    assert hostfakes.recorded(tmp_path)[-3:] == [madison, ["apt-get", "update"], madison]
    assert not any(c[:2] == ["apt-get", "install"] for c in hostfakes.recorded(tmp_path))


@pytest.mark.parametrize("installed", ["ubuntu-22.04-amd"], indirect=True)
def test_uninstall_takes_off_what_install_put_on_and_a_second_run_changes_nothing(
    installed: Installed, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    host = _copy(installed, root)
    before = len(hostfakes.recorded(root))
    first = play(host, "driver-uninstall")
    assert first.succeeded, first.failed_tasks
    assert hostfakes.recorded(root)[before:] == [
        ["uname", "-r"],
        ["modprobe", "-r", "amdgpu"],
        ["dpkg-query", "-W", "-f=${Status} ${Version}", "amdgpu-dkms"],
        ["apt-get", "purge", "-y", "amdgpu-dkms"],
        ["apt-get", "update"],
        ["depmod", "-a", "6.8.0-40-generic"],
    ]
    assert not (root / "var/lib/gpuop/driver/amd.json").exists()
    assert not (root / "etc/apt/sources.list.d/amdgpu.list").exists()
    assert not (root / "sys/module/amdgpu/initstate").exists()
    second = play(host, "driver-uninstall")
    assert second.succeeded and second.changed == 0


def test_crio_node_gets_a_cdi_drop_in_and_nvidia_rhel_packages(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path, "rocky-9.4", "nvidia", gpus=1, runtime="crio")
    summary = play(host, driver={"version": "550.127.05", "kernelModuleType": "auto"})
    assert summary.succeeded, summary.failed_tasks
    commands = hostfakes.recorded(tmp_path)
    assert ["dnf", "install", "-y", f"kernel-devel-{ROCKY_KERNEL}", "kmod-nvidia-latest-dkms-550.127.05",
            "nvidia-container-toolkit"] in commands  # fmt: skip
    assert commands[-2:] == [["systemctl", "restart", "crio"], [*RPM_QUERY, "kmod-nvidia-latest-dkms"]]
    drop_in = (tmp_path / "etc/crio/crio.conf.d/99-gpuop-cdi.conf").read_text()
    assert '[crio.runtime]\ncdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]' in drop_in
    assert (
        "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64"
        in (tmp_path / "etc/yum.repos.d/cuda-rhel9.repo").read_text()
    )


def test_a_run_past_its_timeout_ends_with_status_timeout(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path / "root", "ubuntu-22.04", "amd")
    overrides = tmp_path / "overrides"
    overrides.mkdir()
    (overrides / "node-reboot.yml").write_text(
        "- name: Slow\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Wait\n      ansible.builtin.pause:\n        seconds: 60\n"
    )
    settings = PlaybookVars.model_validate({"vendor": "amd", "host_exec": host.host_exec})
    summary = run_playbook("node-reboot", host.root, settings, overrides=overrides, timeout=3, quiet=True)
    assert summary.status == "timeout" and not summary.succeeded
    assert (summary.finished_at - summary.started_at).total_seconds() < 30

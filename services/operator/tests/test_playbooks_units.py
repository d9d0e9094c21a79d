"""The pure parts behind the driver playbooks: OS support, the containerd CDI edit, the device check,
the extra-vars file, and how ansible-runner events become a PlaybookSummary. No Ansible runs here."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from gpuop_operator.devicecheck import check_devices
from gpuop_operator.hostfacts import (
    apt_source_uri,
    dpkg_version_key,
    host_platform,
    madison_version,
    missing_packages,
    packages_to_install,
    parse_os_release,
    repoquery_version,
    version_mismatches,
)
from gpuop_operator.jobresult import PlaybookSummary
from gpuop_operator.playbookrun import (
    BUILTIN_DIR,
    PlaybookError,
    PlaybookVars,
    ansible_extra_vars,
    find_override,
    load_vars_file,
    summarize,
)
from gpuop_operator.playbookrun import main as playbook_cli
from gpuop_operator.runtimecfg import CRI_TABLES, RuntimeConfigError, containerd_cdi_config
from gpuop_sim import hostfakes
from gpuop_sim.bare_host import CONTAINERD_V2_CONFIG, CONTAINERD_V3_CONFIG, OS_RELEASES, lay_bare_host
from hypothesis import given
from hypothesis import strategies as st

NOW = datetime(2026, 12, 3, tzinfo=UTC)


# --- OS support ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("os", "family", "codename"),
    [("ubuntu-22.04", "debian", "jammy"), ("ubuntu-24.04", "debian", "noble"), ("rocky-9.4", "rhel", ""),
     ("rhel-9.4", "rhel", ""), ("debian-12", "debian", "bookworm")],
)  # fmt: skip
def test_supported_platforms(os: str, family: str, codename: str) -> None:
    platform = host_platform(OS_RELEASES[os])
    assert platform["supported"] and platform["message"] == ""
    assert (platform["family"], platform["codename"]) == (family, codename)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('ID=debian\nVERSION_ID="11"\nVERSION_CODENAME=bullseye\n', "Unsupported OS debian 11"),
        (OS_RELEASES["ubuntu-20.04"], "Unsupported OS ubuntu 20.04"),
        ('ID="rocky"\nVERSION_ID="8.9"\n', "Unsupported OS rocky 8.9"),
        ('ID="centos"\nVERSION_ID="9"\n', "Unsupported OS centos 9"),
        ("", "Unsupported OS unknown unknown"),
    ],
)
def test_unsupported_platforms_say_which(text: str, message: str) -> None:
    platform = host_platform(text)
    assert not platform["supported"] and platform["family"] == ""
    assert platform["message"] == message


def test_os_release_parsing_skips_comments_and_unquotes() -> None:
    text = '# comment\nID="almalinux"\nVERSION_ID=\'9.3\'\nbroken line\nPRETTY_NAME="Alma \\"Linux\\""\n'
    assert parse_os_release(text) == {"ID": "almalinux", "VERSION_ID": "9.3", "PRETTY_NAME": 'Alma "Linux"'}
    assert host_platform(text)["supported"]


def test_missing_packages_reads_dpkg_and_rpm_answers() -> None:
    results: list[dict[str, object]] = [
        {"item": "a", "rc": 0, "stdout": "install ok installed 1.0-1"},
        {"item": "b", "rc": 0, "stdout": "deinstall ok config-files 1.0-1"},
        {"item": "c", "rc": 1, "stdout": ""},
    ]
    assert missing_packages(results, "debian") == ["b", "c"]
    assert missing_packages(results, "rhel") == ["c"]


# `apt-cache madison amdgpu-dkms` (apt 2.6) on a host with a stale ROCm 6.3.4 repository left next to
# the 6.2.4 one the playbook wrote: the higher version must not win.
RADEON = "https://repo.radeon.com/amdgpu"
AMD_MADISON = "".join(
    f"amdgpu-dkms | {version} | {RADEON}/{release}/ubuntu {suite}/main amd64 Packages\n"
    for version, release, suite in [
        ("1:6.10.5.60304-2125197.22.04", "6.3.4", "jammy"),
        ("1:6.8.5.60204-2070768.22.04", "6.2.4", "jammy"),
        ("1:6.8.5.60204-2070768.22.04", "6.2.4", "noble"),
    ]
)


def test_madison_version_counts_only_the_repository_the_playbook_configured() -> None:
    # amdgpu/6.3.4 holds amdgpu-dkms 1:6.10.5.60304-...: no "6.3" in it, so only the repository can say.
    assert madison_version(AMD_MADISON, "amdgpu-dkms", f"{RADEON}/6.2.4/ubuntu", "jammy") == (
        "1:6.8.5.60204-2070768.22.04"
    )
    assert madison_version(AMD_MADISON, "amdgpu-dkms", f"{RADEON}/6.3.4/ubuntu/", "jammy") == (
        "1:6.10.5.60304-2125197.22.04"
    )
    assert madison_version(AMD_MADISON, "amdgpu-dkms", f"{RADEON}/6.3.4/ubuntu", "noble") == ""
    assert madison_version(AMD_MADISON, "amdgpu-dkms", f"{RADEON}/6.4.1/ubuntu", "jammy") == ""
    assert madison_version(AMD_MADISON, "amdgpu-dkms-firmware", f"{RADEON}/6.3.4/ubuntu", "jammy") == ""
    assert madison_version("", "amdgpu-dkms", f"{RADEON}/6.3.4/ubuntu", "jammy") == ""  # apt: no line


def test_madison_version_of_a_flat_repository_takes_the_driver_version() -> None:
    cuda = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
    madison = "".join(
        f"cuda-drivers-570 | {v} | {cuda}  Packages\n" for v in ("570.133.20-0ubuntu1", "570.124.06-0ubuntu1")
    )
    ubuntu = "http://archive.ubuntu.com/ubuntu jammy/restricted amd64 Packages"
    madison += f"cuda-drivers-570 | 570.172.08-0ubuntu1 | {ubuntu}\n"
    assert (
        madison_version(madison, "cuda-drivers-570", f"{cuda}/", "/", "570.124.06") == "570.124.06-0ubuntu1"
    )
    assert madison_version(madison, "cuda-drivers-570", f"{cuda}/", "/") == "570.133.20-0ubuntu1"
    assert madison_version(madison, "cuda-drivers-570", f"{cuda}/", "/", "570.86.15") == ""
    assert madison_version(madison, "cuda-drivers-570", f"{cuda}/", "/", "570.172.08") == ""


def test_apt_names_a_source_without_credentials_trailing_slash_or_file_slashes() -> None:
    assert apt_source_uri("file:///srv/mirror/radeon/amdgpu/6.2.4/ubuntu/") == (
        "file:/srv/mirror/radeon/amdgpu/6.2.4/ubuntu"
    )
    assert apt_source_uri("https://user:secret@mirror.example/cuda/") == "https://mirror.example/cuda"
    madison = "     nvidia-open | 570.124.06-1 | file:/srv/mirror/cuda/debian12/x86_64  Packages\n"
    assert madison_version(madison, "nvidia-open", "file:///srv/mirror/cuda/debian12/x86_64/", "/") == (
        "570.124.06-1"
    )


def test_repoquery_version_takes_the_highest_of_the_release() -> None:
    lines = "\n6.8.5.60204-2070768.el9\n6.10.5.60304-2125197.el9\n"
    assert repoquery_version(lines) == "6.10.5.60304-2125197.el9"
    assert repoquery_version(lines, "6.8.5.60204") == "6.8.5.60204-2070768.el9"
    assert repoquery_version("") == ""


def test_dpkg_version_order() -> None:
    ordered = ["1.0~rc1-1", "1.0-1", "1.0-1ubuntu1", "1.0a-1", "1.10-1", "1:0.1-1"]
    assert sorted(reversed(ordered), key=dpkg_version_key) == ordered


def test_packages_to_install_pins_versions_and_upgrades_or_downgrades() -> None:
    wanted = {"name": "amdgpu-dkms", "version": "1:6.8.5.60204-2070768.22.04"}
    results: list[dict[str, object]] = [
        {"item": "linux-headers-6.1.0-28-amd64", "rc": 0, "stdout": "install ok installed 6.1.119-1"},
        {"item": wanted, "rc": 0, "stdout": "install ok installed 1:6.10.5.60304-2125197.22.04"},
    ]
    assert packages_to_install(results, "debian") == ["amdgpu-dkms=1:6.8.5.60204-2070768.22.04"]
    assert version_mismatches(results, "debian") == [
        "amdgpu-dkms is at 1:6.10.5.60304-2125197.22.04, wanted 1:6.8.5.60204-2070768.22.04"
    ]
    rhel: list[dict[str, object]] = [
        {
            "item": {"name": "kmod-nvidia-open-dkms", "version": "570.133.20"},
            "rc": 0,
            "stdout": "570.133.20-1.el9",
        },
        {"item": {"name": "amdgpu-dkms", "version": "6.10.5.60304-2125197.el9"}, "rc": 1, "stdout": ""},
    ]
    assert packages_to_install(rhel, "rhel") == ["amdgpu-dkms-6.10.5.60304-2125197.el9"]
    assert version_mismatches(rhel, "rhel") == [
        "amdgpu-dkms is not installed, wanted 6.10.5.60304-2125197.el9"
    ]


# --- containerd CDI -----------------------------------------------------------------------------

DIRS = ["/etc/cdi", "/var/run/cdi"]


def _cri(text: str, table: str) -> dict[str, Any]:
    plugins: dict[str, Any] = tomllib.loads(text)["plugins"]
    return dict(plugins[table])


def test_v2_config_gets_cdi_in_the_cri_table_keeping_other_keys() -> None:
    edited = containerd_cdi_config(CONTAINERD_V2_CONFIG, DIRS)
    assert edited is not None
    cri = _cri(edited, "io.containerd.grpc.v1.cri")
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == DIRS
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.8"
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert containerd_cdi_config(edited, DIRS) is None


def test_v3_config_gets_the_runtime_plugin_table_appended() -> None:
    edited = containerd_cdi_config(CONTAINERD_V3_CONFIG, DIRS)
    assert edited is not None and edited.startswith(CONTAINERD_V3_CONFIG.rstrip())
    assert _cri(edited, "io.containerd.cri.v1.runtime") == {"enable_cdi": True, "cdi_spec_dirs": DIRS}


def test_existing_spec_dirs_are_kept_and_a_multi_line_array_replaced() -> None:
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
    text += '  cdi_spec_dirs = [\n    "/opt/cdi",\n  ]\n  x = 1\n'
    edited = containerd_cdi_config(text, DIRS)
    assert edited is not None
    assert _cri(edited, "io.containerd.grpc.v1.cri") == {
        "enable_cdi": True,
        "cdi_spec_dirs": ["/opt/cdi", "/etc/cdi", "/var/run/cdi"],
        "x": 1,
    }


def test_missing_config_gets_a_fresh_version_2_file_and_default_dirs_count() -> None:
    fresh = containerd_cdi_config("", DIRS)
    assert fresh is not None and tomllib.loads(fresh)["version"] == 2
    on_with_default_dirs = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
    assert containerd_cdi_config(on_with_default_dirs, DIRS) is None


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[plugins.cri]\nenable_cdi = false\n', "config version 1 is not supported"),
        ("version = 2\n[plugins\n", "not valid TOML"),
        ('version = 2\nplugins = { "io.containerd.grpc.v1.cri" = { enable_cdi = false } }\n', "by hand"),
    ],
)  # fmt: skip
def test_configs_that_cannot_be_edited_safely_are_refused(text: str, error: str) -> None:
    with pytest.raises(RuntimeConfigError, match=error):
        containerd_cdi_config(text, DIRS)


# --- device check -------------------------------------------------------------------------------


def test_amd_check_names_the_gpu_without_a_render_node(tmp_path: Path) -> None:
    host = lay_bare_host(tmp_path, "ubuntu-22.04", "amd", gpus=2)
    assert check_devices(tmp_path, "amd").missing == [
        "/dev/kfd",
        f"render node for {host.pci_addresses[0]}",
        f"render node for {host.pci_addresses[1]}",
    ]
    hostfakes.write_file(tmp_path / hostfakes.DKMS, '{"amdgpu/6.8.0-40-generic": "6.2.4"}')
    assert hostfakes.main(["--root", str(tmp_path), "modprobe", "amdgpu"]) == 0
    assert check_devices(tmp_path, "amd").ok
    (tmp_path / "dev/dri/renderD129").unlink()
    check = check_devices(tmp_path, "amd")
    assert check.missing == [f"render node for {host.pci_addresses[1]}"]
    assert "device nodes are missing" in check.message


def test_nvidia_check_counts_minor_nodes_and_needs_a_gpu(tmp_path: Path) -> None:
    lay_bare_host(tmp_path, "rocky-9.4", "nvidia", gpus=2)
    hostfakes.write_file(tmp_path / "dev/nvidiactl", "")
    hostfakes.write_file(tmp_path / "dev/nvidia0", "")
    assert check_devices(tmp_path, "nvidia").missing == ["2 GPUs but 1 /dev/nvidia<N> node(s)"]
    assert check_devices(tmp_path / "elsewhere", "nvidia").message.startswith("no GPU of this vendor")


# --- the extra-vars file ------------------------------------------------------------------------


def test_vars_file_becomes_the_playbook_variables(tmp_path: Path) -> None:
    path = tmp_path / "vars.yaml"
    path.write_text(
        "vendor: amd\ndriver:\n  enable: true\n  version: '6.3'\n  blacklist: true\n"
        "  amdgpuInstallerRepoURL: https://mirror.example/radeon/\n  kernelModuleParameters: [noretry=1]\n"
        "  cudaRepoURL: file:///srv/mirror/cuda/\n  containerToolkitRepoURL: http://mirror.example/nct\n"
    )
    extra = ansible_extra_vars(load_vars_file(path), Path("/host"))
    assert extra["host_exec"] == "chroot /host" and extra["gpu_vendor"] == "amd"
    assert extra["driver_version"] == "6.3" and extra["driver_blacklist"] is True
    assert extra["amdgpu_repo_url"] == "https://mirror.example/radeon"
    assert extra["cuda_repo_url"] == "file:///srv/mirror/cuda"
    assert extra["container_toolkit_repo_url"] == "http://mirror.example/nct"
    assert extra["kernel_module_parameters"] == ["noretry=1"]
    assert extra["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    fakes = PlaybookVars.model_validate({"vendor": "amd", "hostExec": "python -m fakes --root {host_root}"})
    assert ansible_extra_vars(fakes, Path("/sim/n0"))["host_exec"] == "python -m fakes --root /sim/n0"
    defaults = (BUILTIN_DIR / "vars/defaults.yml").read_text()
    assert all(f"\n{name}:" in defaults for name in extra), (
        "every extra var has a default in vars/defaults.yml"
    )


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("driver: {}\n", "vendor: Field required"),
        ("vendor: intel\n", "vendor: Input should be 'amd' or 'nvidia'"),
        ("vendor: amd\ndriver: {version: 'bad version'}\n", "driver.version: String should match pattern"),
        ("vendor: amd\ndriver: {kernelModuleParameters: ['no equals']}\n", "driver.kernelModuleParameters.0"),
        ("vendor: amd\nhostRoot: /x\n", "hostRoot: Extra inputs are not permitted"),
        ("vendor: amd\nhostExec: ''\n", "hostExec: String should have at least 1 character"),
        ("- vendor: amd\n", "must hold a mapping, not list"),
        ("vendor: [amd\n", "not valid YAML/JSON"),
    ],
)
def test_bad_vars_files_name_the_file_and_the_field(tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "vars.yaml"
    path.write_text(content)
    with pytest.raises(PlaybookError, match=r"vars\.yaml: ") as raised:
        load_vars_file(path)
    assert error in str(raised.value)


def test_unreadable_vars_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError, match=r"absent\.yaml: cannot read the extra-vars file"):
        load_vars_file(tmp_path / "absent.yaml")


def test_an_override_key_is_found_by_name_and_two_keys_for_one_name_refused(tmp_path: Path) -> None:
    assert find_override("driver-install", None) is None
    assert find_override("driver-install", tmp_path) is None
    (tmp_path / "driver-install.yaml").write_text("[]")
    assert find_override("driver-install", tmp_path) == tmp_path / "driver-install.yaml"
    (tmp_path / "driver-install.yml").write_text("[]")
    with pytest.raises(PlaybookError, match=r"both driver-install\.yml and driver-install\.yaml"):
        find_override("driver-install", tmp_path)


def test_built_in_playbooks_ship_in_the_package() -> None:
    assert {p.stem for p in BUILTIN_DIR.glob("*.yml")} == {
        "driver-install",
        "driver-uninstall",
        "node-reboot",
        "gpu-reset",
    }


# --- summary from events ------------------------------------------------------------------------


def _event(kind: str, **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": data}


def test_summary_names_failed_tasks_including_a_failed_loop_item_and_counts() -> None:
    apt = ["chroot", "/host", "apt-get", "install", "-y", "amdgpu-dkms"]
    rpm = {"failed": True, "msg": "boom", "cmd": "rpm -q x", "stderr": "package x is not installed"}
    events = [
        _event("runner_on_ok", task="Read the running kernel"),
        _event(
            "runner_on_failed",
            task="Install the missing packages for amdgpu",
            res={"cmd": apt, "msg": "non-zero return code",
                 "stderr": "x" * 1000 + "Error! Bad return status for module build"},
        ),
        _event("runner_on_failed", task="Ignored", ignore_errors=True, res={"msg": "ignored"}),
        _event(
            "runner_on_failed",
            task="Query packages",
            res={"msg": "One or more items failed", "results": [{"failed": False}, rpm]},
        ),
        _event("playbook_on_stats", changed={"localhost": 3}, ok={"localhost": 9},
               artifact_data={"kernel": "6.8.0", "gpus": 2}),
    ]  # fmt: skip
    summary = summarize("driver-install", events, status="failed", rc=2, started_at=NOW, finished_at=NOW)
    assert [f.task for f in summary.failed_tasks] == [
        "Install the missing packages for amdgpu",
        "Query packages",
    ]
    first, loop = summary.failed_tasks
    assert first.command == "chroot /host apt-get install -y amdgpu-dkms"
    assert first.stderr_tail.endswith("Bad return status for module build") and len(first.stderr_tail) == 400
    assert (loop.message, loop.command, loop.stderr_tail) == (
        "boom",
        "rpm -q x",
        "package x is not installed",
    )
    assert (summary.changed, summary.ok, summary.facts) == (3, 9, {"kernel": "6.8.0", "gpus": "2"})
    assert not summary.succeeded
    assert PlaybookSummary.model_validate_json(summary.to_termination_message()) == summary


def test_an_error_outside_any_task_is_reported_under_the_task_it_stopped_at() -> None:
    events = [
        _event("playbook_on_task_start", task="Check the OS is supported"),
        _event("playbook_on_task_start", task="Build the DKMS module"),
        {
            "event": "verbose",
            "stdout": "[ERROR]: YAML parsing failed: Colons in unquoted values",
            "event_data": {},
        },
    ]
    summary = summarize("driver-install", events, status="failed", rc=4, started_at=NOW, finished_at=NOW)
    [failure] = summary.failed_tasks
    assert failure.task == "Build the DKMS module" and failure.message.startswith(
        "[ERROR]: YAML parsing failed"
    )
    before_any_task = [
        {"event": "verbose", "stdout": "ERROR! the playbook could not be found", "event_data": {}}
    ]
    summary = summarize(
        "driver-install", before_any_task, status="failed", rc=1, started_at=NOW, finished_at=NOW
    )
    assert summary.failed_tasks[0].task == "load the playbook"


def test_an_unknown_runner_status_counts_as_failed() -> None:
    summary = summarize("node-reboot", [], status="unstarted", rc=0, started_at=NOW, finished_at=NOW)
    assert summary.status == "failed" and not summary.succeeded


def test_playbook_vars_defaults() -> None:
    settings = PlaybookVars(vendor="nvidia")
    assert settings.container_runtime == "auto" and settings.driver.kernel_module_type == "auto"


@pytest.mark.parametrize(
    ("name", "error"),
    [("nope", "unknown playbook 'nope' (built in: driver-install, driver-uninstall, node-reboot, gpu-reset; "
              "another name needs an override nope.yml)"),
     ("../etc", "playbook name '../etc': lowercase letters, digits, '-', '_' and '.' only")],
)  # fmt: skip
def test_the_cli_refuses_a_playbook_it_does_not_have_with_exit_2_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, error: str
) -> None:
    extra = tmp_path / "vars.yaml"
    extra.write_text("vendor: nvidia\n")
    log = tmp_path / "termination-log"
    argv = [name, "--host-root", str(tmp_path), "--extra-vars-file", str(extra)]
    argv += ["--termination-log", str(log)]
    assert playbook_cli(argv) == 2
    assert error in capsys.readouterr().err
    summary = PlaybookSummary.model_validate_json(log.read_text())
    assert (summary.status, summary.rc, summary.failed_tasks[0].message) == ("failed", 2, error)


_DIR = st.sampled_from(["/etc/cdi", "/var/run/cdi", "/opt/cdi", "/run/cdi/extra"])


@st.composite
def _containerd_configs(draw: st.DrawFn) -> str:
    version = draw(st.sampled_from([2, 3]))
    table = CRI_TABLES[version]
    lines = [f"version = {version}", "# admin comment", 'root = "/var/lib/containerd"']
    if draw(st.booleans()):
        quote = draw(st.sampled_from(['"', "'"]))
        lines += ["", f"[plugins.{quote}{table}{quote}]  # the CRI table", "  keep_me = 1"]
        if (enable := draw(st.sampled_from([None, True, False]))) is not None:
            lines.append(f"  enable_cdi = {str(enable).lower()}")
        if draw(st.booleans()):
            dirs = draw(st.lists(_DIR, max_size=3, unique=True))
            lines.append(f"  cdi_spec_dirs = {json.dumps(dirs)}")
        lines += [f'  [plugins."{table}".sub]', "    inner = true"]
    lines += ["", '[plugins."io.containerd.other"]', "  x = 2"]
    return "\n".join(lines) + "\n"


@given(text=_containerd_configs(), spec_dirs=st.lists(_DIR, min_size=1, max_size=3, unique=True))
def test_the_cdi_edit_always_yields_a_config_with_cdi_on_and_is_idempotent(
    text: str, spec_dirs: list[str]
) -> None:
    edited = containerd_cdi_config(text, spec_dirs)
    result = text if edited is None else edited
    data = tomllib.loads(result)
    cri = data["plugins"][CRI_TABLES[data["version"]]]
    assert cri["enable_cdi"] is True
    assert set(spec_dirs) <= set(cri.get("cdi_spec_dirs", ["/etc/cdi", "/var/run/cdi"]))
    assert data["plugins"]["io.containerd.other"] == {"x": 2} and data["root"] == "/var/lib/containerd"
    assert "# admin comment" in result
    if "keep_me" in text:
        assert cri["keep_me"] == 1 and cri["sub"] == {"inner": True}
    assert containerd_cdi_config(result, spec_dirs) is None

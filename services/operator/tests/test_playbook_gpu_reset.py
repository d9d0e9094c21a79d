"""The `gpu-reset` playbook through ansible-runner against simulated node roots with recording fakes:
it resets the named GPUs with the vendor tool, fails clearly when it cannot, and reports in set_stats
whether a GPU is still bad afterwards (`reboot_required`)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import ansible_runner
import pytest
import yaml
from gpuop_operator.jobresult import PlaybookSummary
from gpuop_operator.playbookrun import (
    BUILTIN_DIR,
    PlaybookVars,
    _ansible_env,
    _inventory,
    ansible_extra_vars,
    prepare_project,
    summarize,
)
from gpuop_sim import hostfakes
from gpuop_sim.nodes import NodeRootInfo, active_faults, break_gpu, inject_xid

pytestmark = pytest.mark.slow


def reset(info: NodeRootInfo, gpus: Sequence[str] = ()) -> PlaybookSummary:
    """One run as `gpuop-operator playbook gpu-reset` does it, with `gpu_pci_addresses` set (the
    operator's PlaybookVars.gpus)."""
    settings = PlaybookVars.model_validate(
        {"vendor": info.vendor, "host_exec": hostfakes.host_exec_for(info.root)}
    )
    data_dir = Path(tempfile.mkdtemp(prefix="gpuop-gpu-reset-"))
    try:
        playbook = prepare_project(data_dir, "gpu-reset", None)
        started = datetime.now(UTC)
        runner = ansible_runner.run(
            private_data_dir=str(data_dir),
            project_dir=str(playbook.parent),
            playbook=playbook.name,
            inventory=_inventory(),
            extravars={**ansible_extra_vars(settings, info.root), "gpu_pci_addresses": list(gpus)},
            envvars=_ansible_env(data_dir),
            quiet=True,
        )
        return summarize(
            "gpu-reset", runner.events, status=str(runner.status), rc=int(runner.rc),
            started_at=started, finished_at=datetime.now(UTC),
        )  # fmt: skip
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_amd_reset_clears_the_fault_and_needs_no_reboot(gpu_node_root) -> None:
    info = gpu_node_root("amd-mi210x8")
    ras, gone = info.pci_addresses[2], info.pci_addresses[5]
    break_gpu(info.root, ras, "ras")
    break_gpu(info.root, gone, "vanished")
    summary = reset(info, [gone, ras])
    assert summary.succeeded, summary.failed_tasks
    assert summary.facts["reboot_required"] == "false"
    assert summary.facts["reset_gpus"] == f"{ras},{gone}"
    assert summary.facts["still_unhealthy"] == ""
    assert summary.facts["vendor"] == "amd"
    assert summary.changed == 1  # the reset task
    assert hostfakes.recorded(info.root) == [
        ["amd-smi", "version"],
        ["amd-smi", "reset", "-G", "-g", ras],
        ["amd-smi", "reset", "-G", "-g", gone],
    ]
    assert active_faults(info.root) == []


def test_a_fault_that_survives_the_reset_asks_for_a_reboot(gpu_node_root) -> None:
    info = gpu_node_root("amd-mi210x8")
    gpu = info.pci_addresses[0]
    break_gpu(info.root, gpu, "ras", needs_reboot=True)
    summary = reset(info, [gpu])
    assert summary.succeeded, summary.failed_tasks
    assert summary.facts["reboot_required"] == "true"
    assert (
        summary.facts["still_unhealthy"]
        == f"{gpu}: RAS block umc: 1 new uncorrectable error(s) since before the reset"
    )


def test_ras_counts_survive_a_good_reset_and_the_check_reads_them_against_the_baseline(
    gpu_node_root,
) -> None:
    info = gpu_node_root("amd-mi210x8")
    gpu = info.pci_addresses[3]
    counter = info.root / "sys/bus/pci/devices" / gpu / "ras/umc_err_count"
    break_gpu(info.root, gpu, "ras")
    faulted = counter.read_text()
    summary = reset(info, [gpu])
    assert summary.succeeded, summary.failed_tasks
    assert summary.facts["reboot_required"] == "false"  # the fault's own error is not a new one
    assert counter.read_text() == faulted  # amdgpu keeps the counts across a reset
    hostfakes.boot(info.root)
    assert "ue: 0" in counter.read_text().splitlines()  # a boot (driver reload) clears them


def test_nvidia_reset_by_pci_address_and_the_lost_gpu_that_stays_lost(gpu_node_root) -> None:
    info = gpu_node_root("nvidia-h100x8")
    xid, lost = info.pci_addresses[1], info.pci_addresses[6]
    inject_xid(info.root, xid, 48)
    break_gpu(info.root, lost, "vanished", needs_reboot=True)
    summary = reset(info, [xid, lost])
    assert summary.succeeded, summary.failed_tasks
    assert summary.facts["reboot_required"] == "true"
    assert summary.facts["still_unhealthy"] == f"{lost}: not visible to nvidia-smi after the reset"
    commands = hostfakes.recorded(info.root)
    assert commands[:3] == [
        ["nvidia-smi", "-L"],
        ["nvidia-smi", "-r", "-i", xid],
        ["nvidia-smi", "-r", "-i", lost],
    ]
    assert commands[3][1] == "--query-gpu=pci.bus_id,reset_status.reset_required"
    assert [f.gpu for f in active_faults(info.root)] == [lost]


def test_a_busy_gpu_fails_the_run_naming_the_gpu_and_the_tool_error(gpu_node_root) -> None:
    info = gpu_node_root("amd-mi210x8")
    busy, fine = info.pci_addresses[3], info.pci_addresses[4]
    hostfakes.busy(info.root, busy, "pytorch (pid 777)")
    summary = reset(info, [busy, fine])
    assert not summary.succeeded
    [failure] = summary.failed_tasks
    assert failure.task == "Stop when a GPU could not be reset"
    assert failure.message.startswith(f"{busy} could not be reset: {busy} (rc 16):")
    assert "AMDSMI_STATUS_BUSY - Device busy (pytorch (pid 777))" in failure.message
    assert "reboot_required" not in summary.facts


def test_a_missing_tool_fails_before_any_reset(gpu_node_root) -> None:
    info = gpu_node_root("nvidia-h100x8")
    hostfakes.absent(info.root, "nvidia-smi")
    summary = reset(info, [info.pci_addresses[0]])
    [failure] = summary.failed_tasks
    assert failure.task == "Stop when the reset tool is missing"
    assert failure.message.startswith("nvidia-smi does not run on the host (rc 127:")
    assert info.pci_addresses[0] in failure.message
    assert hostfakes.recorded(info.root) == [["nvidia-smi", "-L"]]


def test_a_bad_gpu_address_is_named_and_nothing_runs(gpu_node_root) -> None:
    info = gpu_node_root("amd-radeon")
    summary = reset(info, ["03:00.0"])
    [failure] = summary.failed_tasks
    assert failure.task == "Find the GPUs to reset"
    assert failure.message == "gpu_pci_addresses: '03:00.0' is not a PCI address like 0000:03:00.0"
    assert hostfakes.recorded(info.root) == []


def test_the_cli_resets_every_gpu_when_none_is_named(gpu_node_root, tmp_path: Path) -> None:
    info = gpu_node_root("amd-radeon")
    extra = tmp_path / "vars.yml"
    extra.write_text(yaml.safe_dump({"vendor": "amd", "host_exec": hostfakes.host_exec_for(info.root)}))
    log = tmp_path / "termination-log"
    done = subprocess.run(
        [sys.executable, "-c", "from gpuop_operator.main import main; raise SystemExit(main())", "playbook",
         "gpu-reset", "--host-root", str(info.root), "--extra-vars-file", str(extra),
         "--termination-log", str(log)],
        capture_output=True, text=True, timeout=240, check=False, env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    summary = PlaybookSummary.model_validate_json(log.read_text())
    assert summary.facts["reset_gpus"] == info.pci_addresses[0]
    assert summary.facts["reboot_required"] == "false"


# the check module's logic, without Ansible ----------------------------------------------------------
def check_module() -> ModuleType:
    path = BUILTIN_DIR / "library" / "gpuop_gpu_reset_check.py"
    spec = importlib.util.spec_from_file_location("gpuop_gpu_reset_check", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nvidia_query_parsing() -> None:
    parse = check_module().nvidia_problems
    query = "00000000:18:00.0, No\n00000000:2A:00.0, Yes\n00000000:3A:00.0, [N/A]\n"
    assert parse(query, ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"]) == {
        "0000:2a:00.0": "nvidia-smi still reports reset_status.reset_required Yes",
        "0000:5d:00.0": "not visible to nvidia-smi after the reset",
    }
    assert parse("00000000:18:00.0\n", ["0000:18:00.0"]) == {}  # the older drivers' bus-id-only query


def test_amd_check_names_each_missing_piece(gpu_node_root) -> None:
    module = check_module()
    info = gpu_node_root("amd-mi210x8")
    first, second = info.pci_addresses[0], info.pci_addresses[1]
    (info.root / "sys/bus/pci/devices" / first / "ras/umc_err_count").write_text("ue: x\nce: 0\n")
    for props in (info.root / "sys/class/kfd/kfd/topology/nodes").glob("*/properties"):
        if f"drm_render_minor {module._render_minors(info.root, second).pop()}" in props.read_text():
            props.write_text(props.read_text().replace("drm_render_minor", "drm_render_minor_gone"))
    assert module.amd_problems(info.root, [first, second, "0000:ee:00.0"]) == {
        first: "umc_err_count: unparsable ue 'x'",
        second: "no KFD node",
        "0000:ee:00.0": "not on the PCI bus",
    }

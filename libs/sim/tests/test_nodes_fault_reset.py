"""GPU faults end the way real hardware's do: a GPU reset (the fake `amd-smi reset` / `nvidia-smi -r`)
clears them unless one needs a reboot, the fake `reboot` clears them all; the calls are recorded."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpuop_common.gpu import AmdSysfsBackend
from gpuop_sim import gpuholders, hostfakes
from gpuop_sim.nodes import (
    FaultError,
    active_faults,
    break_gpu,
    build_node_root,
    hold_open,
    inject_xid,
    raise_ras,
    vanish_gpu,
)
from gpuop_sim.nodes.fake_nvml import FakeNvml
from gpuop_sim.nodes.fake_nvml_api import NVML_ERROR_IN_USE
from gpuop_sim.nodes.nvml_state import STATE_RELPATH
from gpuop_sim.shortpaths import short_tmp_dir


def run(root: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = hostfakes.main(["--root", str(root), *argv])
    return rc, out.getvalue(), err.getvalue()


def ras_ue(root: Path, pci: str, block: str = "umc") -> int:
    text = (root / "sys/bus/pci/devices" / pci / "ras" / f"{block}_err_count").read_text()
    return int(dict(line.split(": ") for line in text.splitlines())["ue"])


def unhealthy(backend: AmdSysfsBackend) -> dict[str, list[str]]:
    return {h.gpu_id: [r.code for r in h.reasons] for h in backend.health() if not h.healthy}


def test_amd_reset_clears_ras_and_vanished_gpu_faults_and_is_recorded(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    ras_gpu, gone_gpu = info.pci_addresses[0], info.pci_addresses[3]
    backend = AmdSysfsBackend(info.root)
    assert unhealthy(backend) == {}  # baseline
    raise_ras(info.root, ras_gpu, "umc", by=2)
    vanish_gpu(info.root, gone_gpu)
    broken = unhealthy(backend)
    assert sorted(code for codes in broken.values() for code in codes) == [
        "gpu_vanished",
        "ras_uncorrectable_increase",
    ]
    assert {f.kind for f in active_faults(info.root)} == {"ras", "vanished"}

    assert run(info.root, "amd-smi", "reset", "-G", "-g", ras_gpu)[0] == 0
    assert ras_ue(info.root, ras_gpu) == 2  # amdgpu keeps RAS counts across a reset
    assert run(info.root, "amd-smi", "reset", "--gpureset", "--gpu", gone_gpu)[0] == 0
    assert active_faults(info.root) == []
    backend.reset_health()  # what the labeller does on the remediation's gpu-health-reset
    assert unhealthy(backend) == {}
    assert (info.root / "sys/bus/pci/devices" / gone_gpu).exists()
    assert hostfakes.recorded(info.root) == [
        ["amd-smi", "reset", "-G", "-g", ras_gpu],
        ["amd-smi", "reset", "--gpureset", "--gpu", gone_gpu],
    ]


def test_a_fault_that_needs_a_reboot_survives_the_reset_and_ends_with_the_reboot(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    gpu = info.pci_addresses[1]
    break_gpu(info.root, gpu, "ras", needs_reboot=True)
    rc, out, _ = run(info.root, "amd-smi", "reset", "-G", "-g", "1")  # by index
    assert rc == 0 and "Successfully reset" in out
    assert ras_ue(info.root, gpu) == 2  # the bad memory failed again as the GPU came back
    assert [(f.gpu, f.needs_reboot) for f in active_faults(info.root)] == [(gpu, True)]
    assert run(info.root, "reboot")[0] == 0
    assert active_faults(info.root) == []
    assert ras_ue(info.root, gpu) == 0


def test_nvidia_reset_ends_an_xid_and_brings_a_lost_gpu_back(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8")
    xid_gpu, lost_gpu, stuck_gpu = info.pci_addresses[0], info.pci_addresses[1], info.pci_addresses[2]
    inject_xid(info.root, xid_gpu, 48)
    vanish_gpu(info.root, lost_gpu)
    break_gpu(info.root, stuck_gpu, "xid", needs_reboot=True)
    query = ("nvidia-smi", "--query-gpu=pci.bus_id,reset_status.reset_required", "--format=csv,noheader")
    listed = run(info.root, *query)[1].splitlines()
    assert f"0000{xid_gpu}, Yes" in listed and f"0000{stuck_gpu}, Yes" in listed
    assert not any(line.startswith(f"0000{lost_gpu}") for line in listed)  # NVML cannot see it
    assert len(listed) == 7

    for gpu in (xid_gpu, f"0000{lost_gpu}", stuck_gpu):  # kernel and NVML PCI address forms
        rc, out, _ = run(info.root, "nvidia-smi", "-r", "-i", gpu)
        assert rc == 0 and "was successfully reset" in out
    listed = run(info.root, *query)[1].splitlines()
    assert len(listed) == 8
    assert [line for line in listed if line.endswith("Yes")] == [f"0000{stuck_gpu}, Yes"]
    assert (info.root / "dev/nvidia1").exists()


def test_a_busy_gpu_or_a_missing_tool_refuses_the_reset(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    gpu = info.pci_addresses[0]
    break_gpu(info.root, gpu, "ras")
    hostfakes.busy(info.root, gpu)
    rc, _, err = run(info.root, "amd-smi", "reset", "-G", "-g", gpu)
    assert rc != 0 and "AMDSMI_STATUS_BUSY" in err and gpu in err
    assert len(active_faults(info.root)) == 1  # nothing was reset
    hostfakes.idle(info.root, gpu)
    hostfakes.absent(info.root, "amd-smi")
    rc, _, err = run(info.root, "amd-smi", "reset", "-G", "-g", gpu)
    assert rc == 127 and "command not found" in err


def test_bad_fault_and_reset_targets_are_named(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    with pytest.raises(FaultError, match="'melted'"):
        break_gpu(info.root, info.pci_addresses[0], "melted")
    rc, _, err = run(info.root, "amd-smi", "reset", "-G", "-g", "0000:ee:00.0")
    assert rc == 2 and "0000:ee:00.0" in err
    rc, _, err = run(info.root, "nvidia-smi", "-r", "-i", "9")
    assert rc == 6 and "'9'" in err


SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
HOLD_NVML = """
import sys
from pathlib import Path
from gpuop_sim.nodes.fake_nvml import FakeNvml
nvml = FakeNvml(path=Path(sys.argv[1]))
nvml.nvmlInit()
print("held", flush=True)
sys.stdin.read()  # until the test closes it
"""


def test_a_process_with_nvml_open_blocks_the_reset_and_a_pending_mig_mode_until_it_exits(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8")
    gpu = info.pci_addresses[0]
    inject_xid(info.root, gpu, 48)
    state = info.root / STATE_RELPATH
    agent = subprocess.Popen(
        [sys.executable, "-c", HOLD_NVML, str(state)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None and agent.stdout.readline().strip() == "held"
        nvml = FakeNvml(path=state)
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        wanted = 1 - nvml.nvmlDeviceGetMigMode(handle)[0]
        assert nvml.nvmlDeviceSetMigMode(handle, wanted) == NVML_ERROR_IN_USE  # pending: the agent holds it
        rc, _, err = run(info.root, "nvidia-smi", "-r", "-i", gpu)
        assert rc == 255 and "is in use by another client" in err and f"pid {agent.pid}" in err
        assert [f.gpu for f in active_faults(info.root)] == [gpu]  # nothing was reset
        assert nvml.nvmlDeviceGetMigMode(handle) == [1 - wanted, wanted]  # still pending
    finally:
        assert agent.stdin is not None
        agent.stdin.close()
        agent.wait(timeout=30)
    rc, out, _ = run(info.root, "nvidia-smi", "-r", "-i", gpu)  # the agent exited: its files are closed
    assert rc == 0 and "was successfully reset" in out
    assert active_faults(info.root) == []
    assert nvml.nvmlDeviceGetMigMode(handle) == [wanted, wanted]  # the reset activated it


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as uid 65532 needs root")
@pytest.mark.parametrize("first", ["root agent", "uid 65532 agent"])
def test_an_unprivileged_agent_opens_nvml_and_counts_as_a_holder(first: str) -> None:
    """The device plugin (root) and the node labeller (its image's uid 65532) both initialise NVML,
    either one first: a real node's /dev/nvidia* are world-openable, so the labeller's nvmlInit
    works and the driver counts it as a user of every GPU (main: PermissionError on the holders
    folder root made, or on the root-owned .gpuop-sim when the labeller came first)."""
    base = short_tmp_dir("holders-")  # 0755: reachable by uid 65532
    try:
        info = build_node_root("nvidia-h100x8", base / "root")
        state = info.root / STATE_RELPATH
        plugin = FakeNvml(path=state)
        if first == "root agent":
            plugin.nvmlInit()
        labeller = subprocess.Popen(
            [
                SETPRIV,
                "--reuid=65532",
                "--regid=65532",
                "--clear-groups",
                sys.executable,
                "-c",
                HOLD_NVML,
                str(state),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert labeller.stdout is not None and labeller.stderr is not None
            if labeller.stdout.readline().strip() != "held":
                pytest.fail(f"uid 65532's nvmlInit failed: {labeller.stderr.read()}")
            if first != "root agent":
                plugin.nvmlInit()
            gpu = info.pci_addresses[0]
            assert f"(pid {labeller.pid})" in " ".join(gpuholders.holders(info.root, gpu))
            rc, _, err = run(info.root, "nvidia-smi", "-r", "-i", gpu)
            assert rc == 255 and f"pid {labeller.pid}" in err
        finally:
            assert labeller.stdin is not None
            labeller.stdin.close()
            labeller.wait(timeout=30)
        plugin.nvmlShutdown()
        assert gpuholders.holders(info.root, info.pci_addresses[0]) == []  # both released or gone
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_amd_reset_and_partition_writes_refuse_while_another_process_holds_the_gpu(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    gpu = info.pci_addresses[0]
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        gpuholders.hold(info.root, gpu, sleeper.pid)  # e.g. a workload with /dev/kfd open
        rc, _, err = run(info.root, "amd-smi", "reset", "-G", "-g", gpu)
        assert rc == 16 and "AMDSMI_STATUS_BUSY" in err and f"pid {sleeper.pid}" in err
    finally:
        assert sleeper.stdin is not None
        sleeper.stdin.close()
        sleeper.wait(timeout=30)
    assert run(info.root, "amd-smi", "reset", "-G", "-g", gpu)[0] == 0  # a dead holder no longer counts
    kfd = hold_open(info.root, "/dev/kfd")  # a workload's KFD handle reaches every GPU
    rc, _, err = run(info.root, "amd-smi", "reset", "-G", "-g", info.pci_addresses[5])
    assert rc == 16 and "a process with /dev/kfd open" in err
    kfd.close()
    assert run(info.root, "amd-smi", "reset", "-G", "-g", info.pci_addresses[5])[0] == 0

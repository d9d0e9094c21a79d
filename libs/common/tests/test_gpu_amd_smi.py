"""AMD partition writes through `amd-smi set` on the host: the command, each failure as the errno the
driver gives, and how `auto` chooses between amd-smi and the sysfs attributes."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.gpu.amd_smi import (
    AmdSmiWriter,
    ToolWriteError,
    errno_of_output,
    partition_writer,
    pci_address_of,
)
from gpuop_common.gpu.hostcmd import HostCommands

BDF = "0000:05:00.0"


class Runs:
    """A recording stand-in for subprocess.run: each call answers the next (exit code, stdout, stderr)."""

    def __init__(self, *results: tuple[int, str, str] | BaseException) -> None:
        self.results = list(results)
        self.argv: list[list[str]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.argv.append(list(argv))
        result = self.results.pop(0)
        if isinstance(result, BaseException):
            raise result
        return subprocess.CompletedProcess(argv, result[0], result[1], result[2])


@pytest.fixture
def attr(tmp_path: Path) -> Path:
    """`sys/class/drm/card0/device/current_compute_partition`, the device dir a link to the PCI dir,
    laid out as the kernel does."""
    pci = tmp_path / "sys/devices/pci0000:00" / BDF
    pci.mkdir(parents=True)
    (pci / "current_compute_partition").write_text("SPX\n")
    card = tmp_path / "sys/class/drm/card0"
    card.mkdir(parents=True)
    (card / "device").symlink_to("../../../devices/pci0000:00/" + BDF)
    return card / "device/current_compute_partition"


def writer(runs: Runs) -> AmdSmiWriter:
    return AmdSmiWriter(HostCommands(("chroot", "/host"), run=runs))


def test_a_write_is_one_amd_smi_set_naming_the_gpu_by_pci_address(attr: Path) -> None:
    runs = Runs((0, "GPU: 0\n    COMPUTE_PARTITION: Successfully set compute partition to CPX\n", ""))
    writer(runs)(attr, "CPX")
    assert runs.argv == [["chroot", "/host", "amd-smi", "set", "--gpu", BDF, "--compute-partition", "CPX"]]
    memory = attr.with_name("current_memory_partition")
    writer(runs := Runs((0, "", "")))(memory, "NPS4")
    assert runs.argv[0][2:] == ["amd-smi", "set", "--gpu", BDF, "--memory-partition", "NPS4"]


@pytest.mark.parametrize(
    ("result", "code", "words"),
    [
        (
            (16, "", f"GPU: {BDF}\n    COMPUTE_PARTITION: AMDSMI_STATUS_BUSY - Device busy"),
            errno.EBUSY,
            "BUSY",
        ),
        ((22, "", "COMPUTE_PARTITION: AMDSMI_STATUS_INVAL - Invalid parameters"), errno.EINVAL, "INVAL"),
        ((2, "", "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"), errno.EOPNOTSUPP, "NOT_SUPPORTED"),
        ((1, "", "Traceback (most recent call last): ..."), errno.EIO, "Traceback"),
        ((127, "", "chroot: failed to run command 'amd-smi'"), errno.ENOENT, "not installed on the host"),
        (subprocess.TimeoutExpired(["amd-smi"], 600), errno.EIO, "did not finish within 600s"),
        (FileNotFoundError(2, "No such file or directory", "chroot"), errno.EIO, "could not start"),
    ],
)
def test_each_failure_is_the_errno_the_driver_gives_and_names_the_command(
    attr: Path, result: Any, code: int, words: str
) -> None:
    runs = Runs(result)
    with pytest.raises(ToolWriteError) as raised:
        AmdSmiWriter(HostCommands(("chroot", "/host"), 600, runs))(attr, "CPX")
    assert raised.value.errno == code
    assert words in str(raised.value)
    assert raised.value.via == f"amd-smi set --gpu {BDF} --compute-partition CPX"


def test_an_attribute_outside_a_pci_device_or_not_a_partition_is_refused_before_running(
    tmp_path: Path,
) -> None:
    runs = Runs()
    lone = tmp_path / "card0" / "current_compute_partition"
    lone.parent.mkdir()
    with pytest.raises(ToolWriteError, match="is not a PCI device directory") as raised:
        writer(runs)(lone, "CPX")
    assert raised.value.errno == errno.ENODEV
    with pytest.raises(ToolWriteError, match="does not set power_dpm_force_performance_level"):
        writer(runs)(tmp_path / BDF / "power_dpm_force_performance_level", "auto")
    assert runs.argv == []


def test_pci_address_of_follows_the_device_link(attr: Path) -> None:
    assert pci_address_of(attr) == BDF


def test_errno_of_output_takes_the_first_known_status() -> None:
    assert errno_of_output("AMDSMI_STATUS_FOO then AMDSMI_STATUS_BUSY") == errno.EBUSY
    assert errno_of_output("nothing we know") == errno.EIO


def test_auto_takes_amd_smi_when_it_runs_on_the_host_and_sysfs_when_it_does_not() -> None:
    version = "AMDSMI Tool: 24.7.1 | AMDSMI Library version: 24.7.1 | ROCm version: 6.2.4\n"
    runs = Runs((0, version, ""))
    chosen, why = partition_writer("auto", HostCommands(("chroot", "/host"), run=runs))
    assert isinstance(chosen, AmdSmiWriter) and "ROCm version: 6.2.4" in why
    assert runs.argv == [["chroot", "/host", "amd-smi", "version"]]
    chosen, why = partition_writer(
        "auto", HostCommands(("chroot", "/host"), run=Runs((127, "", "not found")))
    )
    assert chosen is None and "amd-smi does not run on the host" in why
    missing_chroot = Runs(FileNotFoundError(2, "No such file or directory", "chroot"))
    assert partition_writer("auto", HostCommands(("chroot", "/host"), run=missing_chroot))[0] is None


def test_sysfs_never_runs_a_command_and_amd_smi_is_taken_even_when_absent() -> None:
    runs = Runs()
    host = HostCommands(("chroot", "/host"), run=runs)
    assert partition_writer("sysfs", host)[0] is None
    assert isinstance(partition_writer("amd-smi", host)[0], AmdSmiWriter)
    assert partition_writer("auto", None) == (
        None,
        "partition writes through the sysfs attributes (no host commands: --host-exec)",
    )
    assert runs.argv == []
    with pytest.raises(ValueError, match="unknown partition tool 'rocm-smi'"):
        partition_writer("rocm-smi", host)

"""Reloading amdgpu through a host-command prefix: the commands, and each failure named."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from gpuop_common.gpu.amd_reload import DriverReloader, DriverReloadError, host_exec_argv


class Runs:
    def __init__(self, *results: Any) -> None:
        self.results = list(results)
        self.argv: list[list[str]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.argv.append(list(argv))
        assert kwargs["capture_output"] and kwargs["text"] and kwargs["timeout"] == 300.0
        result = self.results.pop(0)
        if isinstance(result, BaseException):
            raise result
        return subprocess.CompletedProcess(argv, result[0], "", result[1])


def test_a_reload_unloads_then_loads_through_the_prefix() -> None:
    runs = Runs((0, ""), (0, ""))
    DriverReloader(("chroot", "/host"), run=runs).reload()
    host = ["chroot", "/host"]
    assert runs.argv == [[*host, "modprobe", "-r", "amdgpu"], [*host, "modprobe", "amdgpu"]]


def test_load_alone_is_one_command() -> None:
    runs = Runs((0, ""))
    DriverReloader(("chroot", "/host"), run=runs).load()
    assert runs.argv == [["chroot", "/host", "modprobe", "amdgpu"]]


@pytest.mark.parametrize(
    ("result", "message"),
    [
        ((1, "modprobe: FATAL: Module amdgpu is in use.\n"), "failed (exit 1): modprobe: FATAL: Module"),
        ((1, ""), "`modprobe -r amdgpu` failed (exit 1): no output"),
        (subprocess.TimeoutExpired(["modprobe"], 300), "`modprobe -r amdgpu` did not finish within 300s"),
        (FileNotFoundError(2, "No such file or directory", "chroot"), "`modprobe -r amdgpu` could not start"),
    ],
)
def test_a_failed_step_is_named_and_stops_the_reload(result: Any, message: str) -> None:
    runs = Runs(result)
    with pytest.raises(DriverReloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DriverReloader(("chroot", "/host"), run=runs).reload()
    assert len(runs.argv) == 1  # no load after a failed unload


def test_the_prefix_is_split_like_a_shell_and_names_the_host_root() -> None:
    assert host_exec_argv("chroot /host", "/") == ["chroot", "/host"]
    assert host_exec_argv("python -m fakes --root '{host_root}'", "/tmp/a b") == [
        "python", "-m", "fakes", "--root", "/tmp/a b"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="empty"):
        host_exec_argv("  ", "/")

"""gpuop_sim.cpuload: busy loops that really spin, and are gone afterwards however the block ends."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from gpuop_sim.cpuload import busy_loops, main


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_loops_spin_while_the_block_runs_and_are_killed_when_it_raises() -> None:
    with pytest.raises(RuntimeError), busy_loops(2) as pids:
        assert len(pids) == 2
        deadline = time.monotonic() + 60
        while not all(cpu_ticks(pid) > 0 for pid in pids):
            assert time.monotonic() < deadline, "busy loops used no CPU"
            time.sleep(0.1)
        raise RuntimeError("the block failed")
    assert not any(alive(pid) for pid in pids)


def test_main_runs_the_command_under_load_and_returns_its_status() -> None:
    assert main(["--loops", "1", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3


@pytest.mark.parametrize("argv", [["--loops", "-1", "--", "true"], ["--loops", "1"]])
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2

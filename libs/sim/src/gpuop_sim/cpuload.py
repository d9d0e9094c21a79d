"""Busy-loop processes that keep the CPUs loaded, for tests of what a slow, busy machine does.

    with busy_loops(2):
        ...  # every process started here competes with two spinning interpreters

Each loop is its own interpreter process (threads would share one GIL and load one core); they are
killed when the block ends, however it ends.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_SPIN = "while True: pass"


@contextmanager
def busy_loops(count: int) -> Iterator[list[int]]:
    """Run `count` spinning processes for the duration of the block; yields their pids."""
    if count < 0:
        raise ValueError(f"busy_loops: count must be 0 or more, not {count}")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            processes.append(subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL))
        yield [p.pid for p in processes]
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait(timeout=10)

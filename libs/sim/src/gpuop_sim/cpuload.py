"""Busy-loop processes that keep the CPUs loaded, for tests of what a slow, busy machine does.

    with busy_loops(2):
        ...  # every process started here competes with two spinning interpreters

    python -m gpuop_sim.cpuload --loops 2 -- .venv/bin/pytest -q tests/  # a command under that load

Each loop is its own interpreter process (threads would share one GIL and load one core); they are
killed when the block ends, however it ends.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator, Sequence
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command while `--loops` busy loops load the CPUs; exits with the command's status."""
    parser = argparse.ArgumentParser(prog="python -m gpuop_sim.cpuload", description=main.__doc__)
    parser.add_argument("--loops", type=int, default=2, help="busy-loop processes (default 2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if args.loops < 0:
        parser.error("--loops must be 0 or more")
    with busy_loops(args.loops):
        return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())

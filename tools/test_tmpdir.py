"""Print the temp directory `make test` should use, created fresh (the caller removes it).

The suite lays simulated GPU hosts: tens of thousands of small sysfs/KFD files per session, written
and removed again. On a virtual disk those metadata writes, not the CPU, set the pace (measured: one
MI300X CPX topology rewrite 0.7 s on disk, 0.2 s on tmpfs, and seconds when the disk is contended).
So the run goes to a tmpfs with room to spare when the machine has one; otherwise, or when the
user already set TMPDIR, the default temp directory is used and the tests are only slower.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

CANDIDATES = (Path("/dev/shm"),)
MIN_FREE_BYTES = 4 << 30  # a session peaks well under 1 GiB; keep a wide margin
MIN_MEM_AVAILABLE_BYTES = 6 << 30  # tmpfs pages are memory: leave the tests their RAM


def mem_available() -> int:
    """Bytes of MemAvailable; 0 where /proc/meminfo is missing (not Linux), which keeps the default."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def choose(environ: dict[str, str], candidates: tuple[Path, ...], available: int) -> Path | None:
    """The base to create the run's directory in, or None for the default temp directory."""
    if environ.get("TMPDIR") or available < MIN_MEM_AVAILABLE_BYTES:
        return None
    for base in candidates:
        try:
            stats = os.statvfs(base)
        except OSError:
            continue
        if stats.f_bavail * stats.f_frsize >= MIN_FREE_BYTES and os.access(base, os.W_OK):
            return base
    return None


def main() -> int:
    base = choose(dict(os.environ), CANDIDATES, mem_available())
    # Short: the simulator puts unix sockets deep under it (gpuop_sim.shortpaths).
    tmp = tempfile.mkdtemp(prefix="g-", dir=base)
    # A TMPDIR like /tmp (1777, not mkdtemp's 0700): process-mode pods run as non-root users and
    # must reach the simulator's state dirs under it.
    os.chmod(tmp, 0o1777)
    print(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())

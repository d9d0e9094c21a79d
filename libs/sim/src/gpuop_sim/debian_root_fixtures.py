"""The cached Debian root (`gpuop_sim.debian_root`), built in the background while other tests run.

A fresh clone builds it on first use: debootstrap from deb.debian.org, about a minute of mostly
download and unpacking, which a test waiting for it would spend with the machine idle. When the
session has collected a test that uses `debian_base_root`, the build starts as a subprocess as soon
as collection ends (`python -m gpuop_sim.debian_root`, under the cache's lock like any build), and
the fixture waits for it. A failed build fails every test that needs the root, with the build's own
message; without root, or with tools apt cannot install, those tests skip as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from gpuop_sim import debian_root

FIXTURE = "debian_base_root"


@dataclass
class _Build:
    process: subprocess.Popen[bytes]
    output: IO[bytes]

    def wait(self) -> tuple[int, str]:
        code = self.process.wait()
        self.output.seek(0)
        return code, self.output.read().decode(errors="replace")


_BUILD = pytest.StashKey[_Build]()


def _built(cache: Path) -> bool:
    return (cache / debian_root.ROOT_NAME / ".gpuop-complete").is_file()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the root when a collected test needs it and this machine can build it."""
    wanted = any(FIXTURE in getattr(item, "fixturenames", ()) for item in session.items)
    if not wanted or os.geteuid() != 0 or _built(debian_root.default_cache_dir()):
        return
    output = tempfile.TemporaryFile()  # noqa: SIM115 (closed in pytest_sessionfinish)
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuop_sim.debian_root"], stdout=output, stderr=subprocess.STDOUT
    )
    session.config.stash[_BUILD] = _Build(process, output)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session that ended first (-x, a deselected module) still lets the build finish: debootstrap
    mounts /proc inside the root it builds and must unmount it itself."""
    build = session.config.stash.get(_BUILD, None)
    if build is not None:
        build.wait()
        build.output.close()


@pytest.fixture(scope="session")
def debian_base_root(request: pytest.FixtureRequest) -> Path:
    """The debootstrapped base root (read-only to tests: `debian_root.fresh_root` copies it)."""
    build = request.config.stash.get(_BUILD, None)
    if build is not None:
        code, output = build.wait()
        if code != 0:
            raise RuntimeError(f"building the Debian root (python -m gpuop_sim.debian_root) failed: {output}")
    if os.geteuid() != 0:
        pytest.skip("a Debian root needs chroot: run as root")
    missing = debian_root.ensure_tools()
    if missing:
        pytest.skip(f"missing {', '.join(missing)} (apt-get install debootstrap dpkg-dev gpg)")
    return debian_root.cached_root()

"""Pytest fixtures for the real OCI tools; re-exported by gpuop_sim.pytest_plugin.

`cdi_judge`: a CdiJudge (podman + runc, a busybox image in a store of the test's own, an empty CDI
host view) for tests whose judge is a real runtime; skips, naming why, without root or podman.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuop_sim.oci import CdiHost, CdiJudge, Podman, ensure_tools

__all__ = ["cdi_judge", "skip_without_oci_tools"]


def skip_without_oci_tools() -> None:
    """Skip, naming why, where podman and runc cannot run: not root, or not installable."""
    if os.geteuid() != 0:
        pytest.skip("podman with runc needs root here (mount namespaces, mknod, cgroups)")
    missing = ensure_tools()
    if missing:
        pytest.skip(f"missing and not installable through apt: {', '.join(missing)}")


@pytest.fixture
def cdi_judge(tmp_path: Path) -> Iterator[CdiJudge]:
    skip_without_oci_tools()
    # podman refuses a run root over 50 characters; and the store must not sit under /dev (as
    # `make test`'s /dev/shm temp dir does): the judge lays an overlay over /dev, which hides
    # the /dev/shm mount and with it the imported image.
    store = Path(tempfile.mkdtemp(prefix="gp-", dir="/var/tmp"))
    try:
        podman = Podman(store)
        image = podman.import_busybox(tmp_path)
        yield CdiJudge(podman, image, CdiHost(tmp_path / "cdi-host"))
    finally:
        shutil.rmtree(store, ignore_errors=True)

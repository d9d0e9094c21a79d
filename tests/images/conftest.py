"""Tests that run the built service images (`make test-images`).

A missing image is a failure, not a skip: `make images` comes first, so an image that is not there
means the build did not produce it, and a skipped run would pass while checking nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REBUILD = "run `make images` (python tools/images.py) first"


def image_reference(service: str) -> str:
    """The reference `make images` tags a service's image with (the charts' repository)."""
    return f"gpuop/gpuop-{service}:{(ROOT / 'VERSION').read_text().strip()}"


@pytest.fixture(scope="session")
def require_image() -> Callable[[str], str]:
    """`require_image(service)` -> the built image's reference, or the test fails naming `make images`."""
    if os.geteuid() != 0:
        pytest.fail("tests/images need root (podman, runc and vfs storage, as `make images`)", pytrace=False)
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            pytest.fail(f"tests/images need {tool}: {REBUILD}", pytrace=False)

    def require(service: str) -> str:
        reference = image_reference(service)
        done = subprocess.run(
            ["podman", "--storage-driver", "vfs", "image", "exists", reference], check=False, timeout=300
        )
        if done.returncode != 0:
            pytest.fail(f"image {reference} is not in local container storage: {REBUILD}", pytrace=False)
        return reference

    return require

"""Tests that run the built service images (`make test-images`; `make test` leaves this folder out).

A missing image is a failure, not a skip: CI runs `make images` first, so an image that is not
there means the build did not produce it, and a skipped run would pass while checking nothing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pytest

from tests.images import imagecheck


@pytest.fixture(scope="session")
def require_image() -> Callable[[str], str]:
    """`require_image(service)` -> the built image's reference, or the test fails naming `make images`."""
    if os.geteuid() != 0:
        pytest.fail(
            "tests/images need root (podman with runc and vfs storage, as `make images`)", pytrace=False
        )
    for tool in ("podman", "runc", "skopeo"):
        if shutil.which(tool) is None:
            pytest.fail(f"tests/images need {tool}: {imagecheck.REBUILD} installs it", pytrace=False)

    def require(service: str) -> str:
        missing = imagecheck.missing_images([service])
        if missing:
            pytest.fail(
                f"image {missing[0]} is not in local container storage: {imagecheck.REBUILD}", pytrace=False
            )
        return imagecheck.reference(service)

    return require

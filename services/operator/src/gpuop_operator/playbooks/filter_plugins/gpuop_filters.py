"""Jinja filters for the gpuop playbooks; the logic lives in gpuop_operator.hostfacts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuop_operator.hostfacts import host_platform, installed_packages, missing_packages


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "gpuop_host_platform": host_platform,
            "gpuop_missing_packages": missing_packages,
            "gpuop_installed_packages": installed_packages,
        }

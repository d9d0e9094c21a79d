"""Jinja filters for the gpuop playbooks; the logic lives in gpuop_operator.hostfacts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuop_operator.hostfacts import (
    host_platform,
    index_version,
    installed_matches,
    installed_packages,
    installed_version_of,
    missing_packages,
    packages_to_install,
    upstream_version,
    version_mismatches,
)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "gpuop_host_platform": host_platform,
            "gpuop_missing_packages": missing_packages,
            "gpuop_installed_packages": installed_packages,
            "gpuop_packages_to_install": packages_to_install,
            "gpuop_version_mismatches": version_mismatches,
            "gpuop_index_version": index_version,
            "gpuop_upstream_version": upstream_version,
            "gpuop_installed_version": installed_version_of,
            "gpuop_version_matches": installed_matches,
        }

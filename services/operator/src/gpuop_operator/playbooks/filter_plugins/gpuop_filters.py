"""Jinja filters for the gpuop playbooks; the logic lives in gpuop_operator.hostfacts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuop_operator.hostfacts import (
    host_platform,
    installed_matches,
    installed_packages,
    installed_version_of,
    madison_version,
    missing_packages,
    packages_to_install,
    repoquery_version,
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
            "gpuop_madison_version": madison_version,
            "gpuop_repoquery_version": repoquery_version,
            "gpuop_upstream_version": upstream_version,
            "gpuop_installed_version": installed_version_of,
            "gpuop_version_matches": installed_matches,
        }

"""The driver version an empty `spec.driver.version` installs, per vendor.

The playbooks' own `vars/defaults.yml` (`default_driver_versions`) decides what an empty version
installs; the operator reads that same file (package data) instead of keeping a copy of the
numbers. It labels and compares the concrete version, so writing the default out later in the
spec is no change at all (no `upgrade-required`, no Job).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

import yaml
from gpuop_common.config.driver import DriverConfig
from pydantic import TypeAdapter

_VERSIONS = TypeAdapter(dict[str, str])


@cache
def default_driver_versions() -> dict[str, str]:
    """vendor -> version, from the shipped playbooks' vars/defaults.yml."""
    text = (files("gpuop_operator") / "playbooks" / "vars" / "defaults.yml").read_text(encoding="utf-8")
    return _VERSIONS.validate_python(yaml.safe_load(text)["default_driver_versions"])


def resolved_version(driver: DriverConfig, vendor: str) -> str:
    """The version a driver Job for `vendor` installs: the spec's, else the playbooks' default."""
    return driver.version or default_driver_versions().get(vendor, "")


# What operators before the concrete-version labels wrote for an empty `spec.driver.version`.
LEGACY_DEFAULT = "default"


def concrete_label(label: str, vendor: str) -> str:
    """A node's version label as a concrete version: the legacy `default` stands for the vendor's
    default (what the playbook installed for an empty version), anything else is itself."""
    if label == LEGACY_DEFAULT:
        return default_driver_versions().get(vendor, "") or label
    return label

"""What the driver playbooks need to know about a host's OS, from its `/etc/os-release` alone.

Pure functions; the playbooks call `host_platform` through the `gpuop_host_platform` filter so that
the decision "supported or not" is made (and tested) in one place, before any task changes the host.
"""

from __future__ import annotations

import shlex
from typing import Literal, TypedDict

Family = Literal["debian", "rhel", ""]

# Supported distributions: ID -> (family, versions). RHEL-family entries name the major version.
SUPPORTED: dict[str, tuple[Family, tuple[str, ...]]] = {
    "ubuntu": ("debian", ("22.04", "24.04")),
    "debian": ("debian", ("12",)),
    "rhel": ("rhel", ("9",)),
    "rocky": ("rhel", ("9",)),
    "almalinux": ("rhel", ("9",)),
}


class HostPlatform(TypedDict):
    id: str
    version: str  # VERSION_ID as written, e.g. "22.04" or "9.4"
    major: str
    family: Family
    codename: str  # VERSION_CODENAME (Ubuntu, Debian), "" elsewhere
    supported: bool
    message: str  # why not supported, "" when it is


def parse_os_release(text: str) -> dict[str, str]:
    """`KEY=value` lines of os-release(5), shell quoting removed; comments and junk lines skipped."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.strip().partition("=")
        if not sep or not key or key.startswith("#") or not key.replace("_", "").isalnum():
            continue
        try:
            words = shlex.split(raw)
        except ValueError:
            words = [raw.strip("\"'")]
        values[key] = words[0] if words else ""
    return values


def host_platform(os_release: str) -> HostPlatform:
    """The platform a playbook installs for; `supported` False with `Unsupported OS <id> <version>`."""
    values = parse_os_release(os_release)
    os_id = values.get("ID", "").lower() or "unknown"
    version = values.get("VERSION_ID", "") or "unknown"
    major = version.split(".")[0]
    family, versions = SUPPORTED.get(os_id, ("", ()))
    supported = version in versions or (family == "rhel" and major in versions)
    return HostPlatform(
        id=os_id,
        version=version,
        major=major,
        family=family if supported else "",
        codename=values.get("VERSION_CODENAME", ""),
        supported=supported,
        message="" if supported else f"Unsupported OS {os_id} {version}",
    )


def package_installed(family: str, rc: int, stdout: str) -> bool:
    """Read one package query: `dpkg-query -W -f=${Status} P` (Debian) or `rpm -q P` (RHEL)."""
    if rc != 0:
        return False
    return family != "debian" or "ok installed" in stdout


def missing_packages(results: list[dict[str, object]], family: str) -> list[str]:
    """The `item`s of a looped package query (registered results) that are not installed."""
    return [
        str(r["item"])
        for r in results
        if not package_installed(family, int(str(r.get("rc", 1))), str(r.get("stdout", "")))
    ]


def installed_packages(results: list[dict[str, object]], family: str) -> list[str]:
    missing = set(missing_packages(results, family))
    return [str(r["item"]) for r in results if str(r["item"]) not in missing]

"""What the driver playbooks need to know about a host's OS, from its `/etc/os-release` alone.

Pure functions; the playbooks call `host_platform` through the `gpuop_host_platform` filter so that
the decision "supported or not" is made (and tested) in one place, before any task changes the host.
"""

from __future__ import annotations

import re
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


def installed_version(family: str, rc: int, stdout: str) -> str | None:
    """Read one package query: `dpkg-query -W -f='${Status} ${Version}' P` (Debian) or
    `rpm -q --qf '%{VERSION}-%{RELEASE}' P` (RHEL); None when the package is not installed."""
    if rc != 0:
        return None
    if family == "debian":
        status, _, version = stdout.strip().rpartition(" ")
        return version if status.endswith("ok installed") else None
    return stdout.strip() or None


def installed_version_of(result: dict[str, object], family: str) -> str:
    """The version one registered package query found installed, "" when none."""
    return installed_version(family, int(str(result.get("rc", 1))), str(result.get("stdout", ""))) or ""


def version_matches(family: str, installed: str | None, wanted: str) -> bool:
    """`wanted` empty: any version. dnf's `name-VERSION` takes any release of VERSION, so on RHEL
    `570.133.20` matches `570.133.20-1.el9`; apt's `name=VERSION` is exact."""
    if installed is None:
        return False
    if not wanted or installed == wanted:
        return True
    return family != "debian" and installed.startswith(f"{wanted}-")


def _query(result: dict[str, object]) -> tuple[str, str, int, str]:
    item = result.get("item")
    spec = item if isinstance(item, dict) else {"name": item}
    return (
        str(spec["name"]),
        str(spec.get("version") or ""),
        int(str(result.get("rc", 1))),
        str(result.get("stdout", "")),
    )


def packages_to_install(results: list[dict[str, object]], family: str) -> list[str]:
    """Install arguments for the queried packages (items `{name, version}` or names) that are missing or
    at another version: `name=VERSION` for apt, `name-VERSION` for dnf, the bare name when any will do."""
    specs = []
    for result in results:
        name, wanted, rc, stdout = _query(result)
        if not version_matches(family, installed_version(family, rc, stdout), wanted):
            specs.append(f"{name}{'=' if family == 'debian' else '-'}{wanted}" if wanted else name)
    return specs


def installed_matches(installed: str, family: str, wanted: str) -> bool:
    """Filter form of `version_matches` for an installed version read before ("" = not installed)."""
    return version_matches(family, installed or None, wanted)


def version_mismatches(results: list[dict[str, object]], family: str) -> list[str]:
    """What is wrong after an install, one line per package not at its wanted version."""
    problems = []
    for result in results:
        name, wanted, rc, stdout = _query(result)
        found = installed_version(family, rc, stdout)
        if not version_matches(family, found, wanted):
            problems.append(
                f"{name} is {'at ' + found if found else 'not installed'}, wanted {wanted or 'any version'}"
            )
    return problems


def missing_packages(results: list[dict[str, object]], family: str) -> list[str]:
    """The names of a looped package query (registered results) that are not installed."""
    return [name for name, _, rc, out in map(_query, results) if installed_version(family, rc, out) is None]


def installed_packages(results: list[dict[str, object]], family: str) -> list[str]:
    missing = set(missing_packages(results, family))
    return [name for name, *_ in map(_query, results) if name not in missing]


def _dpkg_part(text: str) -> list[tuple[int, int]]:
    """dpkg's ordering of an upstream version or revision: letters before non-letters, `~` first,
    digit runs numerically."""
    key: list[tuple[int, int]] = []
    for chunk in re.findall(r"\d+|\D+", text):
        if chunk.isdigit():
            key.append((1, int(chunk)))
        else:
            key += [(0, -1 if c == "~" else (ord(c) if c.isalpha() else ord(c) + 256)) for c in chunk]
            key.append((0, 0))
    return [*key, (0, 0)]  # the end sorts after `~`, before anything else


def dpkg_version_key(version: str) -> tuple[int, list[tuple[int, int]], list[tuple[int, int]]]:
    epoch, _, rest = version.rpartition(":")
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), _dpkg_part(upstream), _dpkg_part(revision)


def upstream_version(version: str) -> str:
    """`1:570.133.20-1` -> `570.133.20` (no epoch, no Debian revision)."""
    rest = version.rpartition(":")[2]
    return rest.rpartition("-")[0] if "-" in rest else rest


def _highest(versions: list[str], upstream: str) -> str:
    """The highest of `versions` (dpkg ordering) whose upstream part is `upstream` (any when empty)."""
    found = [v for v in versions if not upstream or upstream_version(v) == upstream or v == upstream]
    return max(found, key=dpkg_version_key, default="")


def repoquery_version(lines: str, upstream: str = "") -> str:
    """The version to install from `dnf repoquery --queryformat '%{version}-%{release}'` lines (one
    repository enabled): the highest, with `upstream` set only those of that upstream version; ""
    when none."""
    return _highest([line.strip() for line in lines.splitlines() if line.strip()], upstream)


def apt_source_uri(repo: str) -> str:
    """A `deb` line's URI as apt prints it (`apt-get update`, `apt-cache madison`): no credentials,
    no trailing slash, `file:///x` as `file:/x`."""
    uri = re.sub(r"^([a-z0-9+.-]+://)[^/@]*@", r"\1", repo.strip()).rstrip("/")
    return re.sub(r"^file://(?=/)", "file:", uri)


def madison_version(madison: str, package: str, repo: str, suite: str, upstream: str = "") -> str:
    """The version of `package` to install from `apt-cache madison <package>` lines
    (`  amdgpu-dkms | 1:6.10.5.60304-2125197.22.04 | https://repo.radeon.com/amdgpu/6.3.4/ubuntu
    jammy/main amd64 Packages`), counting only the index of `deb <repo> <suite> ...`: a flat
    repository (`suite` "/") is described as `<uri>  Packages`. AMD's per-release repository holds the
    release's amdgpu-dkms, whose numbering is not the ROCm release's, so another amdgpu release also
    configured on the host must not count; NVIDIA's packages carry the driver version as their
    upstream version (`upstream` "570.133.20" -> `570.133.20-0ubuntu1`). The highest, "" when none."""
    uri, dist = apt_source_uri(repo), "" if suite.strip() == "/" else suite.strip()
    versions = []
    for line in madison.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) != 3 or fields[0] != package:
            continue
        source_uri, _, rest = fields[2].partition(" ")
        if source_uri == uri and rest.split(" ")[0].partition("/")[0] == dist:
            versions.append(fields[1])
    return _highest(versions, upstream)

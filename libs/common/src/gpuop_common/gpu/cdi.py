"""CDI (Container Device Interface) specs for GPU device nodes: the model, the env vars, the writer.

Shared by the device plugin (one spec per vendor kind) and the DRA driver (one spec per claim). The
model follows the CDI specification (github.com/cncf-tags/container-device-interface, SPEC.md) for
the fields gpuop writes: it rejects what a CDI-enabled runtime (containerd, CRI-O) would refuse to
load — a malformed kind or device name, a relative device path, an env entry without `=` — so a
bad spec fails in our tests instead of at container start.

`cdiVersion` is the lowest version whose features the spec uses (`required_version`), by the CDI
library's own rule (`specs-go/version.go`, `MinimumRequiredVersion`): runtimes in service carry
older CDI libraries (podman 4.3 and containerd 1.7 know 0.5.0 at most) and refuse a version they do
not know, even for a spec that uses nothing newer.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuop_common.gpu.models import Vendor

log = logging.getLogger(__name__)

# The spec versions the CDI library knows, oldest first; it refuses any other.
KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0")
EARLIEST_VERSION = "0.3.0"  # the library's floor: what a spec using no later feature says
DEFAULT_CDI_DIR = Path("/var/run/cdi")
# What ROCm (ROCR/HIP) and the NVIDIA container toolkit read to pick the visible devices.
VISIBLE_DEVICES_ENV: dict[Vendor, tuple[str, ...]] = {
    Vendor.AMD: ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"),
    Vendor.NVIDIA: ("NVIDIA_VISIBLE_DEVICES",),
}
# CDI name grammar: kind `<vendor>/<class>`, vendor a dotted name, device names alphanumeric with _.:-.
_VENDOR = r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?"
_CLASS = r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?"
KIND_PATTERN = rf"^{_VENDOR}/{_CLASS}$"
DEVICE_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$"


class CdiSpecError(ValueError):
    """A CDI spec that a runtime would refuse to load; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CdiDeviceNode(_Strict):
    path: str
    hostPath: str | None = None  # noqa: N815 - the CDI field names
    type: str | None = Field(None, pattern=r"^[bcup]$")
    major: int | None = Field(None, ge=0)
    minor: int | None = Field(None, ge=0)
    fileMode: int | None = Field(None, ge=0)  # noqa: N815
    permissions: str | None = Field(None, pattern=r"^[rwm]{1,3}$")
    uid: int | None = Field(None, ge=0)
    gid: int | None = Field(None, ge=0)

    @field_validator("path", "hostPath")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"device node path {value!r} is not absolute")
        return value


class CdiContainerEdits(_Strict):
    env: tuple[str, ...] = ()
    deviceNodes: tuple[CdiDeviceNode, ...] = ()  # noqa: N815

    @field_validator("env")
    @classmethod
    def _assignments(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            if "=" not in entry or entry.startswith("="):
                raise ValueError(f"env entry {entry!r} is not NAME=value")
        return value


class CdiDevice(_Strict):
    name: str = Field(pattern=DEVICE_NAME_PATTERN)
    annotations: dict[str, str] = Field(default_factory=dict)
    containerEdits: CdiContainerEdits  # noqa: N815


class CdiSpec(_Strict):
    cdiVersion: str = Field(pattern=r"^\d+\.\d+\.\d+$")  # noqa: N815
    kind: str = Field(pattern=KIND_PATTERN)
    annotations: dict[str, str] = Field(default_factory=dict)
    devices: tuple[CdiDevice, ...] = Field(min_length=1)
    containerEdits: CdiContainerEdits | None = None  # noqa: N815

    @field_validator("devices")
    @classmethod
    def _unique_names(cls, value: tuple[CdiDevice, ...]) -> tuple[CdiDevice, ...]:
        names = [device.name for device in value]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"device names appear twice: {', '.join(duplicates)}")
        return value

    @model_validator(mode="after")
    def _version_covers_features(self) -> CdiSpec:
        # The library's ValidateVersion: a known version, and no lower than the features need.
        if self.cdiVersion not in KNOWN_VERSIONS:
            raise ValueError(
                f"cdiVersion {self.cdiVersion!r} is not a CDI version ({', '.join(KNOWN_VERSIONS)})"
            )
        needed = required_version(self)
        if _version_key(needed) > _version_key(self.cdiVersion):
            raise ValueError(
                f"cdiVersion {self.cdiVersion} is lower than {needed}, which the spec's features need"
            )
        return self


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _needs_v050(spec: CdiSpec) -> bool:
    # 0.5.0 allowed device names that start with a digit (PCI addresses, claim uids) and `hostPath`.
    if any(not device.name[0].isalpha() for device in spec.devices):
        return True
    edits = [device.containerEdits for device in spec.devices]
    edits += [spec.containerEdits] if spec.containerEdits else []
    return any(node.hostPath for edit in edits for node in edit.deviceNodes)


def _needs_v060(spec: CdiSpec) -> bool:
    # 0.6.0 allowed annotations (spec or device) and dots in the kind's class.
    if spec.annotations or any(device.annotations for device in spec.devices):
        return True
    return "." in spec.kind.partition("/")[2]


def required_version(spec: CdiSpec) -> str:
    """The lowest CDI version whose features the spec uses (the library's MinimumRequiredVersion).

    The 0.4.0 rule (mount `type`) and the 0.7.0 rules (`intelRdt`, `additionalGIDs`) concern fields
    the model does not allow, so they cannot apply.
    """
    if _needs_v060(spec):
        return "0.6.0"
    if _needs_v050(spec):
        return "0.5.0"
    return EARLIEST_VERSION


def versioned(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with `cdiVersion` set to the lowest version its features need.

    Raises CdiSpecError when the spec is invalid apart from its version.
    """
    draft = validate_spec({**spec, "cdiVersion": KNOWN_VERSIONS[-1]})
    return {**spec, "cdiVersion": required_version(draft)}


def validate_spec(spec: dict[str, Any]) -> CdiSpec:
    """The spec as a CdiSpec, or CdiSpecError naming every bad field."""
    try:
        return CdiSpec.model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'spec'}: {error['msg']}" for error in exc.errors()
        )
        raise CdiSpecError(f"invalid CDI spec: {problems}") from None


def qualified_name(kind: str, device: str) -> str:
    """The fully qualified CDI device name `vendor.com/class=device` a runtime resolves."""
    return f"{kind}={device}"


def device_node_edits(paths: Iterable[str]) -> list[dict[str, str]]:
    """`deviceNodes` entries for these paths (each once, in order), read-write."""
    return [{"path": path, "permissions": "rw"} for path in dict.fromkeys(paths)]


def visible_devices_env(vendor: Vendor, ids: Sequence[str]) -> dict[str, str]:
    """The vendor's visibility variables naming these ids (each once, in order); {} for none."""
    unique = list(dict.fromkeys(ids))
    if not unique:
        return {}
    return {name: ",".join(unique) for name in VISIBLE_DEVICES_ENV[vendor]}


def spec_text(spec: dict[str, Any]) -> str:
    return json.dumps(spec, indent=2, sort_keys=True) + "\n"


def write_spec_file(path: Path, spec: dict[str, Any]) -> bool:
    """Write the spec atomically (readers never see half a file) when its text changed.

    Returns True when the file changed; OSError propagates (callers decide whether that is fatal).
    """
    text = spec_text(spec)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".gpuop-cdi-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True

"""Reading sysfs-style text files under a host root, and the pure parsers for their formats.

All readers raise SysfsReadError (with a FieldErrorKind value) so callers decide whether a failure is
a skipped field, a per-field telemetry error or a health reason.
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from gpuop_common.gpu.errors import SysfsReadError
from gpuop_common.gpu.models import FieldError, FieldErrorKind

log = logging.getLogger(__name__)

T = TypeVar("T")

_DPM_LINE = re.compile(r"^(\S+):\s*(\d+)Mhz\s*(\*)?$")
_LINK_SPEED = re.compile(r"^([0-9.]+)\s*GT/s")
_RAS_LINE = re.compile(r"^(ue|ce|de):\s*(\d+)$")
_SPEED_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def read_text(path: Path) -> str:
    """The stripped content of a sysfs file; missing, unreadable and empty files raise."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise SysfsReadError(str(path), FieldErrorKind.MISSING) from exc
    except NotADirectoryError as exc:
        raise SysfsReadError(str(path), FieldErrorKind.MISSING) from exc
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        raise SysfsReadError(str(path), FieldErrorKind.UNREADABLE, name) from exc
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise SysfsReadError(str(path), FieldErrorKind.INVALID, "not UTF-8 text") from exc
    if not text:
        raise SysfsReadError(str(path), FieldErrorKind.INVALID, "empty")
    return text


def list_dir(path: Path) -> list[Path]:
    """Entries of a sysfs dir, sorted; [] (with a warning) when it is absent or unreadable."""
    try:
        return sorted(path.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("cannot list %s: %s", path, exc)
        return []


def parse_int(text: str) -> int:
    return int(text, 10)


def parse_hex(text: str) -> int:
    """`0x1002` style PCI ids (sysfs prints them with the prefix)."""
    return int(text, 16)


def parse_properties(text: str) -> dict[str, int]:
    """KFD `properties` files: `<key> <decimal>` lines. Lines that do not fit are an error."""
    result: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"line {number}: expected '<key> <value>', got {line!r}")
        result[parts[0]] = int(parts[1], 10)
    if not result:
        raise ValueError("no properties")
    return result


@dataclass(frozen=True, slots=True)
class DpmLevels:
    levels_mhz: tuple[int, ...]
    current_mhz: int | None


def parse_dpm(text: str) -> DpmLevels:
    """`pp_dpm_*` files: `<idx>: <MHz>Mhz[ *]`; the starred line is current, `S:` is deep sleep."""
    if text.strip() == "unavailable":
        raise ValueError("reads 'unavailable' (RAS fatal error)")
    levels: list[int] = []
    current: int | None = None
    for line in text.splitlines():
        match = _DPM_LINE.match(line.strip())
        if match is None:
            raise ValueError(f"unexpected line {line!r}")
        label, mhz, star = match.group(1), int(match.group(2)), match.group(3)
        if star:
            current = mhz
        if label != "S":
            levels.append(mhz)
    if not levels and current is None:
        raise ValueError("no clock levels")
    return DpmLevels(tuple(levels), current)


def parse_link_speed(text: str) -> tuple[float, int | None]:
    """`32.0 GT/s PCIe` -> (32.0, 5); older kernels omit ` PCIe`."""
    match = _LINK_SPEED.match(text)
    if match is None:
        raise ValueError(f"not a link speed: {text!r}")
    speed = float(match.group(1))
    return speed, _SPEED_TO_GEN.get(speed)


def parse_pcie_bw(text: str) -> tuple[int, int, int]:
    """`pcie_bw`: `<received msgs> <sent msgs> <max payload bytes>`."""
    parts = text.split()
    if len(parts) != 3:
        raise ValueError(f"expected three numbers, got {text!r}")
    received, sent, mps = (int(p, 10) for p in parts)
    return received, sent, mps


def parse_ras_count(text: str) -> dict[str, int]:
    """`ras/<block>_err_count`: `ue: <n>`, `ce: <n>` and on newer kernels `de: <n>`."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        match = _RAS_LINE.match(line.strip())
        if match is None:
            raise ValueError(f"unexpected line {line!r}")
        counts[match.group(1)] = int(match.group(2))
    if "ue" not in counts or "ce" not in counts:
        raise ValueError("missing ue/ce lines")
    return counts


def parse_mode_list(text: str) -> tuple[str, ...]:
    """`available_*_partition`: `SPX, DPX, QPX, CPX`; `Not supported` means none."""
    if text.strip().lower() == "not supported":
        return ()
    return tuple(part.strip().upper() for part in text.split(",") if part.strip())


def read_parsed(path: Path, parser: Callable[[str], T]) -> T:
    """read_text + parser, turning a parser failure into an INVALID SysfsReadError."""
    text = read_text(path)
    try:
        return parser(text)
    except ValueError as exc:
        raise SysfsReadError(str(path), FieldErrorKind.INVALID, str(exc)) from exc


def read_optional(path: Path, parser: Callable[[str], T], *, quiet_missing: bool = True) -> T | None:
    """For inventory fields: `None` when the file is absent, a warning naming the file when bad."""
    try:
        return read_parsed(path, parser)
    except SysfsReadError as exc:
        if exc.kind == FieldErrorKind.MISSING and quiet_missing:
            log.debug("optional sysfs file absent: %s", path)
        else:
            log.warning("ignoring sysfs file %s: %s %s", path, exc.kind, exc.detail)
        return None


@dataclass(slots=True)
class FieldReader:
    """Collects per-field errors for one GPU while telemetry reads file after file."""

    gpu_id: str
    errors: list[FieldError] = field(default_factory=list)

    def read(self, field_name: str, path: Path, parser: Callable[[str], T]) -> T | None:
        try:
            return read_parsed(path, parser)
        except SysfsReadError as exc:
            self.fail(field_name, FieldErrorKind(exc.kind), str(path), exc.detail)
            return None

    def fail(self, field_name: str, kind: FieldErrorKind, source: str, detail: str = "") -> None:
        if kind != FieldErrorKind.MISSING:
            log.warning("GPU %s: %s unreadable from %s: %s %s", self.gpu_id, field_name, source, kind, detail)
        self.errors.append(FieldError(self.gpu_id, field_name, kind, source, detail))

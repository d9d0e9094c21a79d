"""Container log files as a CRI runtime writes them, and where the simulated kubelet keeps them.

A real kubelet's runtime (containerd, CRI-O) writes each container instance's output to
`/var/log/pods/<ns>_<pod>_<uid>/<container>/<restartCount>.log`, one record per line:

    2026-12-03T10:28:32.123456789Z stdout F a whole line
    2026-12-03T10:28:32.123456790Z stderr P the first part of a longer line

`F` ends a line, `P` is a piece of one (a long line split, or output that ended without a newline).
The kubelet parses these records to serve `pods/log` with timestamps, `sinceTime` and `tailLines`.
The simulated kubelet writes the same format under `<pods_root>/<node>/<ns>_<pod>_<uid8>/logs/`, and
the simulated API server reads it back: both sides use the functions here.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

STREAMS = ("stdout", "stderr")
FULL, PARTIAL = "F", "P"
# Longer lines are split into partial records, like containerd's 16 KiB default.
MAX_RECORD_BYTES = 16 * 1024

_TIMESTAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$")
_INSTANCE = re.compile(r"^(\d+)\.log$")


@dataclass(frozen=True)
class LogRecord:
    """One record of a CRI log file; `content` carries its newline unless the record is partial."""

    timestamp_ns: int
    stream: str
    content: bytes


def format_timestamp(ns: int) -> str:
    """RFC 3339 in UTC with exactly nine fraction digits (the kubelet's `--timestamps` layout)."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    whole = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{fraction:09d}Z"


def parse_timestamp(text: str) -> int:
    """Nanoseconds since the epoch from RFC 3339 (any fraction length, `Z` or an offset).

    ValueError names the text when it is not RFC 3339."""
    match = _TIMESTAMP.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not an RFC 3339 timestamp")
    whole, fraction, zone = match.groups()
    offset = "+00:00" if zone == "Z" else zone
    moment = dt.datetime.fromisoformat(whole + offset)
    nanos = int((fraction or "").ljust(9, "0"))
    return int(moment.timestamp()) * 1_000_000_000 + nanos


def format_record(timestamp_ns: int, stream: str, content: bytes) -> bytes:
    """The file line for `content`: `F` when it ends a line, `P` otherwise (the file line still ends)."""
    if content.endswith(b"\n"):
        return f"{format_timestamp(timestamp_ns)} {stream} {FULL} ".encode() + content
    return f"{format_timestamp(timestamp_ns)} {stream} {PARTIAL} ".encode() + content + b"\n"


def parse_record(line: bytes) -> LogRecord | None:
    """A file line back as a record; None for a line that is not CRI format (skipped, as the kubelet does)."""
    parts = line.split(b" ", 3)
    if len(parts) < 4 or parts[1].decode(errors="replace") not in STREAMS:
        return None
    try:
        timestamp = parse_timestamp(parts[0].decode())
    except (UnicodeDecodeError, ValueError):
        return None
    content = parts[3]
    # Tags may carry more after a colon; only the first says whether the line continues.
    if parts[2].split(b":", 1)[0] == PARTIAL.encode() and content.endswith(b"\n"):
        content = content[:-1]
    return LogRecord(timestamp, parts[1].decode(), content)


def parse_records(data: bytes) -> tuple[list[LogRecord], bytes]:
    """Records from complete lines of `data`, and the unfinished rest (still being written)."""
    lines = data.split(b"\n")
    rest = lines.pop()
    records = [r for r in (parse_record(line + b"\n") for line in lines) if r is not None]
    return records, rest


def read_content(path: Path) -> str:
    """Everything one instance wrote, as text (what `SimCluster.pod_log` shows)."""
    records, _ = parse_records(path.read_bytes())
    return b"".join(r.content for r in records).decode(errors="replace")


# -- layout ----------------------------------------------------------------------------------------
def pod_dir_name(namespace: str, name: str, uid: str) -> str:
    """The per-pod folder under a node's pods dir (short uid: unix socket paths stay under 108 bytes)."""
    return f"{namespace}_{name}_{uid[:8]}"


def instance_log(container_dir: Path, restart_count: int) -> Path:
    """The file of the container instance started after `restart_count` restarts."""
    return container_dir / f"{restart_count}.log"


def instances(container_dir: Path) -> list[int]:
    """Restart counts with a log file in `container_dir`, oldest first."""
    if not container_dir.is_dir():
        return []
    found = (_INSTANCE.match(p.name) for p in container_dir.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


@dataclass(frozen=True)
class PodLogFiles:
    """Where the simulated kubelets of one cluster keep container logs: `<root>/<node>/<pod dir>/logs/`."""

    root: Path

    def container_dir(self, node: str, namespace: str, name: str, uid: str, container: str) -> Path:
        return self.root / node / pod_dir_name(namespace, name, uid) / "logs" / container

"""Container termination messages, as the kubelet reads them after a container exits.

Each container's `terminationMessagePath` (default `/dev/termination-log`) is a private file of that
container on the host, mounted at that path (so a container arg naming the path is rewritten to it,
like any mount). After the container exits the kubelet reads at most 4096 bytes of it into
`state.terminated.message`; with `terminationMessagePolicy: FallbackToLogsOnError`, an empty file and
a non-zero exit code give the tail of the container's log instead (at most 80 lines, 2048 bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_PATH = "/dev/termination-log"
MAX_MESSAGE_BYTES = 4096
FALLBACK_LINES = 80
FALLBACK_BYTES = 2048
POLICIES = ("File", "FallbackToLogsOnError")


class TerminationSpecError(ValueError):
    """A termination-message field the API server would refuse; the message names the field."""


def message_path(container: Mapping[str, Any], where: str) -> str:
    """The container's terminationMessagePath (validated: absolute), default /dev/termination-log."""
    path = str(container.get("terminationMessagePath") or DEFAULT_PATH)
    if not path.startswith("/"):
        raise TerminationSpecError(f"{where}.terminationMessagePath: must be an absolute path, not {path!r}")
    return path


def message_policy(container: Mapping[str, Any], where: str) -> str:
    policy = str(container.get("terminationMessagePolicy") or "File")
    if policy not in POLICIES:
        raise TerminationSpecError(
            f"{where}.terminationMessagePolicy: must be one of {', '.join(POLICIES)}, not {policy!r}"
        )
    return policy


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def log_tail(log_text: str, max_lines: int = FALLBACK_LINES, max_bytes: int = FALLBACK_BYTES) -> str:
    """The last `max_lines` lines of a log, cut to its last `max_bytes` bytes."""
    lines = log_text.splitlines(keepends=True)[-max_lines:]
    data = "".join(lines).encode()
    return _decode(data[-max_bytes:])


def read_message(file: Path, policy: str, exit_code: int, log_text: str) -> str:
    """`state.terminated.message` for a container that exited with `exit_code`."""
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_MESSAGE_BYTES)
    except OSError:
        data = b""
    if data or policy != "FallbackToLogsOnError" or exit_code == 0:
        return _decode(data)
    return log_tail(log_text)

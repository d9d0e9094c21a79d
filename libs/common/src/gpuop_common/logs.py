"""JSON logging shared by every gpuop service: one JSON object per line on stderr.

Each line has `time` (ISO 8601, UTC), `level`, `logger`, `message`, `service`, `node` and whatever the
caller passed as `extra={...}`; exceptions add `exc_info`. Log collectors parse it without a regex.
"""

from __future__ import annotations

import logging
import sys
from typing import IO

from pythonjsonlogger.json import JsonFormatter

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

# Marks the handler this module installed, so a second configure_logging() replaces it instead of
# printing every record twice.
_HANDLER_NAME = "gpuop-json"


def level_number(level: str | int) -> int:
    """Map `info`/`INFO`/20 to the logging level number; unknown names raise ValueError."""
    if isinstance(level, int):
        return level
    try:
        return _LEVELS[level.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(_LEVELS)}") from None


def json_formatter(service: str, node: str = "") -> JsonFormatter:
    return JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        static_fields={"service": service, "node": node},
        timestamp="time",
    )


def configure_logging(
    level: str | int = "info", *, service: str, node: str = "", stream: IO[str] | None = None
) -> logging.Handler:
    """Send all records at `level` and above to `stream` (default stderr) as JSON lines.

    Returns the installed handler (tests read from a StringIO stream they pass in).
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(json_formatter(service, node))
    root.addHandler(handler)
    root.setLevel(level_number(level))
    # Chatty at DEBUG with request bodies (tokens included); only show it when asked for explicitly.
    logging.getLogger("urllib3").setLevel(max(root.level, logging.INFO))
    return handler

"""Hot-reloaded config file: a mounted ConfigMap parsed into a pydantic model.

The kubelet updates a mounted ConfigMap by writing a new timestamped directory and swapping the
`..data` symlink, so the file's own mtime tells little; the watcher compares content hashes on an
interval instead. A bad edit never takes a service down: it logs one line naming the file and the
field, keeps the last good config and exposes the error (`watcher.error`) until a good version lands.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpuop_common.shutdown import Stopping

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class ConfigFileError(ValueError):
    """A config file that cannot be used; the message names the file and, if known, the field."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"config file {path}: {reason}")
        self.path = path
        self.reason = reason


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "(top level)"
        got = f" (got {error['input']!r})" if error["type"] != "missing" and "input" in error else ""
        parts.append(f"{field}: {error['msg']}{got}")
    return "; ".join(parts)


def parse_config(path: Path, text: str, model: type[M]) -> M:
    """Parse YAML/JSON `text` (read from `path`) into `model`; empty text means all defaults."""
    try:
        data: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigFileError(path, f"not valid YAML/JSON: {first_line}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigFileError(path, f"top level must be a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigFileError(path, _describe(exc)) from exc


def load_config(path: Path, model: type[M]) -> M:
    """Read and parse `path` once; raises ConfigFileError (never a bare OSError/ValidationError)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(path, exc.strerror or str(exc)) from exc
    return parse_config(path, text, model)


class ConfigFileWatcher(Generic[M]):
    """Polls `path` and calls `on_change(model)` whenever its valid content changes.

    `default` is the config in force until the file first parses (e.g. the ConfigMap is optional or
    not written yet); without one, `current` stays None until then.
    """

    def __init__(
        self,
        path: Path | str,
        model: type[M],
        on_change: Callable[[M], None],
        *,
        interval: float = 5.0,
        default: M | None = None,
    ) -> None:
        self.path = Path(path)
        self.model = model
        self.interval = interval
        self._on_change = on_change
        self._current: M | None = default
        self._error: str | None = None
        self._last_digest: bytes | None = None
        self._thread: threading.Thread | None = None

    @property
    def current(self) -> M | None:
        """The last good config (or the default)."""
        return self._current

    @property
    def error(self) -> str | None:
        """Why the file's present content is not in force, or None when it is."""
        return self._error

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._fail(ConfigFileError(self.path, exc.strerror or str(exc)))
            return None

    def _fail(self, exc: ConfigFileError) -> None:
        if str(exc) != self._error:
            log.error("config file rejected, keeping the last good config", extra={"error": str(exc)})
        self._error = str(exc)

    def poll(self) -> bool:
        """Check the file once; True when a new config was applied."""
        content = self._read()
        if content is None:
            self._fail(ConfigFileError(self.path, "missing"))
            self._last_digest = None
            return False
        digest = hashlib.sha256(content).digest()
        if digest == self._last_digest:
            return False
        self._last_digest = digest
        try:
            config = parse_config(self.path, content.decode("utf-8", errors="replace"), self.model)
        except ConfigFileError as exc:
            self._fail(exc)
            return False
        self._error = None
        if config == self._current:
            return False
        self._current = config
        log.info("config file applied", extra={"path": str(self.path)})
        try:
            self._on_change(config)
        except Exception:
            log.exception("config change handler failed", extra={"path": str(self.path)})
        return True

    def run(self, stopping: Stopping) -> None:
        """Poll now and every `interval` s until `stopping` is set."""
        while True:
            self.poll()
            if stopping.wait(self.interval):
                return

    def start_in_thread(self, stopping: Stopping) -> threading.Thread:
        """Run `run` in a daemon thread; it ends when `stopping` is set."""
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        self._thread = threading.Thread(target=self.run, args=(stopping,), name="gpuop-config", daemon=True)
        self._thread.start()
        return self._thread

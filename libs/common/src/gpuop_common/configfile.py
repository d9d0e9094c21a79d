"""Hot-reloaded config file: a mounted ConfigMap parsed into a pydantic model.

The kubelet updates a mounted ConfigMap by writing a new timestamped directory and swapping the
`..data` symlink, so the file's own mtime tells little; the watcher compares content hashes on an
interval instead. A bad edit never takes a service down: it logs one line naming the file and the
field, keeps the last good config and exposes the error (`watcher.error`) until a good version lands.

Under the operator the ConfigMap holds one key per DeviceConfig and `nodes.yaml`, node -> key of the
DeviceConfig holding it; a watcher given its `node_name` reads its node's key through that map (re-read
on every poll, so a node moving to another DeviceConfig follows), else the file it was given.

Every service starts the same way, so `ConfigFileWatcher.load` is that start: read the file once (or
fall back to the defaults when it is absent or bad), build the service from `watcher.config`, then
`watcher.set_on_change(...)` and `watcher.start_in_thread(stopping)`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpuop_common.shutdown import Stopping

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
NODES_FILE = "nodes.yaml"  # beside the config file: node name -> the file holding its settings
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,250}\.yaml$")


def parse_node_map(content: bytes) -> dict[str, str]:
    """`nodes.yaml` as the operator writes it (JSON, which is YAML too; json parses a 5,000-node map
    in milliseconds where PyYAML takes a good fraction of a second), or hand-written YAML."""
    try:
        data: Any = json.loads(content)
    except ValueError:
        data = yaml.safe_load(content.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"not a mapping of node names to keys (got {type(data).__name__})")
    return {str(node): key for node, key in data.items() if isinstance(key, str)}


class _NodeMap:
    """`nodes.yaml` beside the config file, parsed again only when its bytes change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._content: bytes | None = None
        self._mapping: dict[str, str] = {}

    def key_of(self, node_name: str) -> str | None:
        try:
            content = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read the node map", extra={"path": str(self.path), "error": str(exc)})
            return None
        if content != self._content:
            self._content = content
            try:
                self._mapping = parse_node_map(content)
            except (ValueError, UnicodeDecodeError, yaml.YAMLError) as exc:
                extra = {"path": str(self.path), "error": str(exc)}
                log.warning("bad node map; using the shared config", extra=extra)
                self._mapping = {}
        return self._mapping.get(node_name)


def node_config_path(path: Path, key: str | None) -> Path:
    """The file holding a node's settings: `key` (from the node map) beside `path` when it names a
    file there, else `path`."""
    if key is None or not _KEY.match(key) or not (path.parent / key).is_file():
        return path
    return path.parent / key


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
    not written yet); without one, `current` stays None until then. With `optional`, a missing file
    is not an error: the config in force simply stays.
    """

    def __init__(
        self,
        path: Path | str,
        model: type[M],
        on_change: Callable[[M], None] | None = None,
        *,
        interval: float = 5.0,
        default: M | None = None,
        optional: bool = False,
        node_name: str = "",
    ) -> None:
        self.path = Path(path)
        self.node_name = node_name
        self._node_map = _NodeMap(self.path.parent / NODES_FILE)
        self.source = self.path  # the file in force: `path`, or this node's file named by nodes.yaml
        self.model = model
        self.interval = interval
        self.optional = optional
        self._on_change = on_change
        self._current: M | None = default
        self._error: str | None = None
        self._last_digest: bytes | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def load(
        cls,
        path: Path | str,
        model: type[M],
        *,
        interval: float = 5.0,
        default: M | None = None,
        on_change: Callable[[M], None] | None = None,
        node_name: str = "",
    ) -> ConfigFileWatcher[M]:
        """The startup of every service: the file's config now, or `default` (else `model()`) when
        the file is absent (an optional ConfigMap) or rejected (logged, and in `error`).

        The first read calls no `on_change`: the service is built from `watcher.config`.
        """
        watcher = cls(
            path,
            model,
            on_change,
            interval=interval,
            default=model() if default is None else default,
            optional=True,
            node_name=node_name,
        )
        watcher.load_initial()
        return watcher

    def load_initial(self) -> M | None:
        """Read the file once without calling `on_change` (nothing to react to yet); returns `current`."""
        if self.optional and not self.path.exists():
            log.info("no config file; using defaults", extra={"path": str(self.path)})
        self._poll(notify=False)
        return self._current

    def set_on_change(self, on_change: Callable[[M], None]) -> None:
        """Set the callback of later changes (e.g. once the service built from `config` exists)."""
        self._on_change = on_change

    @property
    def config(self) -> M:
        """The config in force; never None for a watcher made by `load` (it has a default)."""
        if self._current is None:
            raise RuntimeError(f"no config from {self.path} yet and no default")
        return self._current

    @property
    def current(self) -> M | None:
        """The last good config (or the default)."""
        return self._current

    @property
    def error(self) -> str | None:
        """Why the file's present content is not in force, or None when it is."""
        return self._error

    def _read(self) -> bytes | None:
        """The file's bytes, or None when it does not exist; ConfigFileError when it cannot be read."""
        key = self._node_map.key_of(self.node_name) if self.node_name else None
        source = node_config_path(self.path, key)
        if source != self.source:
            log.info("config file for this node", extra={"path": str(source), "node_name": self.node_name})
            self.source = source
        try:
            return source.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigFileError(source, exc.strerror or str(exc)) from exc

    def _fail(self, exc: ConfigFileError) -> None:
        if str(exc) != self._error:
            log.error("config file rejected, keeping the last good config", extra={"error": str(exc)})
        self._error = str(exc)

    def poll(self) -> bool:
        """Check the file once; True when a new config was applied."""
        return self._poll(notify=True)

    def _poll(self, *, notify: bool) -> bool:
        try:
            content = self._read()
        except ConfigFileError as exc:
            self._fail(exc)
            return False
        if content is None:
            if self.optional:
                self._error = None
            else:
                self._fail(ConfigFileError(self.source, "missing"))
            self._last_digest = None
            return False
        digest = hashlib.sha256(content).digest()
        if digest == self._last_digest:
            return False
        self._last_digest = digest
        try:
            config = parse_config(self.source, content.decode("utf-8", errors="replace"), self.model)
        except ConfigFileError as exc:
            self._fail(exc)
            return False
        self._error = None
        if config == self._current:
            return False
        self._current = config
        log.info("config file applied", extra={"path": str(self.source)})
        if notify and self._on_change is not None:
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

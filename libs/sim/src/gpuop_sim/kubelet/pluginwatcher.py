"""The kubelet plugin watcher: finds registration sockets under plugins_registry/ and registers them.

Discovery is a periodic scan (no inotify), which also notices sockets that existed before start.
Handshake per socket, as the kubelet does it: dial -> GetInfo -> validate -> register with the handler
for the plugin type -> NotifyRegistrationStatus (plugin_registered=false plus the error on failure).
A failed socket is retried with backoff; a removed socket is deregistered.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import dial_unix, socket_identity
from gpuop_common.kubelet import pluginregistration as reg

from .devicemanager import THREAD_PREFIX, DeviceManager
from .dra import DraPlugins, dra_plugin_error

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegisteredPlugin:
    socket: Path
    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


class PluginHandler(Protocol):
    def validate(self, info: reg.PluginInfo) -> str | None: ...
    def register(self, info: reg.PluginInfo) -> str | None: ...
    def deregister(self, info: reg.PluginInfo) -> None: ...


class DevicePluginHandler:
    """Device plugins may register through the watcher too; they then share the device manager."""

    def __init__(self, devices: DeviceManager) -> None:
        self._devices = devices

    def validate(self, info: reg.PluginInfo) -> str | None:
        if not any(v in dp.SUPPORTED_VERSIONS for v in info.supported_versions):
            return (
                f"none of the versions {list(info.supported_versions)} of device plugin {info.name} "
                f"are supported; kubelet supports {list(dp.SUPPORTED_VERSIONS)}"
            )
        if not dp.is_extended_resource_name(info.name):
            return f"invalid extended resource name {info.name!r}: expected <domain>/<name>"
        return None

    def register(self, info: reg.PluginInfo) -> str | None:
        return self._devices.connect(info.name, Path(info.endpoint))

    def deregister(self, info: reg.PluginInfo) -> None:
        self._devices.disconnect(info.name)


class DraPluginHandler:
    def __init__(self, plugins: DraPlugins) -> None:
        self._plugins = plugins

    def validate(self, info: reg.PluginInfo) -> str | None:
        return dra_plugin_error(info)

    def register(self, info: reg.PluginInfo) -> str | None:
        self._plugins.register(info)
        return None

    def deregister(self, info: reg.PluginInfo) -> None:
        self._plugins.deregister(info.name, info.endpoint)


@dataclass
class _Retry:
    identity: SocketId
    next_attempt: float
    delay: float
    error: str


@dataclass(frozen=True)
class WatcherConfig:
    registry_dir: Path
    interval: float = 0.1
    dial_timeout: float = reg.DIAL_TIMEOUT_S
    get_info_timeout: float = reg.GET_INFO_TIMEOUT_S
    notify_timeout: float = reg.NOTIFY_TIMEOUT_S
    max_backoff: float = 5.0


SocketId = tuple[int, int]


def discover_sockets(registry_dir: Path) -> dict[Path, SocketId]:
    """Every unix socket under the directory (recursively) -> its identity; dot-names are ignored."""
    found: dict[Path, SocketId] = {}
    for root, dirs, files in os.walk(registry_dir):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            identity = None if name.startswith(".") else socket_identity(Path(root) / name)
            if identity is not None:
                found[Path(root) / name] = identity
    return found


class PluginWatcher:
    def __init__(
        self,
        config: WatcherConfig,
        handlers: Mapping[str, PluginHandler],
        on_change: Callable[[], None],
    ) -> None:
        self._config = config
        self._handlers = dict(handlers)
        self._on_change = on_change
        self._lock = threading.Lock()
        self._registered: dict[Path, tuple[SocketId, reg.PluginInfo]] = {}
        self._retries: dict[Path, _Retry] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}-pluginwatcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop scanning and forget every registration (as a stopping kubelet does)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            registered = list(self._registered.values())
            self._registered.clear()
            self._retries.clear()
        for _, info in registered:
            self._handlers[info.type].deregister(info)

    def registered(self) -> list[RegisteredPlugin]:
        with self._lock:
            return [
                RegisteredPlugin(path, i.type, i.name, i.endpoint, tuple(i.supported_versions))
                for path, (_, i) in sorted(self._registered.items())
            ]

    def failures(self) -> dict[Path, str]:
        """Socket -> last registration error, for sockets not registered (yet)."""
        with self._lock:
            return {path: retry.error for path, retry in self._retries.items()}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scan_once()
            except Exception:
                log.exception("plugin watcher scan of %s failed", self._config.registry_dir)
            self._stop.wait(self._config.interval)

    def scan_once(self) -> None:
        sockets = discover_sockets(self._config.registry_dir) if self._config.registry_dir.is_dir() else {}
        with self._lock:
            gone = [(p, i) for p, (ident, i) in self._registered.items() if sockets.get(p) != ident]
            for path, _ in gone:
                del self._registered[path]
            self._retries = {p: r for p, r in self._retries.items() if sockets.get(p) == r.identity}
            now = time.monotonic()
            todo = [
                (path, identity)
                for path, identity in sockets.items()
                if path not in self._registered
                and (path not in self._retries or self._retries[path].next_attempt <= now)
            ]
        for path, info in gone:
            log.info("plugin socket %s removed: deregistering %s %s", path, info.type, info.name)
            self._handlers[info.type].deregister(info)
        for path, identity in todo:
            if self._stop.is_set():
                break
            self._handshake(path, identity)
        if gone or todo:
            self._on_change()

    def _record_failure(self, path: Path, identity: SocketId, error: str) -> None:
        log.info("plugin at %s not registered: %s", path, error)
        with self._lock:
            self._registered.pop(path, None)
            previous = self._retries.get(path)
            delay = min(self._config.max_backoff, previous.delay * 2) if previous else self._config.interval
            self._retries[path] = _Retry(identity, time.monotonic() + delay, delay, error)

    def _handshake(self, path: Path, identity: SocketId) -> None:
        """Register the plugin behind `path`, or record why not (retried with backoff)."""
        try:
            channel = dial_unix(path, self._config.dial_timeout)
        except (ConnectionError, ValueError) as exc:
            self._record_failure(path, identity, str(exc))
            return
        try:
            stub = reg.RegistrationStub(channel)
            try:
                info = stub.GetInfo(reg.InfoRequest(), timeout=self._config.get_info_timeout)
            except grpc.RpcError as exc:
                self._record_failure(path, identity, f"GetInfo on {path} failed: {exc}")
                return
            handler = self._handlers.get(info.type)
            error: str | None
            if handler is None:
                error = f"no handler registered for plugin type: {info.type!r} at socket {path}"
            else:
                error = handler.validate(info) or handler.register(info)
            # Recorded before the plugin hears the outcome, so what it is told already holds.
            if error is None:
                with self._lock:
                    self._registered[path] = (identity, info)
                    self._retries.pop(path, None)
            else:
                self._record_failure(path, identity, error)
            status = reg.RegistrationStatus(plugin_registered=error is None, error=error or "")
            try:
                stub.NotifyRegistrationStatus(status, timeout=self._config.notify_timeout)
            except grpc.RpcError as exc:
                if error is None and handler is not None:
                    handler.deregister(info)
                    self._record_failure(path, identity, f"NotifyRegistrationStatus on {path} failed: {exc}")
                return
            if error is None:
                log.info(
                    "registered %s plugin %s from %s (endpoint %s)", info.type, info.name, path, info.endpoint
                )
        finally:
            channel.close()

"""Watch caches: list once, then follow a watch; relist after 410 Gone or a broken stream.

The reconciler never acts on a watch event itself; each change just marks the controller dirty and
the next pass recomputes everything from the caches (level-triggered), so a lost, duplicated or
coalesced event cannot leave the cluster in a wrong state. `transform` trims cached objects to the
fields the operator reads, which keeps memory flat at thousands of nodes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpuop_operator.kubeio import KubeJson, Resource, WatchExpiredError

log = logging.getLogger(__name__)

JsonObj = dict[str, Any]
Transform = Callable[[JsonObj], JsonObj]


def object_key(obj: JsonObj) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _identity(obj: JsonObj) -> JsonObj:
    return obj


class WatchCache:
    """One resource (optionally one namespace / label selector), kept current by a daemon thread."""

    def __init__(
        self,
        kube: KubeJson,
        resource: Resource,
        on_change: Callable[[], None],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform = _identity,
        watch_timeout: int = 60,
        retry_delay: float = 1.0,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self._on_change = on_change
        self._transform = transform
        self._watch_timeout = watch_timeout
        self._retry_delay = retry_delay
        self._items: dict[str, JsonObj] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: Any = None  # the open watch response, shut down by stop()
        self.relists = 0
        self.failures = 0  # lists/watches that failed and were retried
        self.resumes = 0  # watch streams that ended and were resumed

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.resource.plural}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            # Unblocks the watch thread's read; it sees the stop flag and ends.
            with contextlib.suppress(Exception):
                stream.shutdown()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def alive(self) -> bool:
        """The watch thread runs (it only ends on stop())."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def items(self) -> list[JsonObj]:
        with self._lock:
            return list(self._items.values())

    def get(self, key: str) -> JsonObj | None:
        with self._lock:
            return self._items.get(key)

    def update(self, obj: JsonObj) -> None:
        """Store an object we just wrote, so the next pass does not plan the same write again."""
        self._put(obj)

    def _put(self, obj: JsonObj) -> bool:
        trimmed = self._transform(obj)
        key = object_key(trimmed)
        with self._lock:
            old = self._items.get(key)
            # A watch event older than the object our own write returned would briefly undo that
            # write in the cache and make the next pass repeat it. resourceVersions are opaque in
            # general; this only compares them when both are plain integers (etcd revisions).
            if old is not None and _rv(old) and _rv(trimmed) and int(_rv(old)) > int(_rv(trimmed)):
                return False
            self._items[key] = trimmed
        return old != trimmed

    def _relist(self) -> str:
        items, version = self.kube.list(
            self.resource,
            self.namespace,
            labelSelector=self.label_selector,
            fieldSelector=self.field_selector,
        )
        fresh = {object_key(t): t for t in map(self._transform, items)}
        with self._lock:
            changed = fresh != self._items
            self._items = fresh
        self.relists += 1
        self._synced.set()
        if changed:
            self._on_change()
        return version

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._relist()
                version = self._follow(version)
                self.resumes += 1
            except WatchExpiredError:
                version = ""
            except Exception as exc:
                if self._stop.is_set():
                    return  # stop() shut the stream down under us
                # Whatever broke the stream (HTTP error, dropped connection, a malformed event),
                # the cache must recover by relisting rather than silently going stale.
                expected = isinstance(exc, (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError))
                log.log(
                    logging.WARNING if expected else logging.ERROR,
                    "watch failed, relisting",
                    extra={"resource": self.resource.plural, "error": f"{type(exc).__name__}: {exc}"[:300]},
                    exc_info=not expected,
                )
                version = ""
                self.failures += 1
                self._stop.wait(self._retry_delay)

    def _opened(self, stream: Any) -> None:
        self._stream = stream
        if self._stop.is_set():
            with contextlib.suppress(Exception):
                stream.shutdown()

    def _follow(self, version: str) -> str:
        """Apply watch events until the stream ends; returns the resourceVersion to resume from."""
        for event in self.kube.watch(
            self.resource,
            self.namespace,
            version,
            self._watch_timeout,
            on_open=self._opened,
            labelSelector=self.label_selector,
            fieldSelector=self.field_selector,
        ):
            if self._stop.is_set():
                break
            obj = event.get("object") or {}
            version = _rv(obj) or version
            kind = event.get("type")
            if kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                with self._lock:
                    removed = self._items.pop(object_key(obj), None) is not None
                if removed:
                    self._on_change()
            elif self._put(obj):
                self._on_change()
        return version


def _rv(obj: JsonObj) -> str:
    value = (obj.get("metadata") or {}).get("resourceVersion", "")
    return str(value) if str(value).isdigit() else ""

"""List+watch caches (informers) and a keyed work queue: the plumbing of a level-triggered controller.

An informer keeps an up-to-date copy of one resource in memory; it relists after a 410 Gone or any
stream error, and reports each change to handlers. Controllers never act on the event itself: they
enqueue a key and reconcile the whole object from the cache, so lost or coalesced events are harmless.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuop_sim.workloads.kubeapi import KubeRest, Resource, is_status
from gpuop_sim.workloads.objects import Obj, key_of, meta

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj], None]


class Informer:
    """One resource, all namespaces, cached and kept current by a background watch thread."""

    def __init__(self, rest: KubeRest, resource: Resource, *, watch_timeout: int = 60) -> None:
        self.rest = rest
        self.resource = resource
        self._watch_timeout = watch_timeout
        self._store: dict[str, Obj] = {}
        self._deleted: dict[str, int] = {}  # key -> resourceVersion of its DELETED event
        self._lock = threading.Lock()
        self._handlers: list[Handler] = []
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource.plural}", daemon=True)

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        while self._thread.is_alive() and time.monotonic() < deadline:
            # Repeat: a watch request still being opened has no socket to shut down yet.
            stream = self._stream
            if stream is not None:
                # The open urllib3 response: shutting its socket down ends the blocked read now.
                with contextlib.suppress(Exception):
                    stream.shutdown()
            self._thread.join(timeout=0.05)

    def wait_synced(self, timeout: float = 10.0) -> bool:
        return self._synced.wait(timeout)

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._store.values())

    def get(self, key: str) -> Obj | None:
        with self._lock:
            return self._store.get(key)

    def upsert(self, obj: Obj) -> None:
        """Record our own write before its watch event arrives, so a reconcile never repeats it.

        Never resurrects an object whose deletion the watch already reported.
        """
        key = key_of(obj)
        with self._lock:
            if self._deleted.get(key, -1) >= _rv(obj):
                return
            current = self._store.get(key)
            if current is None or _rv(current) <= _rv(obj):
                self._store[key] = obj

    def _emit(self, event_type: str, obj: Obj) -> None:
        for handler in self._handlers:
            try:
                handler(event_type, obj)
            except Exception:  # a broken handler must not kill the watch
                log.exception("informer %s handler failed", self.resource.plural)

    def _relist(self) -> str:
        items, resource_version = self.rest.list(self.resource)
        fresh = {key_of(item): item for item in items}
        with self._lock:
            gone = [obj for key, obj in self._store.items() if key not in fresh]
            self._store = fresh
            self._deleted.clear()
        for obj in gone:
            self._emit("DELETED", obj)
        for obj in items:
            self._emit("ADDED", obj)
        self._synced.set()
        return resource_version

    def _apply(self, event: Obj) -> str | None:
        event_type = event.get("type")
        obj = event.get("object") or {}
        resource_version = str(meta(obj).get("resourceVersion") or "") or None
        if event_type == "BOOKMARK":
            return resource_version
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.group_version)
        with self._lock:
            if event_type == "DELETED":
                self._store.pop(key_of(obj), None)
                self._deleted[key_of(obj)] = _rv(obj)
            else:
                self._store[key_of(obj)] = obj
                self._deleted.pop(key_of(obj), None)
        self._emit(str(event_type), obj)
        return resource_version

    def _run(self) -> None:
        backoff = 0.2
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._relist()
                for event in self.rest.watch(
                    self.resource,
                    None,
                    resource_version,
                    self._watch_timeout,
                    on_open=self._remember_stream,
                ):
                    if self._stop.is_set():
                        break
                    resource_version = self._apply(event) or resource_version
                backoff = 0.2
            except Exception as error:
                if self._stop.is_set():
                    break
                if is_status(error, 410):
                    log.debug("watch on %s expired (410); relisting", self.resource.plural)
                else:
                    log.warning("watch on %s failed (%s); relisting", self.resource.plural, error)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                resource_version = None

    def _remember_stream(self, stream: Any) -> None:
        self._stream = stream


def _rv(obj: Obj) -> int:
    try:
        return int(meta(obj).get("resourceVersion") or 0)
    except ValueError:
        return 0


class WorkQueue:
    """A set of pending keys drained by one worker thread; a key is never handled twice at once."""

    def __init__(self, name: str, handle: Callable[[str], None]) -> None:
        self.name = name
        self._handle = handle
        self._pending: set[str] = set()
        self._timers: dict[str, float] = {}  # key -> monotonic time its add_after timer fires
        self._cond = threading.Condition()
        self._stop = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name=f"queue-{name}", daemon=True)

    def add(self, key: str) -> None:
        with self._cond:
            self._pending.add(key)
            self._cond.notify()

    def add_after(self, key: str, delay: float) -> None:
        """Add `key` once `delay` seconds have passed (a time-based condition comes due then).

        One timer per key: a later request while an earlier-or-equal one is pending adds nothing.
        """
        due = time.monotonic() + max(delay, 0.0)
        with self._cond:
            pending = self._timers.get(key)
            if pending is not None and pending <= due:
                return
            self._timers[key] = due

        def fire() -> None:
            with self._cond:
                if self._timers.get(key) == due:
                    del self._timers[key]
            self.add(key)

        timer = threading.Timer(max(delay, 0.0), fire)
        timer.daemon = True
        timer.start()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=5)

    def idle(self) -> bool:
        with self._cond:
            return not self._pending and not self._busy

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                key = self._pending.pop()
                self._busy = True
            try:
                self._handle(key)
            except Exception as error:
                log.warning("%s: reconcile of %s failed (%s); will retry", self.name, key, error)
                self._retry_later(key)
            finally:
                with self._cond:
                    self._busy = False

    def _retry_later(self, key: str) -> None:
        timer = threading.Timer(0.5, self.add, args=(key,))
        timer.daemon = True
        timer.start()

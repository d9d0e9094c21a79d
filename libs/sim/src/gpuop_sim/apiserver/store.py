"""In-memory object storage with one global resourceVersion counter and a bounded event history.

Stored objects are never mutated after they are put: readers share them and writers build a new
dict. Each object caches its JSON encoding, so GET/LIST/watch fan-out serialise an object once.
The per-resource history lets watches resume, lists be served at an older resourceVersion
(Exact match, continue tokens) and, once it overflows, answer 410 Gone like a compacted etcd.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

JsonObj = dict[str, Any]
log = logging.getLogger(__name__)
ResourceKey = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace or "", name)

_LIST_DROP = ("kind", "apiVersion")


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class Stored:
    """A stored object plus its cached encodings."""

    __slots__ = ("_item", "_raw", "obj")

    def __init__(self, obj: JsonObj) -> None:
        self.obj = obj
        self._raw: bytes | None = None
        self._item: bytes | None = None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = dumps(self.obj)
        return self._raw

    @property
    def list_item(self) -> bytes:
        """Built-in list items omit kind/apiVersion, as the real server's typed lists do."""
        if self._item is None:
            self._item = dumps({k: v for k, v in self.obj.items() if k not in _LIST_DROP})
        return self._item

    def copy(self) -> JsonObj:
        """A private deep copy for a writer to modify (JSON round trip: fast and exact)."""
        result: JsonObj = json.loads(self.raw)
        return result


def obj_key(obj: JsonObj) -> ObjKey:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", "") or "", meta["name"])


@dataclass
class Event:
    """One change: ADDED / MODIFIED / DELETED with the object after (and before) the change."""

    type: str
    rv: int
    resource: ResourceKey
    new: Stored
    prev: Stored | None
    _lines: dict[str, bytes] = field(default_factory=dict)

    def line(self, etype: str | None = None, *, use_prev: bool = False) -> bytes:
        """The watch stream line; cached so N watchers share one encoding."""
        etype = etype or self.type
        cache_key = etype + ("/prev" if use_prev else "")
        cached = self._lines.get(cache_key)
        if cached is None:
            if use_prev and self.prev is not None:
                # A selector transition out of the watch: the old object at the new resourceVersion.
                obj = self.prev.copy()
                obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
                body = dumps(obj)
            else:
                body = self.new.raw
            cached = b'{"type":"' + etype.encode() + b'","object":' + body + b"}\n"
            self._lines[cache_key] = cached
        return cached


Listener = Callable[[Event], None]


class TooOldError(Exception):
    """The requested resourceVersion is older than the retained history (410 Gone)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Store:
    def __init__(self, history_limit: int = 10_000) -> None:
        self.rv = 0
        self.history_limit = history_limit
        self._tables: dict[ResourceKey, dict[ObjKey, Stored]] = {}
        self._history: dict[ResourceKey, deque[Event]] = {}
        # Oldest rv a watch or an Exact list may start from, per resource.
        self._floor: dict[ResourceKey, int] = {}
        self._listeners: dict[ResourceKey, set[Listener]] = {}
        self._global_listeners: list[Listener] = []
        # Revisions below this were compacted away for reads (Exact lists, continue tokens).
        self._list_floor = 0
        # Two APIs over one stored kind (core and events.k8s.io Events): key -> (other key, convert).
        self.mirrors: dict[ResourceKey, tuple[ResourceKey, Callable[[JsonObj], JsonObj]]] = {}

    # ---------------------------------------------------------------- tables
    def ensure_table(self, key: ResourceKey) -> dict[ObjKey, Stored]:
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = {}
            self._history[key] = deque()
            self._floor[key] = self.rv
        return table

    def drop_table(self, key: ResourceKey) -> list[Stored]:
        """Remove a resource type (its CRD was deleted); returns what it held."""
        table = self._tables.pop(key, {})
        self._history.pop(key, None)
        self._floor.pop(key, None)
        return list(table.values())

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def get(self, key: ResourceKey, ns: str, name: str) -> Stored | None:
        return self._tables.get(key, {}).get((ns, name))

    def items(self, key: ResourceKey, ns: str | None = None) -> list[Stored]:
        """Objects sorted by (namespace, name), the real server's etcd key order."""
        table = self._tables.get(key, {})
        keys = sorted(k for k in table if ns is None or k[0] == ns)
        return [table[k] for k in keys]

    def count(self, key: ResourceKey) -> int:
        return len(self._tables.get(key, {}))

    # ---------------------------------------------------------------- writes
    def put(self, key: ResourceKey, obj: JsonObj, *, created: bool) -> Stored:
        """Store `obj` (its metadata.resourceVersion already set to a fresh rv) and emit the event."""
        table = self.ensure_table(key)
        ok = obj_key(obj)
        prev = table.get(ok)
        stored = Stored(obj)
        table[ok] = stored
        rv = int(obj["metadata"]["resourceVersion"])
        self._emit(Event("ADDED" if created else "MODIFIED", rv, key, stored, prev))
        self._mirror(key, ok, obj, rv, deleted=False)
        return stored

    def remove(self, key: ResourceKey, final: JsonObj) -> Stored:
        """Delete the object; `final` is its last state carrying the deletion's fresh rv."""
        table = self.ensure_table(key)
        ok = obj_key(final)
        prev = table.pop(ok, None)
        stored = Stored(final)
        rv = int(final["metadata"]["resourceVersion"])
        self._emit(Event("DELETED", rv, key, stored, prev))
        self._mirror(key, ok, final, rv, deleted=True)
        return stored

    def _mirror(self, key: ResourceKey, ok: ObjKey, obj: JsonObj, rv: int, *, deleted: bool) -> None:
        """Keep the twin view of a kind served by two APIs in step (same rv, converted body)."""
        mirror = self.mirrors.get(key)
        if mirror is None:
            return
        other, convert = mirror
        table = self.ensure_table(other)
        prev = table.pop(ok, None) if deleted else table.get(ok)
        twin = Stored(convert(obj))
        if deleted:
            if prev is not None:
                self._emit(Event("DELETED", rv, other, twin, prev))
            return
        table[ok] = twin
        self._emit(Event("ADDED" if prev is None else "MODIFIED", rv, other, twin, prev))

    def _emit(self, event: Event) -> None:
        hist = self._history[event.resource]
        hist.append(event)
        while len(hist) > self.history_limit:
            dropped = hist.popleft()
            self._floor[event.resource] = dropped.rv
        for listener in [*self._listeners.get(event.resource, ()), *self._global_listeners]:
            try:
                listener(event)
            except Exception:  # a watcher or controller bug must never undo or break a write
                log.exception("store listener failed on %s %s", event.type, event.resource)

    def compact(self, *, watch_history: bool = False) -> None:
        """An etcd compaction at the current revision: Exact lists and continue tokens at older
        revisions now get 410. The watch cache survives a compaction on a real server, so watch
        history is only dropped when asked (`watch_history=True`)."""
        self._list_floor = self.rv
        if watch_history:
            for key, hist in self._history.items():
                hist.clear()
                self._floor[key] = self.rv

    # ---------------------------------------------------------------- history
    def floor(self, key: ResourceKey) -> int:
        return self._floor.get(key, self.rv)

    def events_since(self, key: ResourceKey, rv: int) -> list[Event]:
        """Retained events with rv > `rv`; raises TooOldError when history no longer reaches back."""
        floor = self.floor(key)
        if rv < floor:
            raise TooOldError(rv, floor + 1)
        return [e for e in self._history.get(key, ()) if e.rv > rv]

    def snapshot(self, key: ResourceKey, rv: int, ns: str | None = None) -> list[Stored]:
        """The objects as they were at resourceVersion `rv` (undoing newer events)."""
        if rv < self._list_floor:
            raise TooOldError(rv, self._list_floor)
        if rv >= self.rv:
            return self.items(key, ns)
        newer = self.events_since(key, rv)
        state = {k: v for k, v in self._tables.get(key, {}).items() if ns is None or k[0] == ns}
        for ev in reversed(newer):
            ok = obj_key(ev.new.obj)
            if ns is not None and ok[0] != ns:
                continue
            if ev.type == "ADDED":
                state.pop(ok, None)
            elif ev.prev is not None:
                state[ok] = ev.prev
        return [state[k] for k in sorted(state)]

    # ---------------------------------------------------------------- listeners
    def subscribe(self, key: ResourceKey, listener: Listener) -> None:
        self._listeners.setdefault(key, set()).add(listener)

    def unsubscribe(self, key: ResourceKey, listener: Listener) -> None:
        self._listeners.get(key, set()).discard(listener)

    def subscribe_all(self, listener: Listener) -> None:
        """Every event of every resource (controllers use this)."""
        self._global_listeners.append(listener)

    def resources(self) -> Iterable[ResourceKey]:
        return list(self._tables)

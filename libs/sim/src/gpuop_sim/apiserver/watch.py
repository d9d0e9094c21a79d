"""Watch streams: initial state or resume from a resourceVersion, live fan-out, bookmarks, 410.

Each open watch is a queue fed synchronously by the store on the event loop; the stream task
drains it in batches and writes the pre-encoded event lines (shared by all watchers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gpuop_sim.apiserver.errors import ApiError, cause, invalid_options
from gpuop_sim.apiserver.resources import ResourceType
from gpuop_sim.apiserver.store import Event, Store, TooOldError, dumps

JsonObj = dict[str, Any]
Predicate = Callable[[JsonObj], bool] | None
_CLOSE = object()
DEFAULT_TIMEOUT_S = 1800.0


class WatchHub:
    """Open watches, so faults can drop them and shutdown can end them."""

    def __init__(self, store: Store, bookmark_interval: float) -> None:
        self.store = store
        self.bookmark_interval = bookmark_interval
        self._open: dict[asyncio.Queue[Any], tuple[str, str]] = {}  # queue -> (group, plural)

    def drop(self, plural: str | None = None, group: str | None = None) -> None:
        """End open watches of one plural (optionally of one group only), or all of them."""
        for queue, (g, p) in list(self._open.items()):
            if (plural is None or p == plural) and (group is None or g == group):
                queue.put_nowait(_CLOSE)

    @property
    def open_count(self) -> int:
        return len(self._open)

    async def serve(
        self,
        request: web.Request,
        rt: ResourceType,
        ns: str | None,
        query: dict[str, str],
        predicate: Predicate,
    ) -> web.StreamResponse:
        send_initial = query.get("sendInitialEvents") == "true"
        if send_initial and query.get("resourceVersionMatch") != "NotOlderThan":
            raise invalid_options(
                "ListOptions",
                [
                    cause(
                        "FieldValueForbidden",
                        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                        "resourceVersionMatch",
                    )
                ],
            )
        bookmarks = query.get("allowWatchBookmarks") == "true"
        try:
            timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else DEFAULT_TIMEOUT_S
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"invalid timeoutSeconds: {query['timeoutSeconds']}") from exc
        rv_param = query.get("resourceVersion", "")
        queue: asyncio.Queue[Any] = asyncio.Queue()
        key = rt.key
        initial: list[bytes] = []
        too_old: TooOldError | None = None
        # Everything up to subscribe() runs without awaiting, so no event can slip in between.
        if rv_param in ("", "0") or send_initial:
            start_rv = self.store.rv
            for stored in self.store.items(key, ns):
                if predicate is None or predicate(stored.obj):
                    initial.append(b'{"type":"ADDED","object":' + stored.raw + b"}\n")
            if send_initial:
                initial.append(_bookmark(rt, start_rv, initial_end=True))
        else:
            try:
                start_rv = int(rv_param)
            except ValueError as exc:
                raise ApiError(400, "BadRequest", f"invalid resource version: {rv_param}") from exc
            try:
                for ev in self.store.events_since(key, start_rv):
                    queue.put_nowait(ev)
            except TooOldError as exc:
                too_old = exc

        def listener(ev: Event) -> None:
            queue.put_nowait(ev)

        if too_old is None:
            self.store.subscribe(key, listener)
            self._open[queue] = rt.key
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            if too_old is not None:
                status = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": str(too_old),
                    "reason": "Expired",
                    "code": 410,
                }
                await resp.write(b'{"type":"ERROR","object":' + dumps(status) + b"}\n")
                return resp
            if initial:
                await resp.write(b"".join(initial))
            await self._pump(
                resp,
                rt,
                ns,
                queue,
                predicate=predicate,
                start_rv=start_rv,
                timeout=timeout,
                bookmarks=bookmarks,
            )
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.unsubscribe(key, listener)
            self._open.pop(queue, None)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await resp.write_eof()
        return resp

    async def _pump(
        self,
        resp: web.StreamResponse,
        rt: ResourceType,
        ns: str | None,
        queue: asyncio.Queue[Any],
        *,
        predicate: Predicate,
        start_rv: int,
        timeout: float,
        bookmarks: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        progress = start_rv
        bookmarked = start_rv
        next_bookmark = loop.time() + self.bookmark_interval
        while True:
            now = loop.time()
            if now >= deadline:
                return
            wait = deadline - now
            if bookmarks:
                wait = min(wait, max(0.0, next_bookmark - now))
            try:
                item = await asyncio.wait_for(queue.get(), timeout=wait)
            except TimeoutError:
                if bookmarks and loop.time() >= next_bookmark:
                    next_bookmark = loop.time() + self.bookmark_interval
                    if progress > start_rv and progress >= bookmarked:
                        bookmarked = progress
                        await resp.write(_bookmark(rt, progress))
                continue
            batch = [item]
            while not queue.empty():
                batch.append(queue.get_nowait())
            out: list[bytes] = []
            for entry in batch:
                if entry is _CLOSE:
                    if out:
                        await resp.write(b"".join(out))
                    return
                assert isinstance(entry, Event)
                if entry.rv <= start_rv:
                    continue
                progress = max(progress, entry.rv)
                line = _line_for(entry, ns, predicate)
                if line is not None:
                    out.append(line)
            if out:
                await resp.write(b"".join(out))


def _line_for(ev: Event, ns: str | None, predicate: Predicate) -> bytes | None:
    if ns is not None and (ev.new.obj.get("metadata") or {}).get("namespace", "") != ns:
        return None
    if predicate is None:
        return ev.line()
    if ev.type == "ADDED":
        return ev.line() if predicate(ev.new.obj) else None
    old_match = ev.prev is not None and predicate(ev.prev.obj)
    if ev.type == "DELETED":
        return ev.line() if old_match else None
    new_match = predicate(ev.new.obj)
    if old_match and new_match:
        return ev.line()
    if new_match:
        return ev.line("ADDED")
    if old_match:
        return ev.line("DELETED", use_prev=True)
    return None


def _bookmark(rt: ResourceType, rv: int, *, initial_end: bool = False) -> bytes:
    meta: JsonObj = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
    return b'{"type":"BOOKMARK","object":' + dumps(obj) + b"}\n"

"""Fault injection and request counting, driven from test code on any thread.

`fail_next` makes the next N matching requests answer an error `Status` (or hang past the
client's timeout); `add_latency` delays matching requests; `drop_watches` closes open watch
streams so clients must re-list or resume.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for(code: int) -> str:
    return _REASONS.get(code, "Unknown")


@dataclass
class Failure:
    verb: str
    resource: str
    code: int
    remaining: int
    name: str | None = None
    subresource: str | None = None
    timeout: bool = False

    def matches(self, verb: str, resource: str, name: str, subresource: str) -> bool:
        return (
            self.verb in (verb, "*")
            and self.resource in (resource, "*")
            and (self.name is None or self.name == name)
            and (self.subresource is None or self.subresource == subresource)
        )


@dataclass
class Latency:
    seconds: float
    verb: str | None
    resource: str | None


@dataclass(frozen=True)
class Injected:
    """What the HTTP layer must do for one request."""

    code: int = 0  # 0: no injected failure
    delay: float = 0.0
    hang: bool = False  # never answer (until the client gives up)


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[Failure] = []
        self._latency: list[Latency] = []
        self._drop_hooks: list[Callable[[str | None], None]] = []

    def fail_next(
        self,
        verb: str,
        resource: str,
        code: int,
        count: int = 1,
        *,
        name: str | None = None,
        subresource: str | None = None,
        timeout: bool = False,
    ) -> None:
        """The next `count` requests matching verb/resource (and name/subresource) fail with `code`.

        verb is one of get/list/watch/create/update/patch/delete/deletecollection or "*";
        resource is the plural (e.g. "nodes") or "*". `timeout=True` (or code 0) holds the
        request open without answering, so the client's own timeout fires."""
        if count < 1:
            raise ValueError("count must be >= 1")
        with self._lock:
            self._failures.append(
                Failure(verb, resource, code, count, name, subresource, timeout or code == 0)
            )

    def add_latency(self, seconds: float, verb: str | None = None, resource: str | None = None) -> None:
        """Delay every matching request by `seconds` before it is served."""
        with self._lock:
            self._latency.append(Latency(seconds, verb, resource))

    def drop_watches(self, resource: str | None = None) -> None:
        """Close every open watch stream (of one plural, or all)."""
        with self._lock:
            hooks = list(self._drop_hooks)
        for hook in hooks:
            hook(resource)

    def clear(self) -> None:
        with self._lock:
            self._failures.clear()
            self._latency.clear()

    def on_drop(self, hook: Callable[[str | None], None]) -> None:
        with self._lock:
            self._drop_hooks.append(hook)

    def consult(self, verb: str, resource: str, name: str, subresource: str) -> Injected:
        with self._lock:
            delay = sum(
                lat.seconds
                for lat in self._latency
                if lat.verb in (None, verb) and lat.resource in (None, resource)
            )
            for failure in self._failures:
                if failure.matches(verb, resource, name, subresource):
                    failure.remaining -= 1
                    if failure.remaining <= 0:
                        self._failures.remove(failure)
                    return Injected(failure.code, delay, failure.timeout)
        return Injected(0, delay)


@dataclass(frozen=True)
class RequestRecord:
    """One served request, in the shape of the golden transcripts' client captures."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    accept: str | None
    status: int


class RequestStats:
    """Thread-safe counters of served requests by (verb, resource), plus a bounded request log."""

    def __init__(self, log_size: int = 5000) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._log: deque[RequestRecord] = deque(maxlen=log_size)

    def log(self, record: RequestRecord) -> None:
        with self._lock:
            self._log.append(record)

    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._log)

    def record(self, verb: str, resource: str) -> None:
        with self._lock:
            self._counts[(verb, resource)] += 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
            self._log.clear()

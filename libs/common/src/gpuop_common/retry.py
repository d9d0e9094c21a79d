"""Retries for Kubernetes API calls, on stamina.

What is retried: 409 Conflict (a stale resourceVersion; the retried function must re-read the object,
so wrap the whole read-modify-write, not just the write), 429 Too Many Requests and 503 with their
`Retry-After`, other 5xx, and connection errors/timeouts. What is not: every other 4xx (the request
itself is wrong and will stay wrong) and 409 AlreadyExists from a create (not a race to re-run).
Attempts and total time are bounded; each retry is logged with the status that caused it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterable
from typing import ParamSpec, TypeVar

import stamina
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_ATTEMPTS = 6
DEFAULT_TIMEOUT_S = 30.0
MAX_RETRY_AFTER_S = 30.0  # a server asking for longer than this is better answered by giving up

_RETRIED_SERVER_ERRORS = frozenset({500, 502, 503, 504})
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    urllib3.exceptions.MaxRetryError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.TimeoutError,
    urllib3.exceptions.NewConnectionError,
)


def status_reason(exc: ApiException) -> str:
    """The machine-readable `reason` of a kube Status body (`Conflict`, `AlreadyExists`, ...), or ''."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        return ""
    reason = body.get("reason", "") if isinstance(body, dict) else ""
    return reason if isinstance(reason, str) else ""


def retry_after_seconds(exc: ApiException) -> float | None:
    """`Retry-After` in seconds (integer form, the one kube-apiserver sends), capped; None if absent."""
    headers = exc.headers or {}
    raw = next((value for key, value in headers.items() if key.lower() == "retry-after"), None)
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except (TypeError, ValueError):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def retry_decision(exc: Exception) -> bool | float:
    """False: give up; True: retry with exponential backoff; float: retry after that many seconds."""
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        if status == 409:
            return status_reason(exc) != "AlreadyExists"
        if status == 429 or status in _RETRIED_SERVER_ERRORS:
            after = retry_after_seconds(exc)
            return True if after is None else after
        return False
    return isinstance(exc, _CONNECTION_ERRORS)


def _should_retry(exc: Exception) -> bool | dt.timedelta:
    decision = retry_decision(exc)
    if decision is False:
        return False
    if isinstance(exc, ApiException):
        log.warning(
            "kube API call failed, retrying",
            extra={"status": exc.status, "reason": status_reason(exc) or exc.reason},
        )
    else:
        log.warning("kube API connection failed, retrying", extra={"error": f"{type(exc).__name__}: {exc}"})
    return True if decision is True else dt.timedelta(seconds=decision)


def kube_retry(
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    timeout: float = DEFAULT_TIMEOUT_S,
    wait_initial: float = 0.1,
    wait_max: float = 5.0,
    wait_jitter: float = 0.5,
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Decorator: retry a kube API operation (sync or async) per `retry_decision`.

    >>> @kube_retry()
    ... def relabel(api, name):  # re-reads on every attempt, so a 409 is resolved by retrying
    ...     node = api.read_node(name)
    ...     api.patch_node(name, build_patch(node))
    """
    return stamina.retry(
        on=_should_retry,
        attempts=attempts,
        timeout=timeout,
        wait_initial=wait_initial,
        wait_max=wait_max,
        wait_jitter=wait_jitter,
    )


def kube_retrying(
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    timeout: float = DEFAULT_TIMEOUT_S,
    wait_initial: float = 0.1,
    wait_max: float = 5.0,
    wait_jitter: float = 0.5,
) -> Iterable[stamina.Attempt]:
    """Block form of `kube_retry`: `for attempt in kube_retrying(): with attempt: ...`."""
    return stamina.retry_context(
        on=_should_retry,
        attempts=attempts,
        timeout=timeout,
        wait_initial=wait_initial,
        wait_max=wait_max,
        wait_jitter=wait_jitter,
    )

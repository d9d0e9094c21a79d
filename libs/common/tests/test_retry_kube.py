"""kube_retry: which API failures are retried, how often, and Retry-After handling."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import urllib3.exceptions
from gpuop_common.retry import kube_retry, kube_retrying, retry_after_seconds, retry_decision
from kubernetes.client.exceptions import ApiException

FAST = {"wait_initial": 0.001, "wait_max": 0.002, "wait_jitter": 0.0}


def api_error(status: int, reason: str = "", retry_after: str | None = None) -> ApiException:
    exc = ApiException(status=status, reason=reason or "Error")
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "reason": reason, "code": status})
    exc.headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return exc


class FlakyCall:
    """Fails with the given errors in order, then returns 'ok'."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


@pytest.mark.parametrize(
    "error",
    [
        api_error(409, "Conflict"),
        api_error(500, "InternalError"),
        api_error(503, "ServiceUnavailable"),
        api_error(429, "TooManyRequests", retry_after="0"),
        urllib3.exceptions.ProtocolError("connection reset"),
        urllib3.exceptions.MaxRetryError(None, "/api", "refused"),  # type: ignore[arg-type]
        TimeoutError("read timed out"),
    ],
    ids=["409", "500", "503", "429", "reset", "refused", "timeout"],
)
def test_transient_errors_are_retried_until_success(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    call = FlakyCall(error, error)
    with caplog.at_level(logging.WARNING, logger="gpuop_common.retry"):
        assert kube_retry(**FAST)(call)() == "ok"
    assert call.calls == 3
    assert len([r for r in caplog.records if r.name == "gpuop_common.retry"]) == 2


@pytest.mark.parametrize(
    "error",
    [
        api_error(404, "NotFound"),
        api_error(422, "Invalid"),
        api_error(403, "Forbidden"),
        api_error(400, "BadRequest"),
        api_error(409, "AlreadyExists"),
        api_error(501, "NotImplemented"),
        ValueError("a bug, not the network"),
    ],
    ids=["404", "422", "403", "400", "already-exists", "501", "bug"],
)
def test_client_errors_are_not_retried(error: Exception) -> None:
    call = FlakyCall(error)
    with pytest.raises(type(error)):
        kube_retry(**FAST)(call)()
    assert call.calls == 1


def test_attempts_are_bounded_and_last_error_surfaces() -> None:
    call = FlakyCall(*(api_error(500, "InternalError") for _ in range(10)))
    with pytest.raises(ApiException) as raised:
        kube_retry(attempts=3, **FAST)(call)()
    assert raised.value.status == 500
    assert call.calls == 3


def test_retry_after_is_honoured_and_capped() -> None:
    assert retry_decision(api_error(429, "TooManyRequests", retry_after="2")) == 2.0
    assert retry_decision(api_error(429, "TooManyRequests")) is True
    assert retry_after_seconds(api_error(429, retry_after="3600")) == 30.0
    assert retry_after_seconds(api_error(429, retry_after="soon")) is None


def test_block_form_and_async() -> None:
    call = FlakyCall(api_error(409, "Conflict"))
    result = None
    for attempt in kube_retrying(**FAST):
        with attempt:
            result = call()
    assert result == "ok"
    assert call.calls == 2

    async_call = FlakyCall(api_error(502, "BadGateway"))

    @kube_retry(**FAST)
    async def read() -> str:
        return async_call()

    assert asyncio.run(read()) == "ok"
    assert async_call.calls == 2

"""configure_logging: every record is one parseable JSON line with the standard fields."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime

import pytest
from gpuop_common.logs import configure_logging, level_number


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    root = logging.getLogger()
    saved_level = root.level
    configure_logging("debug", service="node-labeller", node="gpu-1", stream=buffer)
    yield buffer
    for handler in list(root.handlers):
        if handler.get_name() == "gpuop-json":
            root.removeHandler(handler)
    root.setLevel(saved_level)


def _records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_record_fields(stream: io.StringIO) -> None:
    logging.getLogger("gpuop.test").info("labels patched", extra={"changed": 3, "labels": {"a": "b"}})
    (record,) = _records(stream)
    assert record["message"] == "labels patched"
    assert record["level"] == "INFO"
    assert record["logger"] == "gpuop.test"
    assert record["service"] == "node-labeller"
    assert record["node"] == "gpu-1"
    assert record["changed"] == 3
    assert record["labels"] == {"a": "b"}
    assert datetime.fromisoformat(str(record["time"])).tzinfo is not None


def test_one_line_per_record_even_with_newlines_and_exceptions(stream: io.StringIO) -> None:
    log = logging.getLogger("gpuop.test")
    log.warning("two\nlines")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    records = _records(stream)
    assert [r["message"] for r in records] == ["two\nlines", "failed"]
    assert "RuntimeError: boom" in str(records[1]["exc_info"])


def test_level_filters_and_reconfigure_does_not_duplicate(stream: io.StringIO) -> None:
    configure_logging("warning", service="node-labeller", node="gpu-1", stream=stream)
    log = logging.getLogger("gpuop.test")
    log.info("hidden")
    log.error("shown")
    assert [r["message"] for r in _records(stream)] == ["shown"]


def test_level_number() -> None:
    assert level_number("DEBUG") == logging.DEBUG
    assert level_number(logging.ERROR) == logging.ERROR
    with pytest.raises(ValueError, match="loud"):
        level_number("loud")

"""pods/log, the pure parts: CRI records, PodLogOptions decoding and validation, which container
instance the kubelet reads, and which bytes go out (tail, since, timestamps, limitBytes)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from gpuop_sim.apiserver.errors import ApiError
from gpuop_sim.apiserver.podlog import (
    LogOptions,
    LogWriter,
    choose_container,
    instance_to_read,
    is_running,
    parse_log_options,
    since_cutoff,
    tail,
    validate_log_options,
)
from gpuop_sim.crilog import (
    LogRecord,
    format_record,
    format_timestamp,
    parse_record,
    parse_records,
    parse_timestamp,
)
from gpuop_sim.workloads.simkubelet.process import ContainerProcess

T0 = 1_796_295_200_123_456_789  # 2026-12-03T10:53:20.123456789Z


# -- CRI records -----------------------------------------------------------------------------------
def test_timestamps_have_nine_fraction_digits_and_round_trip() -> None:
    assert format_timestamp(T0) == "2026-12-03T10:53:20.123456789Z"
    assert format_timestamp(T0 - 123_456_789) == "2026-12-03T10:53:20.000000000Z"
    assert parse_timestamp("2026-12-03T10:53:20.123456789Z") == T0
    assert parse_timestamp("2026-12-03T10:53:20Z") == T0 - 123_456_789
    assert parse_timestamp("2026-12-03T11:53:20.5+01:00") == T0 - 123_456_789 + 500_000_000


@pytest.mark.parametrize("text", ["yesterday", "2026-12-03 10:53:20Z", "2026-12-03T10:53:20"])
def test_a_timestamp_that_is_not_rfc3339_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=text):
        parse_timestamp(text)


def test_records_mark_whole_and_partial_lines() -> None:
    assert format_record(T0, "stdout", b"hello\n") == b"2026-12-03T10:53:20.123456789Z stdout F hello\n"
    assert (
        format_record(T0, "stderr", b"no newline") == b"2026-12-03T10:53:20.123456789Z stderr P no newline\n"
    )
    assert parse_record(b"2026-12-03T10:53:20.123456789Z stdout F hello\n") == LogRecord(
        T0, "stdout", b"hello\n"
    )
    # A partial record's file newline is not part of what the container wrote.
    assert parse_record(b"2026-12-03T10:53:20.123456789Z stderr P no newline\n") == LogRecord(
        T0, "stderr", b"no newline"
    )
    assert parse_record(b"2026-12-03T10:53:20.123456789Z stdout F  two  spaces \n") == LogRecord(
        T0, "stdout", b" two  spaces \n"
    )


@pytest.mark.parametrize(
    "line",
    [
        b"plain text from an old file\n",
        b"2026-12-03T10:53:20Z stdin F x\n",
        b"not-a-time stdout F x\n",
        b"\n",
    ],
)
def test_lines_that_are_not_cri_records_are_skipped(line: bytes) -> None:
    assert parse_record(line) is None


def test_an_unfinished_last_line_waits_for_the_writer() -> None:
    data = format_record(T0, "stdout", b"one\n") + b"2026-12-03T10:53:20.123456789Z std"
    records, rest = parse_records(data)
    assert [r.content for r in records] == [b"one\n"]
    assert rest == b"2026-12-03T10:53:20.123456789Z std"


def test_a_container_process_writes_stamped_records_per_stream(tmp_path: Path) -> None:
    script = (
        "import sys; print('out', flush=True); print('err', file=sys.stderr, flush=True); "
        "sys.stdout.write('tail')"
    )
    log = tmp_path / "logs" / "0.log"
    before = time.time_ns()
    process = ContainerProcess([sys.executable, "-c", script], {}, tmp_path / "cwd", log)
    process.start()
    deadline = time.monotonic() + 30
    while process.exit_code() is None:
        assert time.monotonic() < deadline, "the container did not exit"
        time.sleep(0.05)
    # Once the exit is seen, everything the container wrote is in the file.
    records, rest = parse_records(log.read_bytes())
    assert rest == b""
    assert sorted((r.stream, r.content) for r in records) == [
        ("stderr", b"err\n"),
        ("stdout", b"out\n"),
        ("stdout", b"tail"),
    ]
    assert all(before <= r.timestamp_ns <= time.time_ns() for r in records)


# -- options ---------------------------------------------------------------------------------------
def test_options_decode_like_the_real_server() -> None:
    opts = parse_log_options(
        {"container": "b", "follow": "true", "previous": "1", "timestamps": "false", "tailLines": "2"}
    )
    assert opts == LogOptions(container="b", follow=True, previous=True, timestamps=False, tail_lines=2)
    # Once present, a boolean is true unless it says 0 or false (even empty).
    assert parse_log_options({"follow": ""}).follow is True
    assert parse_log_options({"follow": "FALSE"}).follow is False
    assert parse_log_options({}) == LogOptions()


@pytest.mark.parametrize("key", ["tailLines", "limitBytes", "sinceSeconds"])
def test_a_number_that_does_not_parse_is_a_bad_request(key: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_log_options({key: "ten"})
    assert (caught.value.code, caught.value.reason) == (400, "BadRequest")
    assert caught.value.message == 'strconv.ParseInt: parsing "ten": invalid syntax'


def test_a_since_time_that_does_not_parse_is_a_bad_request() -> None:
    with pytest.raises(ApiError) as caught:
        parse_log_options({"sinceTime": "noon"})
    assert caught.value.code == 400
    assert caught.value.message.startswith('parsing time "noon" as "2006-01-02T15:04:05Z07:00"')


@pytest.mark.parametrize(
    ("opts", "field", "message"),
    [
        (LogOptions(tail_lines=-1), "tailLines", "Invalid value: -1: must be greater than or equal to 0"),
        (LogOptions(limit_bytes=0), "limitBytes", "Invalid value: 0: must be greater than 0"),
        (LogOptions(since_seconds=0), "sinceSeconds", "Invalid value: 0: must be greater than 0"),
        (
            LogOptions(since_seconds=5, since_time="2026-12-03T10:53:20Z"),
            "",
            "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
    ],
)
def test_out_of_range_options_are_invalid_naming_the_field(
    opts: LogOptions, field: str, message: str
) -> None:
    with pytest.raises(ApiError) as caught:
        validate_log_options(opts, "talker")
    error = caught.value
    assert (error.code, error.reason) == (422, "Invalid")
    assert error.message == f'PodLogOptions "talker" is invalid: {field}: {message}'
    assert error.details == {
        "name": "talker",
        "kind": "PodLogOptions",
        "causes": [{"reason": error.details["causes"][0]["reason"], "message": message, "field": field}],
    }


def test_two_bad_options_are_listed_together() -> None:
    with pytest.raises(ApiError) as caught:
        validate_log_options(LogOptions(tail_lines=-2, limit_bytes=-1), "p")
    assert caught.value.message == (
        'PodLogOptions "p" is invalid: [tailLines: Invalid value: -2: must be greater than or equal to 0, '
        "limitBytes: Invalid value: -1: must be greater than 0]"
    )


def test_valid_options_pass() -> None:
    validate_log_options(LogOptions(tail_lines=0, limit_bytes=1, since_seconds=1), "p")


# -- which container, which instance ---------------------------------------------------------------
def pod(containers: list[str], init: list[str] | None = None, statuses: list[Any] | None = None) -> Any:
    spec: dict[str, Any] = {"containers": [{"name": n} for n in containers]}
    if init:
        spec["initContainers"] = [{"name": n} for n in init]
    return {
        "metadata": {"name": "p", "uid": "u1"},
        "spec": spec,
        "status": {"containerStatuses": statuses or []},
    }


def test_the_only_container_is_the_default() -> None:
    assert choose_container(pod(["main"]), "") == "main"
    assert choose_container(pod(["a", "b"], init=["setup"]), "setup") == "setup"


def test_two_containers_need_a_name() -> None:
    with pytest.raises(ApiError) as caught:
        choose_container(pod(["a", "b"]), "")
    assert (caught.value.code, caught.value.message) == (
        400,
        "a container name must be specified for pod p, choose one of: [a b]",
    )
    with pytest.raises(ApiError) as caught:
        choose_container(pod(["a", "b"], init=["setup"]), "")
    assert caught.value.message.endswith("choose one of: [a b] or one of the init containers: [setup]")


def test_an_unknown_container_is_a_bad_request() -> None:
    with pytest.raises(ApiError) as caught:
        choose_container(pod(["a", "b"]), "c")
    assert (caught.value.code, caught.value.message) == (400, "container c is not valid for pod p")


RUNNING = {"running": {"startedAt": "2026-12-03T10:00:00Z"}}
LAST = {"terminated": {"exitCode": 1, "reason": "Error"}}


def status(state: Any, restarts: int = 0, last: Any = None) -> Any:
    entry: dict[str, Any] = {"name": "main", "state": state, "restartCount": restarts}
    if last:
        entry["lastState"] = last
    return entry


@pytest.mark.parametrize(
    ("state", "previous", "expected"),
    [
        (status(RUNNING), False, 0),
        (status(RUNNING, 3, LAST), False, 3),
        (status(RUNNING, 3, LAST), True, 2),
        (status({"terminated": {"exitCode": 0}}, 1, LAST), False, 1),
        # Waiting to restart: both the current and the previous log are the instance that just ended.
        (status({"waiting": {"reason": "CrashLoopBackOff"}}, 2, LAST), False, 1),
        (status({"waiting": {"reason": "CrashLoopBackOff"}}, 2, LAST), True, 1),
    ],
)
def test_the_instance_follows_the_status_like_the_kubelet(state: Any, previous: bool, expected: int) -> None:
    assert instance_to_read(pod(["main"], statuses=[state]), "main", previous=previous) == expected


@pytest.mark.parametrize(
    ("statuses", "previous", "message"),
    [
        ([status(RUNNING)], True, 'previous terminated container "main" in pod "p" not found'),
        (
            [status({"waiting": {"reason": "ContainerCreating"}})],
            False,
            'container "main" in pod "p" is waiting to start: ContainerCreating',
        ),
        (
            [status({"waiting": {"reason": "ErrImagePull"}})],
            False,
            'container "main" in pod "p" is waiting to start: image can\'t be pulled',
        ),
        ([], False, 'container "main" in pod "p" is not available'),
    ],
)
def test_no_instance_to_read_is_the_kubelets_bad_request(statuses: Any, previous: bool, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        instance_to_read(pod(["main"], statuses=statuses), "main", previous=previous)
    assert (caught.value.code, caught.value.reason, caught.value.message) == (400, "BadRequest", message)


def test_an_instance_runs_while_its_status_says_so() -> None:
    assert is_running(pod(["main"], statuses=[status(RUNNING, 1)]), "u1", "main", 1)
    assert not is_running(pod(["main"], statuses=[status(RUNNING, 2)]), "u1", "main", 1)  # restarted since
    assert not is_running(pod(["main"], statuses=[status({"terminated": {}}, 1)]), "u1", "main", 1)
    assert not is_running(pod(["main"], statuses=[status(RUNNING, 1)]), "other-uid", "main", 1)
    assert not is_running(None, "u1", "main", 1)


# -- which bytes -----------------------------------------------------------------------------------
def records(*contents: bytes, step: int = 1_000_000_000) -> list[LogRecord]:
    return [LogRecord(T0 + i * step, "stdout", c) for i, c in enumerate(contents)]


def test_tail_counts_records_from_the_end() -> None:
    lines = records(b"1\n", b"2\n", b"3\n")
    assert tail(lines, None) == lines
    assert tail(lines, 2) == lines[1:]
    assert tail(lines, 0) == []
    assert tail(lines, 10) == lines


def test_since_cutoffs() -> None:
    assert since_cutoff(LogOptions(since_seconds=10), T0) == T0 - 10_000_000_000
    assert since_cutoff(LogOptions(since_time="2026-12-03T10:53:20Z"), T0) == T0 - 123_456_789
    assert since_cutoff(LogOptions(), T0) is None


def test_the_writer_filters_by_time_and_prefixes_timestamps() -> None:
    writer = LogWriter(LogOptions(timestamps=True), since_ns=T0 + 1_000_000_000)
    out = writer.write(records(b"old\n", b"new\n", b"part", b"ial\n"))
    assert out == (
        b"2026-12-03T10:53:21.123456789Z new\n"
        b"2026-12-03T10:53:22.123456789Z part"
        b"2026-12-03T10:53:23.123456789Z ial\n"
    )
    assert not writer.done


def test_the_byte_limit_cuts_mid_line_and_holds_across_writes() -> None:
    writer = LogWriter(LogOptions(limit_bytes=6), since_ns=None)
    assert writer.write(records(b"abcd\n")) == b"abcd\n"
    assert writer.write(records(b"efgh\n", b"ijk\n")) == b"e"
    assert writer.done
    assert writer.write(records(b"more\n")) == b""

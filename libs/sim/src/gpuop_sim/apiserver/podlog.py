"""pods/log, the pure part: PodLogOptions from the query, which container instance, which bytes.

A real kube-apiserver checks the options and the container name itself (`LogLocation` in the pod
registry), then proxies to the node's kubelet, which picks the container instance from the pod status
and reads its CRI log file. Errors the kubelet answers with come back as 400 BadRequest with its
sentence as the message. The simulator does both halves here, reading the files the simulated kubelet
wrote (`gpuop_sim.crilog`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpuop_sim.apiserver import errors
from gpuop_sim.apiserver.errors import cause
from gpuop_sim.crilog import LogRecord, format_timestamp, parse_timestamp

JsonObj = dict[str, Any]
_NS_PER_SECOND = 1_000_000_000


class PodLogSource(Protocol):
    """Where a node keeps a container's log files (`crilog.PodLogFiles` for a SimCluster)."""

    def container_dir(self, node: str, namespace: str, name: str, uid: str, container: str) -> Path: ...


@dataclass(frozen=True)
class _OptionsKind:
    """How a 422 on PodLogOptions names its kind (no group, no resource)."""

    group: str = ""
    plural: str = "PodLogOptions"
    kind: str = "PodLogOptions"
    qualified_plural: str = "PodLogOptions"
    qualified_kind: str = "PodLogOptions"


_POD_LOG_OPTIONS = _OptionsKind()


@dataclass(frozen=True)
class LogOptions:
    """core/v1 PodLogOptions as the query string gives them."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: str | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None


def _flag(value: str) -> bool:
    # Query booleans decode like the real server's: only "0" and "false" are false once present.
    return value != "0" and value.lower() != "false"


def _integer(value: str) -> int:
    try:
        return int(value, 10)
    except ValueError:
        # The real server answers with Go's conversion error, which names the value but not the field.
        raise errors.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


def parse_log_options(query: Mapping[str, str]) -> LogOptions:
    """The options from the query; 400 BadRequest for a value that does not decode."""
    since_time = query.get("sinceTime")
    if since_time is not None:
        try:
            parse_timestamp(since_time)
        except ValueError:
            raise errors.bad_request(
                f'parsing time "{since_time}" as "2006-01-02T15:04:05Z07:00": cannot parse "{since_time}"'
            ) from None

    def number(key: str) -> int | None:
        value = query.get(key)
        return None if value is None else _integer(value)

    return LogOptions(
        container=query.get("container", ""),
        follow=_flag(query["follow"]) if "follow" in query else False,
        previous=_flag(query["previous"]) if "previous" in query else False,
        timestamps=_flag(query["timestamps"]) if "timestamps" in query else False,
        since_seconds=number("sinceSeconds"),
        since_time=since_time,
        tail_lines=number("tailLines"),
        limit_bytes=number("limitBytes"),
    )


def validate_log_options(opts: LogOptions, pod_name: str) -> None:
    """422 Invalid the way ValidatePodLogOptions words it (kubectl checks most of this itself)."""
    causes = []
    if opts.tail_lines is not None and opts.tail_lines < 0:
        causes.append(
            cause(
                "FieldValueInvalid",
                f"Invalid value: {opts.tail_lines}: must be greater than or equal to 0",
                "tailLines",
            )
        )
    if opts.limit_bytes is not None and opts.limit_bytes < 1:
        causes.append(
            cause(
                "FieldValueInvalid",
                f"Invalid value: {opts.limit_bytes}: must be greater than 0",
                "limitBytes",
            )
        )
    if opts.since_seconds is not None and opts.since_time is not None:
        causes.append(
            cause(
                "FieldValueForbidden",
                "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
                "",
            )
        )
    elif opts.since_seconds is not None and opts.since_seconds < 1:
        causes.append(
            cause(
                "FieldValueInvalid",
                f"Invalid value: {opts.since_seconds}: must be greater than 0",
                "sinceSeconds",
            )
        )
    if causes:
        raise errors.invalid(_POD_LOG_OPTIONS, pod_name, causes)


def _names(pod: JsonObj, key: str) -> list[str]:
    return [str(c.get("name")) for c in (pod.get("spec") or {}).get(key) or []]


def choose_container(pod: JsonObj, requested: str) -> str:
    """The container to read: the requested one if the pod has it, else its only one (400 otherwise)."""
    name = pod["metadata"]["name"]
    containers = _names(pod, "containers")
    init, ephemeral = _names(pod, "initContainers"), _names(pod, "ephemeralContainers")
    if requested:
        if requested not in (*containers, *init, *ephemeral):
            raise errors.bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    if len(containers) == 1:
        return containers[0]
    message = f"a container name must be specified for pod {name}"
    if containers:
        message += f", choose one of: [{' '.join(containers)}]"
        if init:
            message += f" or one of the init containers: [{' '.join(init)}]"
        if ephemeral:
            message += f" or one of the ephemeral containers: [{' '.join(ephemeral)}]"
    raise errors.bad_request(message)


def container_status(pod: JsonObj, container: str) -> JsonObj | None:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for entry in status.get(key) or []:
            if entry.get("name") == container:
                return dict(entry)
    return None


def instance_to_read(pod: JsonObj, container: str, *, previous: bool) -> int:
    """The restart count whose log file to serve, chosen from the status as the kubelet does.

    The current instance is the running or terminated one; while a container waits to restart
    (CrashLoopBackOff) it is the one that last terminated, which is also what `previous` gives then.
    Instance files are numbered by the restart count they started at, so the last terminated one is
    `restartCount - 1`."""
    name = pod["metadata"]["name"]
    status = container_status(pod, container)
    if status is None:
        raise errors.bad_request(f'container "{container}" in pod "{name}" is not available')
    restarts = int(status.get("restartCount") or 0)
    state = status.get("state") or {}
    last = (status.get("lastState") or {}).get("terminated")
    if previous:
        if not last:
            raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        return restarts - 1
    if "running" in state or "terminated" in state:
        return restarts
    if last:
        return restarts - 1
    reason = (state.get("waiting") or {}).get("reason", "")
    why = {
        "ErrImagePull": "image can't be pulled",
        "ImagePullBackOff": "trying and failing to pull image",
    }.get(reason, reason)
    raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {why}')


def is_running(pod: JsonObj | None, uid: str, container: str, instance: int) -> bool:
    """Whether that instance still runs (a follow stream ends once it stops)."""
    if pod is None or pod["metadata"].get("uid") != uid:
        return False
    status = container_status(pod, container) or {}
    return "running" in (status.get("state") or {}) and int(status.get("restartCount") or 0) == instance


def since_cutoff(opts: LogOptions, now_ns: int) -> int | None:
    """The oldest record time to show (sinceSeconds counts back from now; sinceTime is absolute)."""
    if opts.since_seconds is not None:
        return now_ns - opts.since_seconds * _NS_PER_SECOND
    if opts.since_time is not None:
        return parse_timestamp(opts.since_time)
    return None


def tail(records: list[LogRecord], lines: int | None) -> list[LogRecord]:
    """The last `lines` records of a file (tailLines counts file lines, before the since filter)."""
    if lines is None:
        return records
    return records[len(records) - lines :] if lines else []


class LogWriter:
    """Turns records into response bytes: the since filter, the timestamp prefix, the byte limit."""

    def __init__(self, opts: LogOptions, since_ns: int | None) -> None:
        self.timestamps = opts.timestamps
        self.since_ns = since_ns
        self.remaining = opts.limit_bytes  # None: no limit

    @property
    def done(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def write(self, records: Iterable[LogRecord]) -> bytes:
        out = bytearray()
        for record in records:
            if self.done:
                break
            if self.since_ns is not None and record.timestamp_ns < self.since_ns:
                continue
            line = record.content
            if self.timestamps:
                line = format_timestamp(record.timestamp_ns).encode() + b" " + line
            if self.remaining is not None:
                line = line[: self.remaining]
                self.remaining -= len(line)
            out += line
        return bytes(out)

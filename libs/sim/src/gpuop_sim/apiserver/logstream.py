"""GET pods/NAME/log: the checks in the real server's order, then the file, once or followed.

The checks run as kube-apiserver runs them: decode the options (400), validate them (422), find the
pod (404), check the container (400); a pod not bound to a node answers an empty log. Then, as the
node's kubelet would, the container instance is chosen from the pod status and its CRI log file read.
`follow` keeps the response open (chunked) and sends new lines until that instance stops running,
the pod goes away, the byte limit is reached or the client hangs up.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from gpuop_sim.apiserver import podlog
from gpuop_sim.apiserver.core import ApiCore
from gpuop_sim.apiserver.errors import ApiError
from gpuop_sim.apiserver.podlog import LogWriter, PodLogSource
from gpuop_sim.crilog import LogRecord, instance_log, parse_records

JsonObj = dict[str, Any]
_HEADERS = {"Content-Type": "text/plain"}
# How often a follow stream looks for new lines and for the container's end (a kubelet waits on
# inotify, with a 1 s fallback).
_FOLLOW_POLL = 0.2


@dataclass(frozen=True)
class _Instance:
    """One container instance of one pod (by uid), checked against the stored status."""

    core: ApiCore
    ns: str
    name: str
    uid: str
    container: str
    number: int

    def running(self) -> bool:
        pods = self.core.registry.get("", "v1", "pods")
        assert pods is not None
        try:
            pod: JsonObj | None = self.core.get(pods, self.ns, self.name).obj
        except ApiError as error:
            if error.code != 404:
                raise
            pod = None
        return podlog.is_running(pod, self.uid, self.container, self.number)


class _Tail:
    """Reads a growing log file from where it left off; only complete lines become records."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None
        self._pending = b""

    def read(self) -> list[LogRecord]:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return []  # not written yet, or a stub pod that never runs a process
        records, self._pending = parse_records(self._pending + self._file.read())
        return records

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


async def serve_pod_log(
    request: web.Request, core: ApiCore, source: PodLogSource | None, ns: str, name: str
) -> web.StreamResponse:
    opts = podlog.parse_log_options(dict(request.query))
    podlog.validate_log_options(opts, name)
    pods = core.registry.get("", "v1", "pods")
    assert pods is not None
    pod = core.get(pods, ns, name).obj
    container = podlog.choose_container(pod, opts.container)
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node or source is None:
        return web.Response(status=200, body=b"", headers=_HEADERS)
    instance = podlog.instance_to_read(pod, container, previous=opts.previous)
    uid = str(pod["metadata"].get("uid", ""))
    target = _Instance(core, ns, name, uid, container, instance)
    tail = _Tail(instance_log(source.container_dir(node, ns, name, uid, container), instance))
    try:
        writer = LogWriter(opts, podlog.since_cutoff(opts, time.time_ns()))
        body = writer.write(podlog.tail(tail.read(), opts.tail_lines))
        if not opts.follow or writer.done or not podlog.is_running(pod, uid, container, instance):
            return web.Response(status=200, body=body, headers=_HEADERS)
        return await _follow(request, target, tail, writer, body)
    finally:
        tail.close()


async def _follow(
    request: web.Request, target: _Instance, tail: _Tail, writer: LogWriter, first: bytes
) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers=_HEADERS)
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        if first:
            await response.write(first)
        while not writer.done:
            await asyncio.sleep(_FOLLOW_POLL)
            if request.transport is None or request.transport.is_closing():
                return response  # the client hung up
            # Read the status before the file: lines written before the container stopped still go out.
            running = target.running()
            chunk = writer.write(tail.read())
            if chunk:
                await response.write(chunk)
            if not running:
                break
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away mid-write
    return response

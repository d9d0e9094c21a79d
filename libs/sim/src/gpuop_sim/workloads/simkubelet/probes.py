"""Readiness/liveness probes against a simulated pod: httpGet, tcpSocket, exec (and grpc as tcp)."""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any


def resolve_port(port: Any, container: Mapping[str, Any]) -> int | None:
    """A probe port is a number or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    text = str(port or "")
    if text.isdigit():
        return int(text)
    for declared in container.get("ports") or []:
        if declared.get("name") == text:
            return int(declared.get("containerPort") or 0) or None
    return None


# Every simulated node's agents share the same two cores, so a probe that a real kubelet would give
# 1 s can starve while another "node" starts up; failing it would restart a healthy agent. The sim
# therefore waits at least this long (capped at the pod's own value when that is longer, up to 10 s).
MIN_PROBE_TIMEOUT_S = 5.0
MAX_PROBE_TIMEOUT_S = 10.0


def probe_timeout(probe: Mapping[str, Any]) -> float:
    requested = float(probe.get("timeoutSeconds") or 1)
    return min(max(requested, MIN_PROBE_TIMEOUT_S), MAX_PROBE_TIMEOUT_S)


def run_probe(
    probe: Mapping[str, Any],
    container: Mapping[str, Any],
    address: str,
    run_exec: Callable[[list[str], float], int],
) -> tuple[bool, str]:
    """(passed, message). `run_exec` runs an exec probe's command locally and returns its exit code."""
    timeout = probe_timeout(probe)
    if "httpGet" in probe:
        http = probe["httpGet"] or {}
        port = resolve_port(http.get("port"), container)
        if port is None:
            return False, f"httpGet probe names unknown port {http.get('port')!r}"
        scheme = str(http.get("scheme") or "HTTP").lower()
        path = str(http.get("path") or "/")
        url = f"{scheme}://{address}:{port}{path if path.startswith('/') else '/' + path}"
        headers = {str(h.get("name")): str(h.get("value")) for h in http.get("httpHeaders") or []}
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                code = int(response.status)
        except urllib.error.HTTPError as error:
            code = error.code
        except (OSError, ValueError) as error:
            return False, f"Get {url}: {error}"
        return (200 <= code < 400), f"HTTP probe {url} returned {code}"
    if "tcpSocket" in probe or "grpc" in probe:
        spec = probe.get("tcpSocket") or probe.get("grpc") or {}
        port = resolve_port(spec.get("port"), container)
        if port is None:
            return False, f"probe names unknown port {spec.get('port')!r}"
        try:
            with socket.create_connection((address, port), timeout=timeout):
                return True, f"connected to {address}:{port}"
        except OSError as error:
            return False, f"dial tcp {address}:{port}: {error}"
    if "exec" in probe:
        command = [str(c) for c in (probe["exec"] or {}).get("command") or []]
        if not command:
            return False, "exec probe has no command"
        try:
            code = run_exec(command, timeout)
        except (OSError, subprocess.SubprocessError) as error:
            return False, f"exec probe {command[0]!r} failed: {error}"
        return code == 0, f"exec probe exited {code}"
    return True, "no probe handler"

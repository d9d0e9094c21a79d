"""`kubectl get` columns for the built-in kinds operators look at (what the real server prints).

Each printer is a list of (column name, type, cell function); Name comes first, and Age is
appended by tables.py unless a printer places it (cell function None).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

JsonObj = dict[str, Any]
Cell = Callable[[JsonObj], Any]
AGE: None = None  # marks where the Age column goes
# Kinds whose table has no Age column (Events show Last Seen instead).
WITHOUT_AGE = frozenset({"Event"})


def _spec(o: JsonObj) -> JsonObj:
    return o.get("spec") or {}


def _status(o: JsonObj) -> JsonObj:
    return o.get("status") or {}


def _node_status(o: JsonObj) -> str:
    ready = next((c for c in _status(o).get("conditions") or [] if c.get("type") == "Ready"), None)
    text = (
        "Unknown"
        if ready is None or ready.get("status") == "Unknown"
        else ("Ready" if ready.get("status") == "True" else "NotReady")
    )
    return text + (",SchedulingDisabled" if _spec(o).get("unschedulable") else "")


def _node_roles(o: JsonObj) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in (o["metadata"].get("labels") or {}) if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _pod_ready(o: JsonObj) -> str:
    statuses = _status(o).get("containerStatuses") or []
    total = len(_spec(o).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(o: JsonObj) -> str:
    if o["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for s in _status(o).get("containerStatuses") or []:
        waiting = (s.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
    return str(_status(o).get("reason") or _status(o).get("phase") or "Unknown")


def _pod_restarts(o: JsonObj) -> int:
    return sum(int(s.get("restartCount", 0)) for s in _status(o).get("containerStatuses") or [])


def _node_selector(o: JsonObj) -> str:
    sel = ((_spec(o).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "<none>"


def _event_object(o: JsonObj) -> str:
    ref = o.get("involvedObject") or o.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _event_last_seen(o: JsonObj) -> Any:
    when = o.get("lastTimestamp") or o.get("deprecatedLastTimestamp") or o.get("eventTime")
    return age(when) if isinstance(when, str) else "<unknown>"


def _count(field: str) -> Cell:
    return lambda o: int(_status(o).get(field, 0))


PRINTERS: dict[str, list[tuple[str, str, Cell | None]]] = {
    "Node": [
        ("Status", "string", _node_status),
        ("Roles", "string", _node_roles),
        ("Age", "date", AGE),
        ("Version", "string", lambda o: (_status(o).get("nodeInfo") or {}).get("kubeletVersion", "")),
    ],
    "Pod": [
        ("Ready", "string", _pod_ready),
        ("Status", "string", _pod_status),
        ("Restarts", "string", lambda o: str(_pod_restarts(o))),
        ("Node", "string", lambda o: _spec(o).get("nodeName") or "<none>"),
    ],
    "Namespace": [("Status", "string", lambda o: _status(o).get("phase", ""))],
    "ConfigMap": [("Data", "integer", lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}))],
    "DaemonSet": [
        ("Desired", "integer", _count("desiredNumberScheduled")),
        ("Current", "integer", _count("currentNumberScheduled")),
        ("Ready", "integer", _count("numberReady")),
        ("Up-to-date", "integer", _count("updatedNumberScheduled")),
        ("Available", "integer", _count("numberAvailable")),
        ("Node Selector", "string", _node_selector),
    ],
    "Deployment": [
        ("Ready", "string", lambda o: f"{_status(o).get('readyReplicas', 0)}/{_spec(o).get('replicas', 0)}"),
        ("Up-to-date", "integer", _count("updatedReplicas")),
        ("Available", "integer", _count("availableReplicas")),
    ],
    "Event": [
        ("Last Seen", "string", _event_last_seen),
        ("Type", "string", lambda o: o.get("type", "")),
        ("Reason", "string", lambda o: o.get("reason", "")),
        ("Object", "string", _event_object),
        ("Message", "string", lambda o: o.get("message") or o.get("note") or ""),
    ],
    "Job": [
        ("Status", "string", lambda o: "Complete" if _status(o).get("succeeded") else "Running"),
        (
            "Completions",
            "string",
            lambda o: f"{_status(o).get('succeeded', 0)}/{_spec(o).get('completions', 1)}",
        ),
    ],
}


def age(timestamp: str) -> str:
    """kubectl-style age ("42s", "7m", "3h", "2d") of an RFC 3339 timestamp."""
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = int((datetime.now(UTC) - then).total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"

"""Kubernetes client factory and the two writes every gpuop service does: node labels and Events.

Credentials, first that works: an explicit kubeconfig (`--kubeconfig` / `GPUOP_KUBECONFIG`), the pod's
service account (in-cluster), then `KUBECONFIG` or `~/.kube/config`. Each call builds its own
`Configuration`, never touching the client library's process-wide default, so one process can talk
to several (simulated) clusters.

The writes go through `KubeJson` (plain JSON dicts), not the generated `CoreV1Api`: the typed API
builds thousands of pydantic model classes on its first call, ~20 MiB of every agent's memory.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import urllib3.exceptions
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gpuop_common.kubejson import EVENTS, MERGE_PATCH, NODES, KubeJson
from gpuop_common.retry import kube_retry

log = logging.getLogger(__name__)

EVENT_MESSAGE_LIMIT = 1024  # the apiserver rejects longer Event messages
CLUSTER_SCOPED_EVENT_NAMESPACE = "default"  # where Events about Nodes go, as the kubelet does


class KubeConfigError(RuntimeError):
    """No usable Kubernetes credentials; the message lists what was tried."""


def make_api_client(kubeconfig: str | Path | None = None) -> client.ApiClient:
    """An ApiClient from the first source that works (see module docstring)."""
    explicit = str(kubeconfig) if kubeconfig else os.environ.get("GPUOP_KUBECONFIG", "")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise KubeConfigError(f"kubeconfig {path}: no such file")
        try:
            return _client_from_kubeconfig(str(path))
        except (ConfigException, OSError, ValueError) as exc:
            raise KubeConfigError(f"kubeconfig {path}: {exc}") from exc

    tried = []
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return client.ApiClient(configuration=configuration)
        except ConfigException as exc:
            tried.append(f"in-cluster: {exc}")
    else:
        tried.append("in-cluster: KUBERNETES_SERVICE_HOST is not set")

    default_location = os.environ.get("KUBECONFIG", "~/.kube/config")
    files = [Path(part).expanduser() for part in default_location.split(os.pathsep) if part]
    if any(path.is_file() for path in files):
        try:
            return _client_from_kubeconfig(default_location)
        except (ConfigException, OSError, ValueError) as exc:
            tried.append(f"{default_location}: {exc}")
    else:
        tried.append(f"{default_location}: no such file")
    raise KubeConfigError("no Kubernetes credentials: " + "; ".join(tried))


def _client_from_kubeconfig(location: str) -> client.ApiClient:
    configuration = client.Configuration()
    # persist_config=False: never write refreshed tokens back into someone's kubeconfig.
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=location, client_configuration=configuration, persist_config=False
    )
    return client.ApiClient(configuration=configuration)


# -- node labels -------------------------------------------------------------------------------------


def label_changes(current: Mapping[str, str], desired: Mapping[str, str | None]) -> dict[str, str | None]:
    """The merge-patch for labels: keys whose value changes; None deletes a key that is present."""
    changes: dict[str, str | None] = {}
    for key, value in desired.items():
        if value is None:
            if key in current:
                changes[key] = None
        elif current.get(key) != value:
            changes[key] = value
    return changes


def read_node_metadata(api_client: client.ApiClient, node_name: str, timeout: float = 15.0) -> dict[str, Any]:
    """The Node's `metadata` as JSON (labels, annotations, resourceVersion); ApiException on errors."""
    metadata: dict[str, Any] = KubeJson(api_client, timeout).get(NODES, node_name).get("metadata") or {}
    return metadata


@kube_retry()
def patch_node_labels(
    api_client: client.ApiClient,
    node_name: str,
    desired: Mapping[str, str | None],
    *,
    dry_run: bool = False,
) -> dict[str, str | None]:
    """Set/remove only the labels that differ; returns the change (empty: nothing was written).

    A JSON merge patch of just the changed keys leaves labels owned by others untouched.
    """
    api = KubeJson(api_client)
    node = api.get(NODES, node_name)
    current = (node.get("metadata") or {}).get("labels") or {}
    changes = label_changes(current, desired)
    if not changes:
        return {}
    if dry_run:
        log.info("dry run: would patch node labels", extra={"node": node_name, "labels": changes})
        return changes
    api.patch(NODES, node_name, {"metadata": {"labels": changes}}, content_type=MERGE_PATCH)
    log.info("patched node labels", extra={"node": node_name, "labels": changes})
    return changes


def patch_node_metadata(
    api_client: client.ApiClient,
    node_name: str,
    *,
    labels: Mapping[str, str | None] | None = None,
    annotations: Mapping[str, str | None] | None = None,
    resource_version: str | None = None,
) -> None:
    """One merge patch of labels and annotations (None deletes a key); others' keys stay untouched.

    With `resource_version`, the write only lands on the Node as it was read (409 otherwise), for
    changes that depend on what was read, e.g. clearing a request annotation only if it is unchanged.
    Not retried itself: wrap the whole read-modify-write in `kube_retry` so a 409 re-reads.
    """
    metadata: dict[str, Any] = {}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    if not metadata:
        return
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    KubeJson(api_client).patch(NODES, node_name, {"metadata": metadata}, content_type=MERGE_PATCH)
    log.info("patched node metadata", extra={"node": node_name, "labels": labels, "annotations": annotations})


# -- events ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    field_path: str = ""  # a part of the object, as the kubelet names a container: `spec.containers{c}`

    @classmethod
    def node(cls, name: str, uid: str = "") -> ObjectRef:
        # The kubelet uses the node name as the uid of node Events; `kubectl describe node` matches it.
        return cls(kind="Node", name=name, uid=uid or name)


EventType = Literal["Normal", "Warning"]


def _now() -> str:
    """RFC 3339 in whole seconds, as Event timestamps are serialised."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class _Occurrence:
    name: str
    namespace: str
    count: int


class EventRecorder:
    """Creates core/v1 Events; a repeat of the same event is folded into one with a higher count."""

    def __init__(
        self, api_client: client.ApiClient, component: str, host: str = "", *, dry_run: bool = False
    ) -> None:
        self._api = KubeJson(api_client)
        self.component = component
        self.host = host
        self.dry_run = dry_run
        self._seen: dict[tuple[ObjectRef, str, str, str], _Occurrence] = {}

    def record(self, about: ObjectRef, reason: str, message: str, type: EventType = "Normal") -> None:
        """Emit the Event; failures are logged, never raised (an Event is not worth a crash)."""
        message = message[:EVENT_MESSAGE_LIMIT]
        key = (about, reason, message, type)
        if self.dry_run:
            log.info("dry run: would record event", extra={"reason": reason, "event_message": message})
            return
        try:
            seen = self._seen.get(key)
            if seen is not None and self._bump(seen):
                return
            self._seen[key] = self._create(about, reason, message, type)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            # ApiException's str() carries headers and body; the status says enough.
            error = (
                f"HTTP {exc.status}" if isinstance(exc, ApiException) else f"{exc.__class__.__name__}: {exc}"
            )
            log.warning(
                "could not record event", extra={"reason": reason, "about": about.name, "error": error}
            )

    def _bump(self, seen: _Occurrence) -> bool:
        seen.count += 1
        patch: dict[str, Any] = {"count": seen.count, "lastTimestamp": _now()}
        try:
            self._api.patch(EVENTS, seen.name, patch, seen.namespace, content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status == 404:  # the Event expired (default TTL 1 h): start a new one
                return False
            raise
        return True

    @kube_retry()
    def _create(self, about: ObjectRef, reason: str, message: str, type: EventType) -> _Occurrence:
        namespace = about.namespace or CLUSTER_SCOPED_EVENT_NAMESPACE
        now = _now()
        name = f"{about.name}.{secrets.token_hex(8)}"
        involved: dict[str, str] = {"kind": about.kind, "name": about.name, "apiVersion": about.api_version}
        optional = {"namespace": about.namespace, "uid": about.uid, "fieldPath": about.field_path}
        involved.update({key: value for key, value in optional.items() if value})
        source = {"component": self.component, **({"host": self.host} if self.host else {})}
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type,
            "source": source,
            "reportingComponent": self.component,
            "reportingInstance": self.host or self.component,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
        }
        self._api.create(EVENTS, event, namespace)
        return _Occurrence(name=name, namespace=namespace, count=1)

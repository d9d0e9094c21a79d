"""The config manager's API calls: its Node's metadata, the pods on that node, Events about the Node."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuop_common.kube import EventRecorder, EventType, ObjectRef, patch_node_metadata
from gpuop_common.retry import kube_retry
from kubernetes import client

from gpuop_config_manager.pods import PodView, claims_by_pod, view

log = logging.getLogger(__name__)
COMPONENT = "gpuop-config-manager"


@dataclass(frozen=True)
class NodeMeta:
    name: str
    uid: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


class NodeClient:
    """Reads and patches one Node; `writes` counts the API writes (patches, deletes, events)."""

    def __init__(self, api: client.ApiClient, node_name: str, *, dry_run: bool = False) -> None:
        self.core = client.CoreV1Api(api)
        self.api = api
        self.node_name = node_name
        self.dry_run = dry_run
        self.events = EventRecorder(api, COMPONENT, node_name, dry_run=dry_run)
        self.writes = 0

    @kube_retry()
    def read(self) -> NodeMeta:
        node = self.core.read_node(self.node_name)
        meta = node.metadata or client.V1ObjectMeta()
        return NodeMeta(self.node_name, meta.uid or "", dict(meta.labels or {}), dict(meta.annotations or {}))

    @kube_retry()
    def patch(
        self,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> None:
        if not labels and not annotations:
            return
        if self.dry_run:
            log.info("dry run: would patch node", extra={"labels": labels, "annotations": annotations})
            return
        patch_node_metadata(self.api, self.node_name, labels=labels, annotations=annotations)
        self.writes += 1

    @kube_retry()
    def pods(self) -> list[PodView]:
        listed = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node_name}")
        claims = claims_by_pod(self._resource_claims(), self.node_name)
        return [view(pod, claims) for pod in listed.items]

    def _resource_claims(self) -> list[dict[str, Any]]:
        """Every ResourceClaim (a pod's claims may live in any namespace it runs in); none where the
        cluster serves no resource.k8s.io/v1 (no DRA: nothing to hold)."""
        try:
            listed = client.CustomObjectsApi(self.api).list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceclaims"
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return []
            raise
        items = listed.get("items") if isinstance(listed, dict) else None
        return [item for item in items or [] if isinstance(item, dict)]

    @kube_retry()
    def delete_pod(self, pod: PodView) -> None:
        if self.dry_run:
            log.info("dry run: would delete pod", extra={"pod": pod.ref})
            return
        try:
            self.core.delete_namespaced_pod(pod.name, pod.namespace)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        self.writes += 1

    def event(self, node: NodeMeta, reason: str, message: str, type: EventType = "Normal") -> None:
        self.events.record(ObjectRef.node(node.name, node.uid), reason, message, type)
        self.writes += 1

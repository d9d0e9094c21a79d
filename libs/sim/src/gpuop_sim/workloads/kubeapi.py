# mypy: disallow-untyped-calls=False
# (the kubernetes client is only partly annotated; this module is where we wrap it in typed calls)
"""A thin JSON-dict REST layer over the real `kubernetes` client, shared by controllers and kubelets.

It serialises requests with the client's own `ApiClient` (auth, TLS, kubeconfig) and returns decoded
JSON dicts, so the simulator exercises the same HTTP client the services use without paying for the
generated models on every watch event.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from gpuop_sim.workloads.objects import Obj

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST tree."""

    group_version: str  # "v1" or "apps/v1"
    plural: str
    kind: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


PODS = Resource("v1", "pods", "Pod")
NODES = Resource("v1", "nodes", "Node", namespaced=False)
CONFIGMAPS = Resource("v1", "configmaps", "ConfigMap")
SECRETS = Resource("v1", "secrets", "Secret")
EVENTS = Resource("v1", "events", "Event")
NAMESPACES = Resource("v1", "namespaces", "Namespace", namespaced=False)
DAEMONSETS = Resource("apps/v1", "daemonsets", "DaemonSet")
DEPLOYMENTS = Resource("apps/v1", "deployments", "Deployment")
REPLICASETS = Resource("apps/v1", "replicasets", "ReplicaSet")
JOBS = Resource("batch/v1", "jobs", "Job")


def is_status(error: BaseException, *codes: int) -> bool:
    return isinstance(error, ApiException) and error.status in codes


class KubeRest:
    """JSON-in, JSON-out calls against one API server."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client

    @classmethod
    def from_kubeconfig(cls, path: str | Path) -> KubeRest:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(path), client_configuration=configuration)
        # Many threads share one client; urllib3's default pool of 4 would serialise them.
        configuration.connection_pool_maxsize = 64
        return cls(client.ApiClient(configuration))

    def close(self) -> None:
        self.api_client.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = 30.0,
    ) -> Any:
        params = [(k, str(v).lower() if isinstance(v, bool) else v) for k, v in (query or {}).items()]
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*request, _request_timeout=timeout)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return json.loads(response.data) if response.data else {}

    def list(self, resource: Resource, namespace: str | None = None, **query: Any) -> tuple[list[Obj], str]:
        """Items and the list's resourceVersion (to start a watch from)."""
        result = self._call("GET", resource.path(namespace), query=query)
        items = result.get("items") or []
        for item in items:
            # Lists omit kind/apiVersion on items; controllers need them for ownerReferences.
            item.setdefault("kind", resource.kind)
            item.setdefault("apiVersion", resource.group_version)
        return items, str((result.get("metadata") or {}).get("resourceVersion", ""))

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> Obj:
        result: Obj = self._call("GET", resource.path(namespace, name))
        return result

    def create(self, resource: Resource, body: Obj, namespace: str | None = None) -> Obj:
        result: Obj = self._call("POST", resource.path(namespace), body=body)
        return result

    def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        sub: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> Obj:
        result: Obj = self._call(
            "PATCH", resource.path(namespace, name, sub), body=body, content_type=content_type
        )
        return result

    def replace_status(self, resource: Resource, obj: Obj, status: Obj) -> Obj:
        """Write `status` to exactly this object: a same-named successor (other uid) gets 422, untouched."""
        metadata = obj.get("metadata") or {}
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": metadata.get("uid")},
            {"op": "replace", "path": "/status", "value": status},
        ]
        return self.patch(
            resource,
            str(metadata.get("name")),
            patch,
            metadata.get("namespace"),
            sub="status",
            content_type=JSON_PATCH,
        )

    def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
    ) -> None:
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            # Never delete a newer object that reused the name.
            body["preconditions"] = {"uid": uid}
        self._call("DELETE", resource.path(namespace, name), body=body)

    def bind(self, pod: Obj, node_name: str) -> None:
        metadata = pod.get("metadata") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self._call("POST", PODS.path(metadata.get("namespace"), metadata.get("name"), "binding"), body=body)

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        timeout_seconds: int = 60,
        on_stream: Callable[[watch.Watch], None] | None = None,
    ) -> Iterator[Obj]:
        """Watch events (dicts with `type` and `object`) from `resource_version`.

        A 410 Gone surfaces as ApiException(status=410); the caller relists.
        """
        stream = watch.Watch()
        if on_stream is not None:
            on_stream(stream)

        def list_call(**kwargs: Any) -> Any:
            preload = kwargs.pop("_preload_content", True)
            query = {
                "watch": True,
                "resourceVersion": kwargs.get("resource_version") or resource_version,
                "timeoutSeconds": kwargs.get("timeout_seconds", timeout_seconds),
                "allowWatchBookmarks": True,
            }
            request = self.api_client.param_serialize(
                method="GET",
                resource_path=resource.path(),
                query_params=[(k, str(v).lower() if isinstance(v, bool) else v) for k, v in query.items()],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            # The read timeout must outlast the server-side watch timeout.
            response = self.api_client.call_api(*request, _request_timeout=(10, timeout_seconds + 15))
            if not 200 <= response.status <= 299:
                response.read()
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            return response.response if not preload else response

        yield from stream.stream(
            list_call,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            deserialize=False,
        )

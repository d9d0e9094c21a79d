# mypy: disallow-untyped-calls=False
# (the kubernetes client is only partly annotated; this module wraps it in typed calls)
"""JSON-dict calls over the `kubernetes` client's ApiClient: auth and kubeconfig from the client,
no generated models, so 1,000-node lists and watch streams stay cheap to decode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

JsonObj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Resource:
    group_version: str  # "v1", "apps/v1", "gpuop.dev/v1alpha1"
    plural: str
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


NODES = Resource("v1", "nodes", namespaced=False)
PODS = Resource("v1", "pods")
CONFIGMAPS = Resource("v1", "configmaps")
DAEMONSETS = Resource("apps/v1", "daemonsets")
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs")
CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)


class WatchExpiredError(Exception):
    """The watch's resourceVersion is too old (410 Gone): the caller must list again."""


def _query(params: dict[str, Any] | None) -> list[tuple[str, Any]]:
    return [
        (k, str(v).lower() if isinstance(v, bool) else v) for k, v in (params or {}).items() if v is not None
    ]


class KubeJson:
    """JSON in, JSON out, against one API server; `timeout` bounds every non-watch request."""

    def __init__(self, api_client: client.ApiClient, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None,
        body: Any,
        content_type: str,
        timeout: Any,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=_query(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.api_client.call_api(*request, _request_timeout=timeout)

    def call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JsonObj:
        response = self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=self.timeout
        )
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(
                http_resp=response, body=response.data.decode(errors="replace"), data=None
            )
        decoded: JsonObj = json.loads(response.data) if response.data else {}
        return decoded

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> JsonObj:
        return self.call("GET", resource.path(namespace, name))

    def list(
        self, resource: Resource, namespace: str | None = None, **query: Any
    ) -> tuple[list[JsonObj], str]:
        result = self.call("GET", resource.path(namespace), query=query)
        items: list[JsonObj] = result.get("items") or []
        return items, str((result.get("metadata") or {}).get("resourceVersion", ""))

    def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        sub: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> JsonObj:
        return self.call("PATCH", resource.path(namespace, name, sub), body=body, content_type=content_type)

    def create(self, resource: Resource, body: JsonObj, namespace: str | None = None) -> JsonObj:
        return self.call("POST", resource.path(namespace), body=body)

    def replace(self, resource: Resource, name: str, body: JsonObj, namespace: str | None = None) -> JsonObj:
        return self.call("PUT", resource.path(namespace, name), body=body)

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        timeout_seconds: int,
        on_open: Callable[[Any], None] = lambda _response: None,
        **query: Any,
    ) -> Iterator[JsonObj]:
        """Watch events ({type, object}) from resource_version until the server ends the stream.

        `on_open` gets the open urllib3 response, so another thread can `shutdown()` it to stop."""
        params = {
            **query,
            "watch": True,
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": True,
        }
        # The read timeout outlasts the server-side watch timeout; a silent stream is a dead one.
        response = self._send(
            "GET",
            resource.path(namespace),
            query=params,
            body=None,
            content_type="",
            timeout=(5, timeout_seconds + 15),
        )
        if not 200 <= response.status <= 299:
            response.read()
            if response.status == 410:
                raise WatchExpiredError(resource.plural)
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        raw = response.response
        on_open(raw)
        try:
            pending = b""
            for chunk in raw.stream(64 * 1024, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _watch_event(json.loads(line))
        finally:
            raw.release_conn()


def _watch_event(event: JsonObj) -> JsonObj:
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        if status.get("code") == 410:
            raise WatchExpiredError(str(status.get("message", "")))
        raise ApiException(
            status=int(status.get("code") or 500), reason=str(status.get("message", "watch error"))
        )
    return event

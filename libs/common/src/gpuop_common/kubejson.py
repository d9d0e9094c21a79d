# mypy: disallow-untyped-calls=False
# (the kubernetes client is only partly annotated; this module wraps it in typed calls)
"""JSON-dict calls over the `kubernetes` client's ApiClient, shared by the operator and the simulator.

Auth, TLS and kubeconfig come from the client's own `ApiClient`; requests and responses are plain
JSON dicts, never the generated models, so 1,000-node lists and busy watch streams stay cheap to
decode. `Resource` says where a kind lives in the REST tree; `KubeJson` does get/list/create/
replace/patch/delete/watch against one API server.
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
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST tree; `kind` (when known) is filled into listed items."""

    group_version: str  # "v1", "apps/v1", "gpuop.dev/v1alpha1"
    plural: str
    kind: str = ""
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


NODES = Resource("v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("v1", "namespaces", "Namespace", namespaced=False)
PODS = Resource("v1", "pods", "Pod")
CONFIGMAPS = Resource("v1", "configmaps", "ConfigMap")
SECRETS = Resource("v1", "secrets", "Secret")
EVENTS = Resource("v1", "events", "Event")
DAEMONSETS = Resource("apps/v1", "daemonsets", "DaemonSet")
DEPLOYMENTS = Resource("apps/v1", "deployments", "Deployment")
REPLICASETS = Resource("apps/v1", "replicasets", "ReplicaSet")
JOBS = Resource("batch/v1", "jobs", "Job")
CRDS = Resource(
    "apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
RESOURCESLICES = Resource("resource.k8s.io/v1", "resourceslices", "ResourceSlice", namespaced=False)
RESOURCECLAIMS = Resource("resource.k8s.io/v1", "resourceclaims", "ResourceClaim")
DEVICECLASSES = Resource("resource.k8s.io/v1", "deviceclasses", "DeviceClass", namespaced=False)
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")


class WatchExpiredError(Exception):
    """The watch's resourceVersion is too old (410 Gone): the caller must list again."""


def is_status(error: BaseException, *codes: int) -> bool:
    """Whether `error` is an API answer with one of `codes`; an expired watch counts as 410."""
    if isinstance(error, WatchExpiredError):
        return 410 in codes
    return isinstance(error, ApiException) and error.status in codes


def _query(params: dict[str, Any] | None) -> list[tuple[str, Any]]:
    # The API server spells booleans in lower case; None means "not given", never the string "None".
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
        accept: str = "application/json",
    ) -> Any:
        headers = {"Accept": accept}
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
        """One request; a non-2xx answer raises ApiException carrying the server's Status body."""
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

    def text(self, path: str, *, query: dict[str, Any] | None = None) -> str:
        """GET a plain-text subresource (`pods/<name>/log`); non-2xx raises ApiException."""
        response = self._send(
            "GET",
            path,
            query=query,
            body=None,
            content_type="",
            timeout=self.timeout,
            accept="text/plain, */*",
        )
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(
                http_resp=response, body=response.data.decode(errors="replace"), data=None
            )
        return bytes(response.data or b"").decode(errors="replace")

    def get(self, resource: Resource, name: str, namespace: str | None = None) -> JsonObj:
        return self.call("GET", resource.path(namespace, name))

    def list(
        self, resource: Resource, namespace: str | None = None, **query: Any
    ) -> tuple[list[JsonObj], str]:
        """Items and the list's resourceVersion (to start a watch from)."""
        result = self.call("GET", resource.path(namespace), query=query)
        items: list[JsonObj] = result.get("items") or []
        if resource.kind:
            for item in items:
                # Lists omit kind/apiVersion on items; ownerReferences and logs need them.
                item.setdefault("kind", resource.kind)
                item.setdefault("apiVersion", resource.group_version)
        return items, str((result.get("metadata") or {}).get("resourceVersion", ""))

    def create(self, resource: Resource, body: JsonObj, namespace: str | None = None) -> JsonObj:
        return self.call("POST", resource.path(namespace), body=body)

    def replace(self, resource: Resource, name: str, body: JsonObj, namespace: str | None = None) -> JsonObj:
        return self.call("PUT", resource.path(namespace, name), body=body)

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
        """A merge patch by default; pass JSON_PATCH (a list of ops) or STRATEGIC_MERGE_PATCH."""
        return self.call("PATCH", resource.path(namespace, name, sub), body=body, content_type=content_type)

    def replace_status(self, resource: Resource, obj: JsonObj, status: JsonObj) -> JsonObj:
        """Write `status` to exactly this object: a same-named successor (other uid) gets 422, untouched."""
        metadata = obj.get("metadata") or {}
        ops = [
            {"op": "test", "path": "/metadata/uid", "value": metadata.get("uid")},
            {"op": "replace", "path": "/status", "value": status},
        ]
        return self.patch(
            resource,
            str(metadata.get("name")),
            ops,
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
        body: JsonObj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            # Never delete a newer object that reused the name.
            body["preconditions"] = {"uid": uid}
        self.call("DELETE", resource.path(namespace, name), body=body)

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

        A 410 Gone (as the answer or as an ERROR event) raises WatchExpiredError: list again.
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

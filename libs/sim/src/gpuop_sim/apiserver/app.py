"""HTTP layer: routes kube-apiserver paths onto ApiCore, with faults, stats and content types."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gpuop_sim.apiserver import discovery, errors, patches, protobody, ssa, tables
from gpuop_sim.apiserver.core import ApiCore, Result, WriteOptions
from gpuop_sim.apiserver.decode import decode_body, field_validation
from gpuop_sim.apiserver.errors import ApiError, cause
from gpuop_sim.apiserver.faults import Faults, RequestRecord, RequestStats, reason_for
from gpuop_sim.apiserver.logstream import serve_pod_log
from gpuop_sim.apiserver.openapi import OpenApi, load_error
from gpuop_sim.apiserver.podlog import PodLogSource
from gpuop_sim.apiserver.resources import ResourceType
from gpuop_sim.apiserver.store import dumps
from gpuop_sim.apiserver.subresources import (
    bind_pod,
    evict_pod,
    finalize_namespace,
    get_scale,
    request_token,
    scale_view,
    write_scale,
)
from gpuop_sim.apiserver.watch import WatchHub

log = logging.getLogger(__name__)
JsonObj = dict[str, Any]
PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+cbor": "apply",
}


# Subresources with behaviour here; the others in discovery (exec, attach, proxy...) answer 405.
SERVED_SUBRESOURCES = frozenset({"", "status", "scale", "binding", "eviction", "finalize", "log", "token"})


@dataclass
class Target:
    rt: ResourceType
    namespace: str | None  # None: all namespaces (collections only)
    name: str
    subresource: str


class Router:
    def __init__(self, core: ApiCore, hub: WatchHub, faults: Faults, stats: RequestStats) -> None:
        self.core = core
        self.hub = hub
        self.faults = faults
        self.stats = stats
        self.address = "127.0.0.1:0"
        # Where pods/log finds container logs; None (a bare API server, no kubelets) serves empty logs.
        self.pod_logs: PodLogSource | None = None
        self.openapi = OpenApi(core.registry)

    # ---------------------------------------------------------------- entry
    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            response = await self._handle(request)
        except ApiError as exc:
            response = error_response(exc)
        except Exception:  # a simulator bug must answer 500, not kill the connection
            log.exception("internal error serving %s %s", request.method, request.path_qs)
            response = error_response(errors.internal("internal error in the simulated API server"))
        headers = request.headers
        if protobody.accepts_only_protobuf(headers.get("Accept", "")):
            response = _as_protobuf(response)
        self.stats.log(
            RequestRecord(
                request.method,
                request.path,
                dict(request.query),
                headers.get("Content-Type"),
                headers.get("Accept"),
                response.status,
            )
        )
        return response

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        query = dict(request.query)
        if path in ("/readyz", "/healthz", "/livez"):
            return web.Response(text="ok", content_type="text/plain")
        if path == "/version":
            return json_response(200, discovery.VERSION_INFO)
        if path.startswith("/openapi"):
            return self._openapi(path, request.headers.get("Accept", ""))
        accept = request.headers.get("Accept", "")
        aggregated = "as=APIGroupDiscoveryList" in accept
        if path == "/api":
            if aggregated:
                return json_response(
                    200, discovery.aggregated(self.core.registry, core=True), aggregated_ct()
                )
            return json_response(200, discovery.api_versions(self.address))
        if path == "/apis":
            if aggregated:
                return json_response(
                    200, discovery.aggregated(self.core.registry, core=False), aggregated_ct()
                )
            return json_response(200, discovery.api_group_list(self.core.registry))
        parts = [p for p in path.split("/") if p]
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 2:
            group = parts[1]
            if len(parts) == 2:
                versions = dict(self.core.registry.groups()).get(group)
                if not versions:
                    raise errors.page_not_found()
                return json_response(200, discovery.api_group(group, versions))
            version, rest = parts[2], parts[3:]
        else:
            raise errors.page_not_found()
        if not rest:
            doc = discovery.resource_list(self.core.registry, group, version)
            if doc is None:
                raise errors.page_not_found()
            return json_response(200, doc)
        target = self._target(group, version, rest)
        return await self._dispatch(request, target, query)

    def _openapi(self, path: str, accept: str) -> web.Response:
        unavailable = load_error()
        if unavailable is not None:
            raise ApiError(503, "ServiceUnavailable", unavailable, {})
        if path == "/openapi/v3":
            # The real server labels the JSON index text/plain (recorded); clients parse it anyway.
            return json_response(200, self.openapi.index(), "text/plain; charset=utf-8")
        if path.startswith("/openapi/v3/"):
            document = self.openapi.document(path[len("/openapi/v3/") :])
            if document is None:
                raise errors.page_not_found()
            return web.Response(
                status=200,
                body=document,
                headers={"Content-Type": "application/json", "X-Varied-Accept": "application/json"},
            )
        if path == "/openapi/v2":
            if "json" not in accept and "*/*" not in accept and accept:
                raise ApiError(
                    406,
                    "NotAcceptable",
                    "the simulated API server serves /openapi/v2 as application/json only "
                    "(use /openapi/v3, as kubectl and helm do when it is served)",
                    {},
                )
            return web.Response(
                status=200, body=self.openapi.v2_bytes(), headers={"Content-Type": "application/json"}
            )
        raise errors.page_not_found()

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        registry = self.core.registry
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        rt = registry.get(group, version, rest[0])
        if rt is None or len(rest) > 3:
            if registry.resources_in(group, version):
                raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
            raise errors.page_not_found()
        if rt.namespaced and namespace is None and len(rest) > 1:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if sub and rt.subresource(sub) is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return Target(rt, namespace if rt.namespaced else "", name, sub)

    # ---------------------------------------------------------------- dispatch
    async def _dispatch(self, request: web.Request, t: Target, query: dict[str, str]) -> web.StreamResponse:
        verb = _verb(request.method, bool(t.name), query.get("watch") in ("true", "1") and not t.name)
        if verb is None:
            raise errors.method_not_allowed()
        await self._inject(verb, t)
        if t.subresource not in SERVED_SUBRESOURCES:
            raise ApiError(
                405,
                "MethodNotAllowed",
                f"{t.rt.plural}/{t.subresource} is not served by the simulated API server",
                {},
            )
        if verb == "watch":
            return await self.hub.serve(request, t.rt, t.namespace, query, self.core.selector(t.rt, query))
        if verb == "get" and t.subresource == "log":
            return await serve_pod_log(request, self.core, self.pod_logs, t.namespace or "", t.name)
        if verb in ("list", "get"):
            return await self._read(
                t, verb, query, wants_table=tables.wants_table(request.headers.get("Accept", ""))
            )
        raw = await request.read()
        ctype = request.headers.get("Content-Type", "")
        if protobody.is_protobuf(ctype) and raw:
            # helm's release Secrets, `kubectl create namespace`, typed deletes: decoded to JSON here.
            try:
                raw, ctype = dumps(protobody.decode(raw)), "application/json"
            except protobody.ProtobufBodyError as exc:
                raise protobody.unsupported(exc) from exc
        elif "protobuf" in ctype or "cbor" in ctype:
            raise errors.unsupported_media(
                f"the simulated API server accepts JSON, YAML and (for a few kinds) protobuf bodies, not "
                f"{ctype.split(';')[0]}; send JSON instead (kubectl apply -f <manifest> does)"
            )
        dry_run = query.get("dryRun") == "All"
        ns = t.namespace or ""
        if verb == "delete":
            return result_response(
                self.core.delete(t.rt, ns, t.name, _delete_options(raw, query, ctype), dry_run)
            )
        if verb == "deletecollection":
            options = _delete_options(raw, query, ctype)
            return result_response(self.core.delete_collection(t.rt, t.namespace, query, options, dry_run))
        if verb == "create" and t.subresource:
            return result_response(self._action(t, decode_body(raw, ctype, t.rt.kind).value))
        manager = query.get("fieldManager") or request.headers.get("User-Agent", "unknown").split("/")[0]
        opts_kind = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions"}[verb]
        opts = WriteOptions(dry_run, field_validation(query, opts_kind), manager)
        if t.subresource == "scale":
            return result_response(self._write_scale(t, verb, raw, ctype, opts))
        if verb == "patch":
            return result_response(self._patch(t, raw, ctype, query, opts))
        return result_response(self._create_or_update(t, verb, raw, ctype, opts))

    async def _inject(self, verb: str, t: Target) -> None:
        """Count the request, then apply injected latency, hangs and failures."""
        injected = self.faults.consult(verb, t.rt.plural, t.name, t.subresource)
        self.stats.record(verb, t.rt.plural)
        if injected.delay:
            await asyncio.sleep(injected.delay)
        if injected.hang:
            await asyncio.sleep(3600)
        if injected.code:
            raise ApiError(
                injected.code, reason_for(injected.code), f"injected failure ({verb} {t.rt.plural})", {}
            )

    async def _read(
        self, t: Target, verb: str, query: dict[str, str], *, wants_table: bool
    ) -> web.StreamResponse:
        rt, ns = t.rt, t.namespace
        if verb == "get":
            if t.subresource == "scale":
                return result_response(get_scale(self.core, rt, ns or "", t.name))
            stored = self.core.get(rt, ns or "", t.name)
            if wants_table:
                meta = {"resourceVersion": stored.obj["metadata"]["resourceVersion"]}
                return json_response(200, tables.table(rt, [stored.obj], meta))
            return raw_response(200, stored.raw)
        rv = query.get("resourceVersion", "")
        if rv and query.get("resourceVersionMatch", "NotOlderThan") == "NotOlderThan":
            await self._wait_for_rv(int(rv) if rv.isdigit() else 0)
        items, meta = self.core.list_items(rt, ns, query)
        if wants_table:
            return json_response(200, tables.table(rt, [s.obj for s in items], meta))
        return raw_response(
            200, _list_bytes(rt, [s.list_item if rt.custom is None else s.raw for s in items], meta)
        )

    def _action(self, t: Target, body: Any) -> Result:
        """POST to an action subresource (pods/binding, pods/eviction)."""
        if t.subresource == "binding":
            return bind_pod(self.core, t.namespace or "", t.name, body)
        if t.subresource == "eviction":
            return evict_pod(self.core, t.namespace or "", t.name, body)
        if t.subresource == "token" and t.rt.plural == "serviceaccounts":
            return request_token(self.core, t.namespace or "", t.name, body)
        raise errors.method_not_allowed()

    def _patch(self, t: Target, raw: bytes, ctype: str, query: dict[str, str], opts: WriteOptions) -> Result:
        rt, ns = t.rt, t.namespace or ""
        ptype = PATCH_TYPES.get(ctype.split(";", maxsplit=1)[0].strip().lower())
        if ptype is None:
            raise errors.unsupported_media("415: Unsupported Media Type", {})
        if ptype == "strategic" and rt.custom is not None:
            raise errors.unsupported_media(
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            )
        if ptype != "apply":
            body = decode_body(raw, "application/json", rt.kind).value
            return self.core.patch(rt, ns, t.name, ptype, body, opts=opts, subresource=t.subresource)
        if not query.get("fieldManager"):
            raise errors.invalid_options(
                "PatchOptions",
                [cause("FieldValueRequired", "Required value: is required for apply patch", "fieldManager")],
            )
        body = decode_body(raw, "application/apply-patch+yaml", rt.kind).value
        force = query.get("force") == "true"
        return ssa.apply(self.core, rt, ns, t.name, body, opts=opts, force=force, subresource=t.subresource)

    def _create_or_update(self, t: Target, verb: str, raw: bytes, ctype: str, opts: WriteOptions) -> Result:
        rt, ns = t.rt, t.namespace or ""
        decoded = decode_body(raw, ctype, rt.kind)
        if decoded.duplicates:
            dup = ", ".join(f'duplicate field "{d}"' for d in decoded.duplicates)
            if opts.field_validation == "Strict":
                raise errors.bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                    f"{rt.kind}: strict decoding error: {dup}"
                )
            if opts.field_validation == "Warn":
                opts.warnings.append(dup)
        if verb == "create":
            return self.core.create(rt, ns, decoded.value, opts)
        if rt.kind == "Namespace" and t.subresource == "finalize":
            return finalize_namespace(self.core, t.name, decoded.value)
        return self.core.update(rt, ns, t.name, decoded.value, opts, subresource=t.subresource)

    def _write_scale(self, t: Target, verb: str, raw: bytes, ctype: str, opts: WriteOptions) -> Result:
        """PUT or PATCH (merge/JSON/strategic) of a Scale subresource."""
        ns = t.namespace or ""
        if verb == "update":
            return write_scale(self.core, t.rt, ns, t.name, decode_body(raw, ctype, "Scale").value, opts=opts)
        ptype = PATCH_TYPES.get(ctype.split(";", maxsplit=1)[0].strip().lower())
        if ptype not in ("merge", "strategic", "json"):
            raise errors.unsupported_media("415: Unsupported Media Type", {})
        scale = scale_view(t.rt, self.core.get(t.rt, ns, t.name).obj)
        body = decode_body(raw, "application/json", "Scale").value
        patched: Any = None
        try:
            if ptype == "json":
                patched = patches.json_patch(scale, body)
            elif isinstance(body, dict):
                patched = patches.merge_patch(scale, body)
        except patches.PatchError as exc:
            raise ApiError(
                422, "Invalid", "the server rejected our request due to an error in our request", {}
            ) from exc
        return write_scale(self.core, t.rt, ns, t.name, patched, opts=opts)

    async def _wait_for_rv(self, rv: int) -> None:
        """A list at a future rv waits briefly (NotOlderThan), then times out like the real server."""
        if rv <= self.core.store.rv:
            return
        for _ in range(10):
            await asyncio.sleep(0.05)
            if rv <= self.core.store.rv:
                return
        raise ApiError(
            504,
            "Timeout",
            f"Timeout: Too large resource version: {rv}, current: {self.core.store.rv}",
            {
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            },
        )


def _verb(method: str, named: bool, watch: bool) -> str | None:
    if method == "GET":
        return "watch" if watch else ("get" if named else "list")
    if method == "POST":
        return "create"
    if method == "PUT" and named:
        return "update"
    if method == "PATCH" and named:
        return "patch"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return None


def _delete_options(raw: bytes, query: dict[str, str], ctype: str) -> JsonObj:
    options: JsonObj = {}
    if raw.strip():
        value = decode_body(raw, ctype, "DeleteOptions").value
        if isinstance(value, dict):
            options = value
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if "gracePeriodSeconds" in query:
        try:
            options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
        except ValueError as exc:
            raise errors.bad_request(f"invalid gracePeriodSeconds: {query['gracePeriodSeconds']}") from exc
    if options.get("orphanDependents") is True and "propagationPolicy" not in options:
        options["propagationPolicy"] = "Orphan"
    return options


def _list_bytes(rt: ResourceType, items: list[bytes], meta: JsonObj) -> bytes:
    head = dumps({"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta})
    return head[:-1] + b',"items":[' + b",".join(items) + b"]}"


def aggregated_ct() -> str:
    return "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def _as_protobuf(response: web.StreamResponse) -> web.StreamResponse:
    """Re-encode a JSON answer for a client that accepts only protobuf (406 for other kinds)."""
    if not isinstance(response, web.Response) or response.content_type != "application/json":
        return response
    try:
        body = protobody.encode(json.loads(response.body or b"{}"))  # type: ignore[arg-type]
    except (protobody.ProtobufBodyError, ValueError):
        return error_response(
            ApiError(
                406, "NotAcceptable", "only the following media types are accepted: application/json", {}
            )
        )
    out = web.Response(status=response.status, body=body, headers={"Content-Type": protobody.MEDIA_TYPE})
    for warning in response.headers.getall("Warning", []):
        out.headers.add("Warning", warning)
    return out


def json_response(code: int, body: Any, content_type: str = "application/json") -> web.Response:
    return web.Response(status=code, body=dumps(body), headers={"Content-Type": content_type})


def raw_response(code: int, body: bytes, warnings: list[str] | None = None) -> web.Response:
    resp = web.Response(status=code, body=body, headers={"Content-Type": "application/json"})
    for w in warnings or []:
        resp.headers.add("Warning", '299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return resp


def result_response(result: Result) -> web.Response:
    body = result.body if isinstance(result.body, bytes) else dumps(result.body)
    return raw_response(result.code, body, result.warnings)


def error_response(exc: ApiError) -> web.Response:
    if exc.text is not None:
        return web.Response(status=exc.code, text=exc.text, content_type="text/plain")
    return json_response(exc.code, exc.status())

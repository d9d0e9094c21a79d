"""The storage-facing half of the API: create, update, patch, delete, list for any resource type.

No HTTP here: methods take decoded request facts and return (status code, body, warnings), so the
same logic serves the HTTP layer, the controllers and tests. Everything runs on the server's event
loop thread, so no locking is needed around the store.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuop_sim.apiserver import admission, crd, errors, kinds, managed, patches, validation
from gpuop_sim.apiserver.errors import ApiError, cause
from gpuop_sim.apiserver.resources import ResourceRegistry, ResourceType
from gpuop_sim.apiserver.selectors import (
    FIELD_SELECTORS,
    SelectorError,
    make_predicate,
    parse_field_selector,
    parse_label_selector,
)
from gpuop_sim.apiserver.store import Store, Stored, TooOldError

JsonObj = dict[str, Any]
PROPAGATION = ("Foreground", "Background", "Orphan")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Result:
    code: int
    body: JsonObj | bytes
    warnings: list[str] = field(default_factory=list)


@dataclass
class WriteOptions:
    dry_run: bool = False
    field_validation: str = "Warn"
    field_manager: str = ""
    warnings: list[str] = field(default_factory=list)


def _spec_part(obj: JsonObj) -> JsonObj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _ns_of(obj: JsonObj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


class ApiCore:
    def __init__(self, registry: ResourceRegistry, store: Store) -> None:
        self.registry = registry
        self.store = store
        self._next_ip = 1
        # Hooks the server wires in (CRD establishment, garbage collection, ...).
        self.after_write: list[Callable[[ResourceType, str, JsonObj | None, JsonObj | None], None]] = []

    # ------------------------------------------------------------------ helpers
    def allocate_ip(self) -> str:
        self._next_ip += 1
        return f"10.96.{self._next_ip // 250}.{self._next_ip % 250 + 1}"

    def _notify(self, rt: ResourceType, verb: str, old: JsonObj | None, new: JsonObj | None) -> None:
        for hook in self.after_write:
            hook(rt, verb, old, new)

    def namespace_check(self, rt: ResourceType, ns: str, name: str) -> None:
        """NamespaceLifecycle admission: the namespace must exist and not be terminating."""
        if not rt.namespaced:
            return
        ns_rt = self._namespaces()
        stored = self.store.get(ns_rt.key, "", ns)
        if stored is None:
            raise errors.not_found(ns_rt, ns)
        if (stored.obj.get("status") or {}).get("phase") == "Terminating":
            raise errors.forbidden(
                rt,
                name,
                f"unable to create new content in namespace {ns} because it is being terminated",
                [cause("NamespaceTerminating", f"namespace {ns} is being terminated", "metadata.namespace")],
            )

    def _namespaces(self) -> ResourceType:
        rt = self.registry.get("", "v1", "namespaces")
        assert rt is not None
        return rt

    def _check_unknown(self, rt: ResourceType, obj: JsonObj, opts: WriteOptions, *, on_create: bool) -> None:
        """Unknown fields: pruned (CRs) or ignored (built-ins), warned or rejected per fieldValidation."""
        before = (
            json.dumps(obj, sort_keys=True, separators=(",", ":"))
            if not on_create and opts.field_validation == "Strict"
            else ""
        )
        if rt.custom is not None:
            unknown = crd.prune(obj, rt.custom.schema)
        else:
            allowed = kinds.top_level_fields(rt.kind)
            unknown = [k for k in obj if k not in allowed]
            for key in unknown:
                obj.pop(key, None)
        if not unknown or opts.field_validation == "Ignore":
            return
        if opts.field_validation == "Strict":
            detail = ", ".join(f'unknown field "{u}"' for u in unknown)
            if on_create:
                raise errors.bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict decoding error: {detail}'
                )
            # The update path quotes the whole patched object, as the real server does.
            msg = f"Invalid value: {validation.quote(before)}: strict decoding error: {detail}"
            raise ApiError(
                422,
                "Invalid",
                f' "" is invalid: patch: {msg}',
                {"causes": [cause("FieldValueInvalid", msg, "patch")]},
            )
        opts.warnings += [f'unknown field "{u}"' for u in unknown]

    def _check_kind(self, rt: ResourceType, obj: Any) -> JsonObj:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the object provided is unrecognized (must be of type {rt.kind})")
        kind = obj.get("kind")
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f'{kind} in version "{rt.version}" cannot be handled as a {rt.kind}: converting '
                f"({rt.version}.{kind}) to ({rt.group or 'core'}.{rt.kind}): unknown conversion"
            )
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version
        meta = obj.get("metadata")
        if meta is None:
            obj["metadata"] = {}
        elif not isinstance(meta, dict):
            raise errors.bad_request(f"{rt.kind}.metadata must be an object")
        for mtime in kinds.MICROTIME_FIELDS.get(rt.kind, ()):
            cur: Any = obj
            for part in mtime:
                cur = cur.get(part) if isinstance(cur, dict) else None
            if rt.group == "" and rt.kind == "Event":
                continue  # core Events accept any RFC 3339 eventTime
            problem = admission.microtime_error(cur)
            if problem:
                raise errors.bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {problem}'
                )
        return obj

    def _validate(self, rt: ResourceType, obj: JsonObj, *, update: bool) -> None:
        meta = obj["metadata"]
        causes = validation.validate_metadata(obj, rt.kind)
        if rt.custom is not None:
            causes += crd.validate_cr(obj, rt.custom.schema)
        causes += self._kind_validation(rt, obj)
        if causes:
            if update and rt.kind == "Node":
                # The real Node update path reports metadata causes four times (pinned by a transcript).
                causes = [c for c in causes for _ in range(4 if c["field"] == "metadata.labels" else 1)]
            # events.k8s.io Events are validated as core Events (the message names no group).
            raise errors.invalid(rt, meta.get("name", ""), causes, group=rt.group != "events.k8s.io")

    def _kind_validation(self, rt: ResourceType, obj: JsonObj) -> list[JsonObj]:
        if rt.kind == "Pod":
            return admission.validate_pod_spec(obj.get("spec") or {})
        if rt.kind == "Node":
            return admission.validate_node(obj)
        if rt.kind == "Event" and rt.group == "":
            return admission.validate_core_event(obj)
        if rt.kind == "Event" and rt.group == "events.k8s.io":
            return admission.validate_events_v1(obj)
        if rt.kind in ("DaemonSet", "Deployment", "ReplicaSet", "StatefulSet", "Job"):
            return admission.validate_pod_spec(
                ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}, "spec.template.spec"
            )
        if rt.kind == "CustomResourceDefinition":
            return crd.validate_crd(obj)
        return []

    # ------------------------------------------------------------------ reads
    def get(self, rt: ResourceType, ns: str, name: str) -> Stored:
        stored = self.store.get(rt.key, ns, name)
        if stored is None:
            raise errors.not_found(rt, name)
        return stored

    def list(self, rt: ResourceType, ns: str | None, query: dict[str, str]) -> tuple[list[Stored], JsonObj]:
        """Selected objects and the list metadata (resourceVersion, continue, remainingItemCount)."""
        predicate = self.selector(rt, query)
        rv_param = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        if match and not rv_param:
            raise errors.invalid_options(
                "ListOptions",
                [
                    cause(
                        "FieldValueForbidden",
                        "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                        "resourceVersionMatch",
                    )
                ],
            )
        token = query.get("continue", "")
        start_after: tuple[str, str] | None = None
        list_rv = self.store.rv
        items: list[Stored]
        try:
            if token:
                list_rv, start_after = _decode_continue(token)
                items = self.store.snapshot(rt.key, list_rv, ns)
            elif match == "Exact":
                list_rv = int(rv_param)
                items = self.store.snapshot(rt.key, list_rv, ns)
            else:
                items = self.store.items(rt.key, ns)
        except TooOldError as exc:
            if token:
                raise errors.expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a "
                    "new list without the continue parameter, or use the continue token in this response to retrieve "
                    "the remainder of the results. Continuing with the provided token results in an inconsistent list "
                    "- objects that were created, modified, or deleted between the time the first chunk was returned "
                    "and now may show up in the list.",
                    metadata={"continue": _encode_continue(self.store.rv, start_after or ("", ""))},
                ) from exc
            raise errors.expired("The resourceVersion for the provided list is too old.") from exc
        except ValueError as exc:
            raise errors.bad_request(f"invalid resource version or continue token: {exc}") from exc
        if start_after is not None:
            items = [s for s in items if (_ns_of(s.obj), s.obj["metadata"]["name"]) > start_after]
        if predicate is not None:
            items = [s for s in items if predicate(s.obj)]
        meta: JsonObj = {"resourceVersion": str(list_rv)}
        limit = int(query.get("limit") or 0)
        if limit > 0 and len(items) > limit:
            last = items[limit - 1].obj
            meta["continue"] = _encode_continue(list_rv, (_ns_of(last), last["metadata"]["name"]))
            if predicate is None:
                meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return items, meta

    def selector(self, rt: ResourceType, query: dict[str, str]) -> Callable[[JsonObj], bool] | None:
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            supported = rt.custom.selectable_fields if rt.custom else FIELD_SELECTORS.get(rt.key, ())
            fields = parse_field_selector(
                query.get("fieldSelector", ""), supported, custom=rt.custom is not None
            )
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
        return make_predicate(labels, fields)

    # ------------------------------------------------------------------ create
    def create(
        self,
        rt: ResourceType,
        ns: str,
        body: Any,
        opts: WriteOptions,
        *,
        managed_entry: tuple[str, str, set[managed.Path]] | None = None,
    ) -> Result:
        obj = self._check_kind(rt, body)
        meta = obj["metadata"]
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + admission.random_suffix()
        self.namespace_check(rt, ns, meta.get("name", ""))
        self._check_unknown(rt, obj, opts, on_create=True)
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if rt.custom is not None or rt.kind in admission.GENERATION_KINDS:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.has_status() and rt.kind not in kinds.STATUS_ON_CREATE:
            obj.pop("status", None)
        if rt.custom is not None:
            crd.apply_defaults(obj, rt.custom.schema)
        defaulter = kinds.CREATE_DEFAULTS.get(rt.kind) if rt.custom is None else None
        if defaulter is not None:
            defaulter(obj, kinds.CreateContext(rt.group, self.allocate_ip))
        if rt.kind == "Pod" and rt.group == "":
            self._admit_pod(rt, obj)
        if rt.kind == "DaemonSet":
            meta.setdefault("annotations", {})["deprecated.daemonset.template.generation"] = "1"
        if rt.kind == "CustomResourceDefinition":
            crd.default_crd(obj)
        self._validate(rt, obj, update=False)
        if self.store.get(rt.key, ns if rt.namespaced else "", meta["name"]) is not None:
            raise errors.already_exists(rt, meta["name"])
        meta.pop("managedFields", None)
        if managed_entry is not None:
            manager, operation, paths = managed_entry
            meta["managedFields"] = managed.set_entry([], rt, manager, operation, "", paths)
        elif opts.field_manager:
            managed.track_update(rt, None, obj, opts.field_manager, "")
        if opts.dry_run:
            return Result(201, obj, opts.warnings)
        meta["resourceVersion"] = str(self.store.next_rv())
        stored = self.store.put(rt.key, obj, created=True)
        self._notify(rt, "create", None, stored.obj)
        return Result(201, stored.raw, opts.warnings)

    def _admit_pod(self, rt: ResourceType, pod: JsonObj) -> None:
        spec = pod.setdefault("spec", {})
        sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        ns = pod["metadata"]["namespace"]
        sa_rt = self.registry.get("", "v1", "serviceaccounts")
        assert sa_rt is not None
        exists = self.store.get(sa_rt.key, ns, sa) is not None
        if admission.admit_pod(pod, exists) is None:
            raise ApiError(
                403,
                "Forbidden",
                f'pods "{pod["metadata"].get("name", "")}" is forbidden: error looking up service account {ns}/{sa}: '
                f'serviceaccount "{sa}" not found',
                {"name": pod["metadata"].get("name", ""), "kind": "pods"},
            )

    # ------------------------------------------------------------------ update
    def update(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        body: Any,
        opts: WriteOptions,
        *,
        subresource: str = "",
        require_rv: bool = True,
        on_create: bool = False,
    ) -> Result:
        obj = self._check_kind(rt, body)
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        current = self.store.get(rt.key, ns, name)
        if current is None:
            if rt.kind in kinds.CREATE_ON_UPDATE and not subresource:
                meta["name"] = name
                return self.create(rt, ns, obj, opts)
            raise errors.not_found(rt, name)
        old = current.obj
        rv = meta.get("resourceVersion")
        if rv:
            if rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(rt, name)
        elif require_rv and rt.custom is not None:
            raise errors.invalid(
                rt,
                name,
                [
                    cause(
                        "FieldValueInvalid",
                        "Invalid value: 0: must be specified for an update",
                        "metadata.resourceVersion",
                    )
                ],
                by_plural=True,
            )
        return self.write_update(rt, current, obj, opts, subresource=subresource, on_create=on_create)

    def write_update(
        self,
        rt: ResourceType,
        current: Stored,
        obj: JsonObj,
        opts: WriteOptions,
        *,
        subresource: str,
        on_create: bool = False,
    ) -> Result:
        old = current.obj
        meta = obj["metadata"]
        if subresource == "status":
            status = obj.get("status")
            new = current.copy()
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
            if "managedFields" in meta:
                new["metadata"]["managedFields"] = meta["managedFields"]
            obj, meta = new, new["metadata"]
            if rt.custom is not None:
                self._check_unknown(rt, obj, opts, on_create=False)
        else:
            self._check_unknown(rt, obj, opts, on_create=on_create)
            if rt.has_status():
                if "status" in old:
                    obj["status"] = json.loads(json.dumps(old["status"]))
                else:
                    obj.pop("status", None)
        # Fields a client can never change through an update.
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        meta["name"] = old["metadata"]["name"]
        if rt.namespaced:
            meta["namespace"] = old["metadata"]["namespace"]
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if rt.custom is not None:
            crd.apply_defaults(obj, rt.custom.schema)
        else:
            kinds.default_on_update(rt.kind, old, obj)
        if "deletionTimestamp" in old["metadata"]:
            added = validation.new_finalizers(old, obj)
            if added:
                msg = (
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers "
                    + validation.go_string_slice(added)
                )
                # The real server reports this cause twice (metadata and object validation).
                forbidden = cause("FieldValueForbidden", msg, "metadata.finalizers")
                raise errors.invalid(rt, meta["name"], [forbidden, dict(forbidden)])
        if "generation" in meta and _spec_part(obj) != _spec_part(old):
            meta["generation"] = int(meta["generation"]) + 1
            if rt.kind == "DaemonSet" and (obj.get("spec") or {}).get("template") != (
                old.get("spec") or {}
            ).get("template"):
                meta.setdefault("annotations", {})["deprecated.daemonset.template.generation"] = str(
                    meta["generation"]
                )
        self._validate(rt, obj, update=True)
        if rt.kind == "CustomResourceDefinition" and subresource != "status":
            obj["status"] = old.get("status")
        if _same(obj, old):
            return Result(200, current.raw, opts.warnings)
        if opts.field_manager:
            managed.track_update(rt, old, obj, opts.field_manager, subresource)
        if opts.dry_run:
            return Result(200, obj, opts.warnings)
        meta["resourceVersion"] = str(self.store.next_rv())
        if "deletionTimestamp" in meta and not meta.get("finalizers"):
            stored = self.store.remove(rt.key, obj)
            self._notify(rt, "delete", old, None)
            return Result(200, stored.raw, opts.warnings)
        stored = self.store.put(rt.key, obj, created=False)
        self._notify(rt, "update", old, stored.obj)
        return Result(200, stored.raw, opts.warnings)

    # ------------------------------------------------------------------ patch
    def patch(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        ptype: str,
        body: Any,
        opts: WriteOptions,
        *,
        subresource: str = "",
    ) -> Result:
        current = self.store.get(rt.key, ns, name)
        if current is None:
            raise errors.not_found(rt, name)
        target = current.copy()
        try:
            if ptype == "json":
                patched = patches.json_patch(target, body)
            elif ptype == "merge":
                if not isinstance(body, dict):
                    raise patches.PatchError("merge patch must be an object")
                patched = patches.merge_patch(target, body)
            else:
                if not isinstance(body, dict):
                    raise patches.PatchError("strategic merge patch must be an object")
                patched = patches.strategic_merge_patch(target, body, rt.kind)
        except patches.PatchError as exc:
            raise ApiError(
                422, "Invalid", "the server rejected our request due to an error in our request", {}
            ) from exc
        if not isinstance(patched, dict):
            raise ApiError(
                422, "Invalid", "the server rejected our request due to an error in our request", {}
            )
        patched.setdefault("metadata", {})
        if patched["metadata"].get("resourceVersion") != current.obj["metadata"]["resourceVersion"]:
            if patched["metadata"].get("resourceVersion"):
                raise errors.conflict(rt, name)
            patched["metadata"]["resourceVersion"] = current.obj["metadata"]["resourceVersion"]
        patched = self._check_kind(rt, patched)
        return self.write_update(rt, current, patched, opts, subresource=subresource)

    # ------------------------------------------------------------------ delete
    def delete(self, rt: ResourceType, ns: str, name: str, options: JsonObj, dry_run: bool = False) -> Result:
        policy = options.get("propagationPolicy")
        if policy is not None and policy not in PROPAGATION:
            raise errors.invalid_options(
                "DeleteOptions",
                [
                    cause(
                        "FieldValueNotSupported",
                        f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
                        "propagationPolicy",
                    )
                ],
            )
        current = self.get(rt, ns, name)
        old = current.obj
        pre = options.get("preconditions") or {}
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise errors.precondition_rv_conflict(
                rt, name, pre["resourceVersion"], old["metadata"]["resourceVersion"]
            )
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise errors.precondition_uid_conflict(rt, name, pre["uid"], old["metadata"]["uid"])
        if "deletionTimestamp" in old["metadata"]:
            return Result(200, current.raw)
        obj = current.copy()
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if rt.kind == "Namespace":
            if (obj.get("spec") or {}).get("finalizers"):
                obj["status"] = {"phase": "Terminating"}
                return self._mark_deleting(rt, current, obj, finalizers, 0, dry_run, force=True)
        grace = options.get("gracePeriodSeconds")
        if rt.kind == "Pod" and rt.group == "":
            if grace is None:
                grace = int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            if not (obj.get("spec") or {}).get("nodeName") or (obj.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                grace = 0
            if grace > 0 or finalizers:
                return self._mark_deleting(rt, current, obj, finalizers, grace, dry_run)
            meta["deletionTimestamp"] = now_rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
            meta["generation"] = int(meta.get("generation", 1)) + 1
            return self._remove(rt, current, obj, dry_run, status_body=False)
        if finalizers:
            return self._mark_deleting(rt, current, obj, finalizers, 0, dry_run)
        return self._remove(rt, current, obj, dry_run, status_body=True)

    def _mark_deleting(
        self,
        rt: ResourceType,
        current: Stored,
        obj: JsonObj,
        finalizers: list[str],
        grace: int,
        dry_run: bool,
        *,
        force: bool = False,
    ) -> Result:
        meta = obj["metadata"]
        if finalizers:
            meta["finalizers"] = finalizers
        meta["deletionTimestamp"] = now_rfc3339()
        meta["deletionGracePeriodSeconds"] = grace
        if "generation" in meta:
            # Setting deletionTimestamp counts as a spec change for objects with a generation.
            meta["generation"] = int(meta["generation"]) + 1
        if dry_run:
            return Result(200, obj)
        meta["resourceVersion"] = str(self.store.next_rv())
        stored = self.store.put(rt.key, obj, created=False)
        self._notify(rt, "update", current.obj, stored.obj)
        return Result(200, stored.raw)

    def _remove(
        self, rt: ResourceType, current: Stored, obj: JsonObj, dry_run: bool, *, status_body: bool
    ) -> Result:
        meta = obj["metadata"]
        details: JsonObj = {"name": meta["name"]}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = meta["uid"]
        body: JsonObj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }
        if dry_run:
            return Result(200, body if status_body else obj)
        meta["resourceVersion"] = str(self.store.next_rv())
        stored = self.store.remove(rt.key, obj)
        self._notify(rt, "delete", current.obj, None)
        return Result(200, body if status_body else stored.raw)

    def delete_collection(
        self, rt: ResourceType, ns: str | None, query: dict[str, str], options: JsonObj, dry_run: bool
    ) -> Result:
        items, _ = self.list(
            rt, ns, {k: v for k, v in query.items() if k in ("labelSelector", "fieldSelector")}
        )
        deleted: list[JsonObj] = []
        for stored in items:
            result = self.delete(rt, _ns_of(stored.obj), stored.obj["metadata"]["name"], options, dry_run)
            if isinstance(result.body, bytes) and b'"kind":"Status"' not in result.body[:40]:
                deleted.append(json.loads(result.body))
            else:
                deleted.append(stored.obj)
        return Result(200, list_body(rt, deleted, {"resourceVersion": str(self.store.rv)}))


def _same(a: JsonObj, b: JsonObj) -> bool:
    """Equal apart from managedFields timestamps: a no-op write keeps the resourceVersion."""

    def strip(o: JsonObj) -> JsonObj:
        meta = {k: v for k, v in o.get("metadata", {}).items() if k != "managedFields"}
        return {**o, "metadata": meta}

    return strip(a) == strip(b)


def list_body(rt: ResourceType, items: list[JsonObj], meta: JsonObj) -> JsonObj:
    drop = rt.custom is None
    out = [{k: v for k, v in i.items() if not (drop and k in ("kind", "apiVersion"))} for i in items]
    return {"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta, "items": out}


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    raw = json.dumps(
        {"v": "meta.k8s.io/v1", "rv": rv, "start": f"{start[0]}/{start[1]}"}, separators=(",", ":")
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    padded = token + "=" * (-len(token) % 4)
    data = json.loads(base64.urlsafe_b64decode(padded.encode()))
    ns, _, name = str(data["start"]).partition("/")
    return int(data["rv"]), (ns, name)

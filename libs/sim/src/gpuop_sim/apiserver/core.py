"""The storage-facing half of the API: create, update, patch, delete, list for any resource type.

No HTTP here: methods take decoded request facts and return (status code, body, warnings), so the
same logic serves the HTTP layer, the controllers and tests. Everything runs on the server's event
loop thread, so no locking is needed around the store.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from gpuop_sim.apiserver import (
    admission,
    checks,
    crd,
    dra,
    errors,
    kinds,
    managed,
    patches,
    pods,
    validation,
)
from gpuop_sim.apiserver.base import Result, WriteOptions, _spec_part, now_rfc3339
from gpuop_sim.apiserver.deletion import DeletionMixin
from gpuop_sim.apiserver.errors import ApiError, cause
from gpuop_sim.apiserver.listing import list_body
from gpuop_sim.apiserver.resources import ResourceType
from gpuop_sim.apiserver.store import Stored

JsonObj = dict[str, Any]
__all__ = ["ApiCore", "Result", "WriteOptions", "list_body", "now_rfc3339"]


class ApiCore(DeletionMixin):
    """create/update/patch on top of the list and delete halves (see listing.py, deletion.py)."""

    # ------------------------------------------------------------------ create
    @checks.decode_guard
    def create(
        self,
        rt: ResourceType,
        ns: str,
        body: Any,
        opts: WriteOptions,
        *,
        managed_entry: tuple[str, str, set[managed.Path]] | None = None,
    ) -> Result:
        obj = checks.check_kind(rt, body)
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
            meta["name"] = meta["generateName"] + pods.random_suffix()
        self.namespace_check(rt, ns, meta.get("name", ""))
        checks.check_unknown(rt, obj, opts, on_create=True)
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
        first: list[JsonObj] = []
        if rt.custom is None and rt.group == "resource.k8s.io" and rt.namespaced:
            stored_ns = self.store.get(self._namespaces().key, "", ns)
            labels = ((stored_ns.obj.get("metadata") or {}).get("labels") or {}) if stored_ns else {}
            first = dra.admission_causes(rt.kind, obj, labels)
        checks.validate_object(rt, obj, update=False, first=first)
        if self.store.get(rt.key, ns if rt.namespaced else "", meta["name"]) is not None:
            raise errors.already_exists(rt, meta["name"])
        meta.pop("managedFields", None)
        if managed_entry is not None:
            manager, operation, paths = managed_entry
            meta["managedFields"] = managed.set_entry([], rt, manager, operation, sub="", paths=paths)
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
        if pods.admit_pod(pod, exists) is None:
            raise ApiError(
                403,
                "Forbidden",
                f'pods "{pod["metadata"].get("name", "")}" is forbidden: '
                f"error looking up service account {ns}/{sa}: "
                f'serviceaccount "{sa}" not found',
                {"name": pod["metadata"].get("name", ""), "kind": "pods"},
            )

    # ------------------------------------------------------------------ update
    @checks.decode_guard
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
        obj = checks.check_kind(rt, body)
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
                checks.check_unknown(rt, obj, opts, on_create=False)
        else:
            checks.check_unknown(rt, obj, opts, on_create=on_create)
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
        if rt.custom is None and subresource == "":
            frozen = admission.validate_immutable(rt.kind, old, obj)
            if rt.kind == "Pod" and rt.group == "":
                frozen += pods.validate_pod_update(old, obj)
            if frozen:
                raise errors.invalid(rt, meta["name"], frozen)
        if rt.custom is None and subresource == "status" and rt.kind == "Pod" and rt.group == "":
            frozen = pods.validate_pod_status_update(old, obj)
            if frozen:
                raise errors.invalid(rt, meta["name"], frozen)
        if rt.custom is None and rt.group == "resource.k8s.io":
            frozen = dra.validate_update(rt.kind, old, obj, status=subresource == "status")
            if frozen:
                meta_causes = validation.validate_metadata(obj, rt.kind)
                raise errors.invalid(rt, meta["name"], meta_causes + frozen)
        if "deletionTimestamp" in old["metadata"]:
            added = validation.new_finalizers(old, obj)
            if added:
                msg = (
                    "Forbidden: no new finalizers can be added if the object "
                    "is being deleted, found new finalizers " + validation.go_string_slice(added)
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
        checks.validate_object(rt, obj, update=True)
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
    @checks.decode_guard
    def patch(
        self,
        rt: ResourceType,
        ns: str,
        name: str,
        ptype: str,
        body: Any,
        *,
        opts: WriteOptions,
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
        patched = checks.check_kind(rt, patched)
        return self.write_update(rt, current, patched, opts, subresource=subresource)


def _same(a: JsonObj, b: JsonObj) -> bool:
    """Equal apart from managedFields timestamps: a no-op write keeps the resourceVersion."""

    def strip(o: JsonObj) -> JsonObj:
        meta = {k: v for k, v in o.get("metadata", {}).items() if k != "managedFields"}
        return {**o, "metadata": meta}

    return strip(a) == strip(b)

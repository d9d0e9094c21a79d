"""DELETE: propagation policies, preconditions, finalizers, graceful Pod deletion, deletecollection."""

from __future__ import annotations

import json
from typing import Any

from gpuop_sim.apiserver import errors
from gpuop_sim.apiserver.base import PROPAGATION, Result, _ns_of, now_rfc3339
from gpuop_sim.apiserver.errors import cause
from gpuop_sim.apiserver.listing import ListingMixin, list_body
from gpuop_sim.apiserver.resources import ResourceType
from gpuop_sim.apiserver.store import Stored

JsonObj = dict[str, Any]


class DeletionMixin(ListingMixin):
    def delete(self, rt: ResourceType, ns: str, name: str, options: JsonObj, dry_run: bool = False) -> Result:
        policy = options.get("propagationPolicy")
        if policy is not None and policy not in PROPAGATION:
            raise errors.invalid_options(
                "DeleteOptions",
                [
                    cause(
                        "FieldValueNotSupported",
                        f'Unsupported value: "{policy}": supported values: '
                        '"Foreground", "Background", "Orphan", "nil"',
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
            return self._delete_again(rt, current, options.get("gracePeriodSeconds"), dry_run)
        obj = current.copy()
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if rt.kind == "Namespace" and (obj.get("spec") or {}).get("finalizers"):
            # spec.finalizers (the namespace controller's) hold a Namespace in Terminating.
            obj["status"] = {"phase": "Terminating"}
            return self._mark_deleting(rt, current, obj, finalizers, grace=0, dry_run=dry_run)
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
                return self._mark_deleting(rt, current, obj, finalizers, grace=grace, dry_run=dry_run)
            meta["deletionTimestamp"] = now_rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
            meta["generation"] = int(meta.get("generation", 1)) + 1
            return self._remove(rt, current, obj, dry_run, status_body=False)
        if finalizers:
            return self._mark_deleting(rt, current, obj, finalizers, grace=0, dry_run=dry_run)
        return self._remove(rt, current, obj, dry_run, status_body=True)

    def _delete_again(self, rt: ResourceType, current: Stored, grace: Any, dry_run: bool) -> Result:
        """A repeated DELETE changes nothing, except that a shorter grace period shortens a Pod's
        (grace 0 is how the kubelet confirms a pod is gone)."""
        meta = current.obj["metadata"]
        is_pod = rt.kind == "Pod" and rt.group == ""
        if not is_pod or grace is None or int(grace) >= int(meta.get("deletionGracePeriodSeconds") or 0):
            return Result(200, current.raw)
        obj = current.copy()
        obj["metadata"]["deletionGracePeriodSeconds"] = int(grace)
        obj["metadata"]["deletionTimestamp"] = now_rfc3339()
        if int(grace) == 0 and not obj["metadata"].get("finalizers"):
            return self._remove(rt, current, obj, dry_run, status_body=False)
        if dry_run:
            return Result(200, obj)
        obj["metadata"]["resourceVersion"] = str(self.store.next_rv())
        stored = self.store.put(rt.key, obj, created=False)
        self._notify(rt, "update", current.obj, stored.obj)
        return Result(200, stored.raw)

    def _mark_deleting(
        self,
        rt: ResourceType,
        current: Stored,
        obj: JsonObj,
        finalizers: list[str],
        *,
        grace: int,
        dry_run: bool,
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
        items, _ = self.list_items(
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

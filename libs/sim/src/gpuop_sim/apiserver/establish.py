"""What kube-apiserver's own apiextensions controllers do: establish CRDs, clean up on delete.

Unlike controllers.py this is part of the real API server, so it always runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpuop_sim.apiserver import crd
from gpuop_sim.apiserver.core import ApiCore, now_rfc3339
from gpuop_sim.apiserver.resources import ResourceType

JsonObj = dict[str, Any]
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


class CrdEstablisher:
    def __init__(
        self,
        core: ApiCore,
        loop: asyncio.AbstractEventLoop,
        drop_watches: Callable[[str, str], None] | None = None,
    ) -> None:
        self.core = core
        self.loop = loop
        # Open watches on a removed resource end, like the real server's watch cache shutting down.
        self.hub_drop: Callable[[str, str], None] = drop_watches or (lambda _plural, _group: None)
        core.after_write.append(self._after_write)

    def _crd_rt(self) -> ResourceType:
        rt = self.core.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert rt is not None
        return rt

    def _after_write(self, rt: ResourceType, verb: str, old: JsonObj | None, new: JsonObj | None) -> None:
        if rt.plural != "customresourcedefinitions" or rt.group != "apiextensions.k8s.io":
            return
        if new is None:
            if old is not None:
                self._unregister(old)
            return
        name = new["metadata"]["name"]
        if "deletionTimestamp" in new["metadata"]:
            self.loop.call_soon(self._cleanup, name)
        elif verb == "create" or (old is not None and old.get("spec") != new.get("spec")):
            self.loop.call_soon(self._establish, name)

    def _establish(self, name: str) -> None:
        rt = self._crd_rt()
        stored = self.core.store.get(rt.key, "", name)
        if stored is None or "deletionTimestamp" in stored.obj["metadata"]:
            return
        obj = stored.copy()
        others = [s.obj for s in self.core.store.items(rt.key) if s.obj["metadata"]["name"] != name]
        accepted, conditions = crd.accept_names(obj, others)
        old_conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        for cond in conditions:
            prev = old_conditions.get(cond["type"])
            same = prev is not None and prev.get("status") == cond["status"]
            cond["lastTransitionTime"] = (
                prev.get("lastTransitionTime", now_rfc3339()) if same and prev else now_rfc3339()
            )
        status = obj.setdefault("status", {})
        status["acceptedNames"] = accepted
        status["conditions"] = [
            {
                "type": c["type"],
                "status": c["status"],
                "lastTransitionTime": c["lastTransitionTime"],
                "reason": c["reason"],
                "message": c["message"],
            }
            for c in conditions
        ]
        established = conditions[1]["status"] == "True"
        if established:
            fins = obj["metadata"].setdefault("finalizers", [])
            if CLEANUP_FINALIZER not in fins:
                fins.append(CLEANUP_FINALIZER)
            types = crd.resource_types(obj)
            self.core.registry.unregister(obj["spec"]["group"], obj["spec"]["names"]["plural"])
            self.core.registry.register(types)
            for t in types:
                self.core.store.ensure_table(t.key)
        if obj == stored.obj:
            return
        obj["metadata"]["resourceVersion"] = str(self.core.store.next_rv())
        self.core.store.put(rt.key, obj, created=False)

    def _unregister(self, crd_obj: JsonObj) -> None:
        spec = crd_obj.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        self.core.registry.unregister(group, plural)
        # Watchers see every custom resource go, as the real CRD finalizer deletes them one by one.
        for stored in self.core.store.items((group, plural)):
            final = stored.copy()
            final["metadata"]["resourceVersion"] = str(self.core.store.next_rv())
            self.core.store.remove((group, plural), final)
        self.hub_drop(plural, group)
        self.core.store.drop_table((group, plural))

    def _cleanup(self, name: str) -> None:
        """A deleted CRD takes its custom resources with it, then loses its cleanup finalizer."""
        rt = self._crd_rt()
        stored = self.core.store.get(rt.key, "", name)
        if stored is None:
            return
        self._unregister(stored.obj)
        obj = stored.copy()
        obj["metadata"]["finalizers"] = [
            f for f in obj["metadata"].get("finalizers") or [] if f != CLEANUP_FINALIZER
        ]
        obj["metadata"]["resourceVersion"] = str(self.core.store.next_rv())
        if obj["metadata"]["finalizers"]:
            self.core.store.put(rt.key, obj, created=False)
        else:
            self.core.store.remove(rt.key, obj)

"""Cluster behaviour that is NOT kube-apiserver's: optional, switchable controller stand-ins.

A bare kube-apiserver never garbage-collects dependents, empties deleted namespaces or creates
`default` ServiceAccounts (the golden transcripts prove it); kube-controller-manager does. Tests
that want a realistic cluster turn these on (the default for SimApiServer), the conformance
replay turns them off. Each reacts to store events on the event loop, never inline in a write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from gpuop_sim.apiserver.core import ApiCore, WriteOptions
from gpuop_sim.apiserver.errors import ApiError
from gpuop_sim.apiserver.resources import ResourceType
from gpuop_sim.apiserver.store import Event
from gpuop_sim.apiserver.subresources import finalize_namespace

log = logging.getLogger(__name__)
JsonObj = dict[str, Any]
ALL_CONTROLLERS = ("garbagecollector", "namespace", "serviceaccount", "root-ca-cert-publisher")
NAMESPACE_CLEANUP_DELAY_S = 0.2
ROOT_CA = "-----BEGIN CERTIFICATE-----\nMIIBsimulatedgpuopca\n-----END CERTIFICATE-----\n"


def resolve(controllers: bool | Iterable[str]) -> frozenset[str]:
    if controllers is True:
        return frozenset(ALL_CONTROLLERS)
    if controllers is False:
        return frozenset()
    names = frozenset(controllers)
    unknown = names - set(ALL_CONTROLLERS)
    if unknown:
        raise ValueError(f"unknown controllers {sorted(unknown)}; choose from {ALL_CONTROLLERS}")
    return names


class Controllers:
    def __init__(self, core: ApiCore, enabled: frozenset[str], loop: asyncio.AbstractEventLoop) -> None:
        self.core = core
        self.enabled = enabled
        self.loop = loop
        # owner uid -> dependents (resource key, namespace, name), for garbage collection.
        self._dependents: dict[str, set[tuple[tuple[str, str], str, str]]] = {}
        if enabled:
            core.store.subscribe_all(self._on_event)

    def _rt_for(self, key: tuple[str, str]) -> ResourceType | None:
        return next((rt for rt in self.core.registry.all() if rt.key == key), None)

    def _on_event(self, ev: Event) -> None:
        obj = ev.new.obj
        meta = obj.get("metadata") or {}
        if "garbagecollector" in self.enabled:
            self._index(ev)
        if ev.resource == ("", "namespaces"):
            if ev.type == "ADDED" and "serviceaccount" in self.enabled:
                self.loop.call_soon(self._ensure_namespace_defaults, meta["name"])
            if ev.type != "DELETED" and "deletionTimestamp" in meta and "namespace" in self.enabled:
                # Like kube-controller-manager, start a moment later: a client deleting a whole
                # manifest (namespace first) still finds the namespace's objects to delete.
                self.loop.call_later(NAMESPACE_CLEANUP_DELAY_S, self._empty_namespace, meta["name"])
        if "garbagecollector" in self.enabled:
            if ev.type == "DELETED":
                self.loop.call_soon(self._collect, meta.get("uid", ""), "Background")
            elif meta.get("ownerReferences") and "deletionTimestamp" not in meta:
                # A dependent written after its owner went (a controller acting on a stale cache)
                # was not in the owner's dependents when it was collected: verify its owners.
                self.loop.call_soon(
                    self._collect_if_dangling, ev.resource, meta.get("namespace", ""), meta["name"]
                )
            elif "deletionTimestamp" in meta:
                fins = meta.get("finalizers") or []
                if "foregroundDeletion" in fins:
                    self.loop.call_soon(self._finish_owner, ev.resource, obj, "foregroundDeletion")
                elif "orphan" in fins:
                    self.loop.call_soon(self._finish_owner, ev.resource, obj, "orphan")

    # ---------------------------------------------------------------- garbage collector
    def _index(self, ev: Event) -> None:
        ref = (
            ev.resource,
            (ev.new.obj.get("metadata") or {}).get("namespace", ""),
            ev.new.obj["metadata"]["name"],
        )
        if ev.prev is not None:
            for owner in (ev.prev.obj.get("metadata") or {}).get("ownerReferences") or []:
                self._dependents.get(owner.get("uid", ""), set()).discard(ref)
        if ev.type != "DELETED":
            for owner in (ev.new.obj.get("metadata") or {}).get("ownerReferences") or []:
                self._dependents.setdefault(owner.get("uid", ""), set()).add(ref)

    def _collect(self, owner_uid: str, policy: str) -> None:
        for key, ns, name in sorted(self._dependents.pop(owner_uid, set())):
            rt = self._rt_for(key)
            if rt is None:
                continue
            try:
                self.core.delete(rt, ns, name, {"propagationPolicy": policy})
            except ApiError as exc:
                if exc.code != 404:
                    log.warning(
                        "garbage collector could not delete %s %s/%s: %s", rt.plural, ns, name, exc.message
                    )

    def _owner_present(self, ref: JsonObj, namespace: str) -> bool | None:
        """True/False when the owner is/isn't stored with that uid; None for a kind we don't serve."""
        rt = self.core.registry.by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        if rt is None:
            return None
        owner = self.core.store.get(rt.key, namespace if rt.namespaced else "", ref.get("name", ""))
        return owner is not None and owner.obj["metadata"].get("uid") == ref.get("uid")

    def _collect_if_dangling(self, key: tuple[str, str], ns: str, name: str) -> None:
        """kube-controller-manager's rule for absent owners: with none left the dependent is deleted,
        with some left the absent ones are taken out of its ownerReferences."""
        rt = self._rt_for(key)
        stored = self.core.store.get(key, ns, name) if rt else None
        if rt is None or stored is None or "deletionTimestamp" in stored.obj["metadata"]:
            return
        refs = stored.obj["metadata"].get("ownerReferences") or []
        absent = [ref for ref in refs if self._owner_present(ref, ns) is False]
        if not absent:
            return
        if len(absent) == len(refs):
            try:
                self.core.delete(rt, ns, name, {"propagationPolicy": "Background"})
            except ApiError as exc:
                if exc.code != 404:
                    log.warning(
                        "garbage collector could not delete %s %s/%s: %s", rt.plural, ns, name, exc.message
                    )
            return
        dep = stored.copy()
        dep["metadata"]["ownerReferences"] = [ref for ref in refs if ref not in absent]
        self._write(rt, dep)

    def _finish_owner(self, key: tuple[str, str], obj: JsonObj, finalizer: str) -> None:
        uid = obj["metadata"]["uid"]
        if finalizer == "foregroundDeletion":
            self._collect(uid, "Foreground")
        else:
            for dkey, ns, name in sorted(self._dependents.pop(uid, set())):
                drt = self._rt_for(dkey)
                stored = self.core.store.get(dkey, ns, name) if drt else None
                if drt is None or stored is None:
                    continue
                dep = stored.copy()
                refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                dep["metadata"]["ownerReferences"] = refs
                self._write(drt, dep)
        rt = self._rt_for(key)
        stored = self.core.store.get(key, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if rt is None or stored is None:
            return
        current = stored.copy()
        current["metadata"]["finalizers"] = [
            f for f in current["metadata"].get("finalizers") or [] if f != finalizer
        ]
        self._write(rt, current)

    def _write(self, rt: ResourceType, obj: JsonObj) -> None:
        meta = obj["metadata"]
        try:
            self.core.update(
                rt,
                meta.get("namespace", ""),
                meta["name"],
                obj,
                WriteOptions(field_manager="gpuop-sim-controllers"),
            )
        except ApiError as exc:
            log.warning("controller update of %s %s failed: %s", rt.plural, meta["name"], exc.message)

    # ---------------------------------------------------------------- namespaces
    def _ensure_namespace_defaults(self, ns: str) -> None:
        sa = self.core.registry.get("", "v1", "serviceaccounts")
        cm = self.core.registry.get("", "v1", "configmaps")
        assert sa is not None and cm is not None
        todo: list[tuple[ResourceType, JsonObj]] = [
            (sa, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        ]
        if "root-ca-cert-publisher" in self.enabled:
            todo.append(
                (
                    cm,
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "kube-root-ca.crt"},
                        "data": {"ca.crt": ROOT_CA},
                    },
                )
            )
        for rt, obj in todo:
            if self.core.store.get(rt.key, ns, obj["metadata"]["name"]) is not None:
                continue
            try:
                self.core.create(rt, ns, obj, WriteOptions(field_manager="gpuop-sim-controllers"))
            except ApiError as exc:
                if exc.code not in (403, 404, 409):
                    log.warning("could not create %s in namespace %s: %s", rt.plural, ns, exc.message)

    def _empty_namespace(self, ns: str) -> None:
        for rt in list(self.core.registry.all()):
            if not rt.namespaced or "delete" not in rt.verbs:
                continue
            for stored in self.core.store.items(rt.key, ns):
                if "deletionTimestamp" in stored.obj["metadata"]:
                    continue
                try:
                    self.core.delete(rt, ns, stored.obj["metadata"]["name"], {"gracePeriodSeconds": 0})
                except ApiError as exc:
                    if exc.code != 404:
                        log.warning(
                            "namespace controller could not delete %s %s/%s",
                            rt.plural,
                            ns,
                            stored.obj["metadata"]["name"],
                        )
        remaining = any(self.core.store.items(rt.key, ns) for rt in self.core.registry.all() if rt.namespaced)
        if remaining:
            # Objects still finalizing; try again once they change.
            self.loop.call_later(0.05, self._empty_namespace, ns)
            return
        namespaces = self.core.registry.get("", "v1", "namespaces")
        assert namespaces is not None
        ns_obj = self.core.store.get(namespaces.key, "", ns)
        if ns_obj is None:
            return
        obj = ns_obj.copy()
        obj["spec"]["finalizers"] = [
            f for f in obj.get("spec", {}).get("finalizers") or [] if f != "kubernetes"
        ]
        finalize_namespace(self.core, ns, obj)

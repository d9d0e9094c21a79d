"""Shared pieces of the storage-facing API: results, write options, and the core's base state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuop_sim.apiserver import errors
from gpuop_sim.apiserver.errors import cause
from gpuop_sim.apiserver.resources import ResourceRegistry, ResourceType
from gpuop_sim.apiserver.store import Store, Stored

JsonObj = dict[str, Any]
PROPAGATION = ("Foreground", "Background", "Orphan")
WriteHook = Callable[[ResourceType, str, JsonObj | None, JsonObj | None], None]


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


class CoreBase:
    """State and helpers every half of ApiCore (writes, lists, deletes) shares."""

    def __init__(self, registry: ResourceRegistry, store: Store) -> None:
        self.registry = registry
        self.store = store
        self._next_ip = 1
        # Hooks the server wires in (CRD establishment, garbage collection, ...).
        self.after_write: list[WriteHook] = []

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

    def get(self, rt: ResourceType, ns: str, name: str) -> Stored:
        stored = self.store.get(rt.key, ns, name)
        if stored is None:
            raise errors.not_found(rt, name)
        return stored

"""Writes this node's ResourceSlices (only its own: listed by `spec.nodeName` and `spec.driver`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gpuop_common.kubejson import NODES, RESOURCESLICES, JsonObj, KubeJson, is_status
from kubernetes.client.exceptions import ApiException

from gpuop_dra_driver.devices import DraDevice
from gpuop_dra_driver.slices import SlicePlan, plan_slices

log = logging.getLogger(__name__)


class SlicePublisher:
    def __init__(self, api: KubeJson, node: str, driver: str) -> None:
        self.api = api
        self.node = node
        self.driver = driver
        self._owner: JsonObj | None = None
        self.generation = 0

    def _selector(self) -> str:
        return f"spec.nodeName={self.node},spec.driver={self.driver}"

    def own_slices(self) -> list[JsonObj]:
        items, _ = self.api.list(RESOURCESLICES, fieldSelector=self._selector())
        # The field selector is the server's; check again so a server that ignores it cannot make
        # us touch another node's or driver's slices.
        return [
            s
            for s in items
            if (s.get("spec") or {}).get("nodeName") == self.node
            and (s.get("spec") or {}).get("driver") == self.driver
        ]

    def _node_owner(self) -> JsonObj | None:
        if self._owner is None:
            try:
                node = self.api.get(NODES, self.node)
            except ApiException as exc:
                log.warning("cannot read own Node; slices get no owner", extra={"error": str(exc)})
                return None
            self._owner = {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node,
                "uid": (node.get("metadata") or {}).get("uid", ""),
                "controller": True,
            }
        return self._owner

    def publish(self, devices: Sequence[DraDevice]) -> SlicePlan:
        """One pass: list, diff, write. ApiException propagates (the caller retries next pass)."""
        plan = plan_slices(self.node, self.driver, devices, self.own_slices(), self._node_owner())
        for obj in plan.create:
            self.api.create(RESOURCESLICES, obj)
        for obj in plan.update:
            self.api.replace(RESOURCESLICES, obj["metadata"]["name"], obj)
        for name in plan.delete:
            try:
                self.api.delete(RESOURCESLICES, name)
            except ApiException as exc:
                if not is_status(exc, 404):
                    raise
        if not plan.empty:
            log.info(
                "ResourceSlices published",
                extra={
                    "pool": self.node,
                    "generation": plan.generation,
                    "devices": len(devices),
                    # not `created`: that is a LogRecord attribute and logging refuses it in `extra`
                    "slices_created": len(plan.create),
                    "slices_updated": len(plan.update),
                    "slices_deleted": len(plan.delete),
                },
            )
        self.generation = plan.generation
        return plan

    def withdraw(self) -> None:
        """Delete every slice of ours (uninstall); the kubelet does the same 30 s after we vanish."""
        for obj in self.own_slices():
            try:
                self.api.delete(RESOURCESLICES, obj["metadata"]["name"])
            except ApiException as exc:
                if not is_status(exc, 404):
                    raise

"""A simulated kubelet's registration with whatever API server it joins, and its goodbye.

As a kubelet does: create the Node, or, when one of that name is already there (a join that was
killed and started again), take it over by bringing its labels up to date; then post its status. On
a clean stop `gpuop-sim join` deletes its Nodes (a kubelet does not; the node side is going away for
good here, so its Nodes must not linger as NotReady). Their Leases go with them: the Node owns them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gpuop_sim.workloads.kubeapi import NODES, KubeRest, is_status
from gpuop_sim.workloads.objects import Obj, meta

log = logging.getLogger(__name__)


def register_node(rest: KubeRest, node: Obj, status: Obj) -> None:
    name = str(meta(node).get("name"))
    try:
        rest.create(NODES, node)
    except Exception as error:
        if not is_status(error, 409):
            raise
        log.info("node %s already exists; taking it over", name)
        rest.patch(NODES, name, {"metadata": {"labels": meta(node).get("labels") or {}}})
    rest.patch(NODES, name, {"status": status}, sub="status")


def deregister_nodes(rest: KubeRest, names: Iterable[str]) -> None:
    for name in names:
        try:
            rest.delete(NODES, name)
        except Exception as error:
            if not is_status(error, 404):
                log.warning("node %s: could not delete it (%s)", name, error)

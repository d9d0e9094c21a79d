"""Workload simulation: the controllers and kubelets of a simulated cluster (docs/simulated-cluster.md).

`ControllerManager` runs DaemonSet/Deployment/ReplicaSet/Job controllers and a scheduler against an API
server; `SimKubelets` runs the pods bound to simulated nodes. Their decisions are pure functions
(`pod_fits_node`, `eligible_nodes`, `daemon_placement`, `plan_*`) that tests call directly.
"""

from gpuop_sim.workloads.kubeapi import (
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    REPLICASETS,
    SECRETS,
    KubeRest,
    Resource,
)
from gpuop_sim.workloads.manager import ControllerManager
from gpuop_sim.workloads.scheduling import (
    DaemonPlacement,
    Fit,
    daemon_placement,
    eligible_nodes,
    pod_fits_node,
)
from gpuop_sim.workloads.simkubelet import NodeRuntime, PodsMode, SimKubelets

__all__ = [
    "CONFIGMAPS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "JOBS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "REPLICASETS",
    "SECRETS",
    "ControllerManager",
    "DaemonPlacement",
    "Fit",
    "KubeRest",
    "NodeRuntime",
    "PodsMode",
    "Resource",
    "SimKubelets",
    "daemon_placement",
    "eligible_nodes",
    "pod_fits_node",
]

# mypy: disallow-untyped-calls=False
# (the kubernetes client is only partly annotated; this module is where we wrap it in typed calls)
"""The simulator's REST layer: the shared JSON-dict client (`gpuop_common.kubejson`) plus what only
simulated controllers and kubelets do (build a client from a kubeconfig, bind pods to nodes).

Using the same client as the services means the simulator exercises the HTTP client they use,
without paying for the generated models on every watch event.
"""

from __future__ import annotations

from pathlib import Path

from gpuop_common.kubejson import (
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    JOBS,
    JSON_PATCH,
    MERGE_PATCH,
    NAMESPACES,
    NODES,
    PODS,
    REPLICASETS,
    SECRETS,
    STRATEGIC_MERGE_PATCH,
    KubeJson,
    Resource,
    WatchExpiredError,
    is_status,
)
from kubernetes import client, config

from gpuop_sim.workloads.objects import Obj

LEASES = Resource("coordination.k8s.io/v1", "leases", "Lease")
SERVICEACCOUNTS = Resource("v1", "serviceaccounts", "ServiceAccount")

__all__ = [
    "CONFIGMAPS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "EVENTS",
    "JOBS",
    "JSON_PATCH",
    "LEASES",
    "MERGE_PATCH",
    "NAMESPACES",
    "NODES",
    "PODS",
    "REPLICASETS",
    "SECRETS",
    "SERVICEACCOUNTS",
    "STRATEGIC_MERGE_PATCH",
    "KubeRest",
    "Resource",
    "WatchExpiredError",
    "is_status",
]


class KubeRest(KubeJson):
    """The shared client with the simulator's defaults (30 s requests) and a pod-binding call."""

    def __init__(self, api_client: client.ApiClient, timeout: float = 30.0) -> None:
        super().__init__(api_client, timeout)

    @classmethod
    def from_kubeconfig(cls, path: str | Path) -> KubeRest:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(path), client_configuration=configuration)
        # Many threads share one client; urllib3's default pool of 4 would serialise them.
        configuration.connection_pool_maxsize = 64
        return cls(client.ApiClient(configuration))

    def close(self) -> None:
        self.api_client.close()

    def bind(self, pod: Obj, node_name: str) -> None:
        """What the scheduler does: a Binding subresource naming the node."""
        metadata = pod.get("metadata") or {}
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        self.call("POST", PODS.path(metadata.get("namespace"), metadata.get("name"), "binding"), body=body)

"""What a process-mode container gets in place of a pod's in-cluster access to the API server.

In a cluster a pod finds the API server through `KUBERNETES_SERVICE_HOST`/`_PORT` (the `kubernetes`
Service) and authenticates with its ServiceAccount's token and the cluster CA, both in the projected
`kube-api-access-*` volume at /var/run/secrets/kubernetes.io/serviceaccount. A local process sees
neither that path nor the Service's ClusterIP, so the simulated kubelet hands it the same facts
in a form it can reach: the variables name the API server's real address, and a per-pod kubeconfig
(absolute path, in `KUBECONFIG`/`GPUOP_KUBECONFIG`) points at the token and CA files of the pod's own
projected volume. The identity is the pod's ServiceAccount, never the node's or an admin's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuop_sim.workloads.objects import Obj, meta, name_of, namespace_of, spec_of

# The projected volume's files a kubeconfig refers to, found by what the source is, not its name.
TOKEN_DEFAULT_PATH = "token"
CA_KEY = "ca.crt"


def service_env(server: str) -> dict[str, str]:
    """The variables a kubelet sets for the `kubernetes` Service, naming the reachable server."""
    parts = urlsplit(server)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
    }


def access_files(pod: Obj, volumes: Mapping[str, Path]) -> tuple[Path | None, Path | None]:
    """(token file, CA file) in the pod's projected volumes, when it mounts a ServiceAccount token."""
    token: Path | None = None
    ca: Path | None = None
    for volume in spec_of(pod).get("volumes") or []:
        sources: list[Mapping[str, Any]] = (volume.get("projected") or {}).get("sources") or []
        root = volumes.get(str(volume.get("name") or ""))
        if root is None:
            continue
        for source in sources:
            if "serviceAccountToken" in source and token is None:
                token = root / str(source["serviceAccountToken"].get("path") or TOKEN_DEFAULT_PATH)
            for item in (source.get("configMap") or {}).get("items") or []:
                if item.get("key") == CA_KEY and ca is None:
                    ca = root / str(item.get("path") or CA_KEY)
    return token, ca


def pod_kubeconfig(pod: Obj, server: str, token_file: Path | None, ca_file: Path | None) -> Obj:
    """A kubeconfig with the pod's in-cluster identity: its token file and the cluster CA."""
    cluster: Obj = {"server": server}
    if ca_file is not None and server.startswith("https://"):
        cluster["certificate-authority"] = str(ca_file)
    user: Obj = {"tokenFile": str(token_file)} if token_file is not None else {}
    name = f"{namespace_of(pod)}/{name_of(pod)}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "in-cluster", "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [
            {
                "name": "in-cluster",
                "context": {"cluster": "in-cluster", "user": name, "namespace": namespace_of(pod)},
            }
        ],
        "current-context": "in-cluster",
    }


def token_request(pod: Obj, source: Mapping[str, Any]) -> Obj:
    """The TokenRequest a kubelet sends for a projected serviceAccountToken source, bound to the pod."""
    spec: Obj = {
        "expirationSeconds": int(source.get("expirationSeconds") or 3600),
        "boundObjectRef": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name_of(pod),
            "uid": meta(pod).get("uid"),
        },
    }
    if source.get("audience"):
        spec["audiences"] = [str(source["audience"])]
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}

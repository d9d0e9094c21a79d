"""Pure pieces of running a pod's container from its image (`pods="container"`), beside process mode.

A process-mode container is a console script whose paths the kubelet rewrites onto the node; a
container-mode one is the image itself: its Entrypoint/Cmd, Env, USER and WorkingDir, with the
pod's volumes bind-mounted where the pod asks. Only what the simulator adds differs from a node:
the pod's kubeconfig (the API server's real address and the pod's own ServiceAccount token, as
`incluster.py` explains) is mounted at `CONTAINER_KUBECONFIG` and named by KUBECONFIG.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuop_sim.workloads.objects import Obj
from gpuop_sim.workloads.simkubelet.identity import RunIdentity
from gpuop_sim.workloads.simkubelet.imagestore import ImageConfig
from gpuop_sim.workloads.simkubelet.incluster import access_files, pod_kubeconfig
from gpuop_sim.workloads.simkubelet.ocispec import Mount

CONTAINER_KUBECONFIG = "/run/gpuop-sim/kubeconfig"
_RUNC_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_+-.")


@dataclass(frozen=True)
class ContainerPlan:
    """What a container-mode container runs, resolved once per pod start."""

    image: ImageConfig
    args: list[str]
    working_dir: str
    mounts: list[Mount]


# containerd's PATH for an image whose Env sets none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def image_env(image: ImageConfig, identity: RunIdentity) -> dict[str, str]:
    """The image's Env over containerd's default PATH, with HOME from the user's passwd entry when
    the image sets none."""
    env = {"PATH": DEFAULT_PATH, **image.env_map}
    env.setdefault("HOME", identity.home)
    return env


def working_dir(container: Mapping[str, Any], image: ImageConfig) -> str:
    return str(container.get("workingDir") or image.working_dir or "/")


def container_kubeconfig(pod: Obj, container: Mapping[str, Any], server: str) -> Obj:
    """The pod's kubeconfig as this container sees it: token and CA at the paths its own
    volumeMounts put them (none when it mounts no ServiceAccount token)."""
    mounted = {str(m.get("name")): Path(str(m.get("mountPath"))) for m in container.get("volumeMounts") or []}
    token, ca = access_files(pod, mounted)
    return pod_kubeconfig(pod, server, token, ca)


def runc_id(pod_uid: str, container: str, restart_count: int) -> str:
    """A runc container id for one instance of a container: unique per pod, container and run."""
    raw = f"{pod_uid}-{container}-{restart_count}"
    return "".join(c if c in _RUNC_ID_CHARS else "_" for c in raw)

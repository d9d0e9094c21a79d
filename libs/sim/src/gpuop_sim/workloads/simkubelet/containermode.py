"""Running a pod's container from its image (`pods="container"`), beside process mode: what to run.

A process-mode container is a console script whose paths the kubelet rewrites onto the node; a
container-mode one is the image itself: its Entrypoint/Cmd, Env, USER and WorkingDir, with the
pod's volumes bind-mounted where the pod asks. Only what the simulator adds differs from a node:
the pod's kubeconfig (the API server's real address and the pod's own ServiceAccount token, as
`incluster.py` explains) is mounted at `CONTAINER_KUBECONFIG` and named by KUBECONFIG.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuop_sim.workloads.objects import Obj
from gpuop_sim.workloads.simkubelet.identity import RunIdentity, run_identity
from gpuop_sim.workloads.simkubelet.imagestore import ImageConfig, LocalImages
from gpuop_sim.workloads.simkubelet.incluster import access_files, pod_kubeconfig, service_env
from gpuop_sim.workloads.simkubelet.ocispec import Mount, container_args, volume_mounts
from gpuop_sim.workloads.simkubelet.podspec import PodContext, build_env

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


@dataclass(frozen=True)
class ContainerRun:
    """One instance (run) of a planned container: where runc keeps it and what it gets."""

    env: Mapping[str, str]
    identity: RunIdentity
    bundle: Path
    container_id: str
    log_path: Path


def resolve_image_container(
    pod: Obj,
    container: Mapping[str, Any],
    images: LocalImages,
    volumes: Mapping[str, Path],
    *,
    node: tuple[str, str],
    server: str,
    lookup: Callable[[str], Mapping[str, Obj]],
    kubeconfig: Path,
) -> tuple[ContainerPlan, RunIdentity, dict[str, str]]:
    """Pull (resolve) the image and plan the container: args, mounts, identity and env. Writes the
    container's kubeconfig to `kubeconfig`. `node` is (name, address); `lookup` the kubelet's cache."""
    image = images.resolve(str(container.get("image") or ""), str(container.get("imagePullPolicy") or ""))
    args = container_args(image, container)
    identity = run_identity(pod, container, image.user)
    mounts = volume_mounts(pod, container, volumes)
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig.write_text(yaml.safe_dump(container_kubeconfig(pod, container, server), sort_keys=False))
    kubeconfig.chmod(0o644)
    mounts.append(Mount(CONTAINER_KUBECONFIG, kubeconfig, readonly=True))
    # A node's environment is not the container's: it sees the node only through its mounts.
    ctx = PodContext(node[0], node[1], Path(CONTAINER_KUBECONFIG), {})
    base = {**image_env(image, identity), **service_env(server)}
    env = build_env(
        container, pod, ctx, lookup("configmaps"), lookup("secrets"), home=identity.home, base=base
    )
    return ContainerPlan(image, args, working_dir(container, image), mounts), identity, env

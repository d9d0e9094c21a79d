"""What the image checks need: the built images in local container storage, run by podman with runc,
and the pure rules that match a rendered pod's securityContext and volumeMounts to an image.

The images are the ones `make images` left in the host's container storage (vfs, the default
store; `CONTAINERS_STORAGE_CONF` chooses another, as for buildah). Containers run with runc and no
network, as the chart's user, under a read-only root where the chart asks for one, and without
podman's own conveniences a kubelet does not give (podman mounts tmpfs on /tmp, /run and /var/tmp
of a read-only container unless told not to; a kubelet mounts only what the pod names).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "VERSION").read_text().strip()
SERVICES = sorted(p.parent.name for p in (REPO / "services").glob("*/Dockerfile"))
STORAGE = ("--storage-driver", "vfs")
RUNTIME = ("--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "none")
# Raising rlimits needs CAP_SYS_RESOURCE, which sandboxed machines drop (gpuop_sim.oci says more).
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
REBUILD = "run `make images` (root; builds every services/*/Dockerfile into local container storage)"

JsonObj = dict[str, Any]


def reference(service: str) -> str:
    return f"localhost/gpuop/gpuop-{service}:{VERSION}"


def podman(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *STORAGE, *RUNTIME, *args], check=False, text=True, capture_output=True, timeout=timeout
    )


def container(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`podman run --rm` without network and with rlimits any sandbox allows; `args`: options, image, argv."""
    return podman("run", "--rm", "--network", "none", *LIMITS, *args, timeout=timeout)


def missing_images(services: Sequence[str]) -> list[str]:
    return [reference(s) for s in services if podman("image", "exists", reference(s)).returncode != 0]


def inspect(image: str) -> JsonObj:
    done = podman("image", "inspect", image)
    assert done.returncode == 0, done.stderr
    (info,) = json.loads(done.stdout)
    return dict(info)


@dataclass(frozen=True)
class Mount:
    """One volumeMount, with the kind of volume behind it (hostPath, emptyDir, configMap, ...)."""

    path: str
    kind: str
    read_only: bool
    sub_path: str = ""
    host_path: str = ""  # a hostPath volume's path on the node


@dataclass(frozen=True)
class ContainerRun:
    """How a kubelet would start one chart container from its image: user, root and mounts."""

    workload: str  # Kind/name/container, for messages
    image: str
    args: tuple[str, ...]
    uid: int | None  # None: the image's USER
    gid: int | None
    run_as_non_root: bool
    read_only_root: bool
    privileged: bool
    drop_all: bool
    mounts: tuple[Mount, ...] = field(default_factory=tuple)


def pod_specs(manifests: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, JsonObj]]:
    """(Kind/name, pod spec) of every workload in rendered manifests."""
    for doc in manifests:
        kind, spec = doc.get("kind"), doc.get("spec") or {}
        name = f"{kind}/{doc.get('metadata', {}).get('name')}"
        if kind == "Pod":
            yield name, spec
        elif kind in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
            yield name, spec["template"]["spec"]
        elif kind == "CronJob":
            yield name, spec["jobTemplate"]["spec"]["template"]["spec"]


def container_runs(manifests: Sequence[Mapping[str, Any]], image_name: str) -> list[ContainerRun]:
    """Every container (init ones too) whose image's last path element is `image_name`, with the
    securityContext fields a kubelet merges: the container's win over the pod's."""
    runs = []
    for workload, pod in pod_specs(manifests):
        pod_security = pod.get("securityContext") or {}
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for container in [*(pod.get("initContainers") or []), *pod["containers"]]:
            image = str(container["image"])
            if image.rsplit("/", 1)[-1].split("@", maxsplit=1)[0].split(":", maxsplit=1)[0] != image_name:
                continue
            security = {**pod_security, **(container.get("securityContext") or {})}
            mounts = tuple(
                Mount(
                    path=m["mountPath"],
                    kind=_volume_kind(volumes[m["name"]]),
                    read_only=bool(m.get("readOnly", False)),
                    sub_path=m.get("subPath", ""),
                    host_path=(volumes[m["name"]].get("hostPath") or {}).get("path", ""),
                )
                for m in container.get("volumeMounts") or []
            )
            runs.append(
                ContainerRun(
                    workload=f"{workload}/{container['name']}",
                    image=image,
                    args=tuple(container.get("args") or ()),
                    uid=security.get("runAsUser"),
                    gid=security.get("runAsGroup"),
                    run_as_non_root=bool(security.get("runAsNonRoot", False)),
                    read_only_root=bool(security.get("readOnlyRootFilesystem", False)),
                    privileged=bool(security.get("privileged", False)),
                    drop_all="ALL" in ((security.get("capabilities") or {}).get("drop") or []),
                    mounts=mounts,
                )
            )
    return runs


def _volume_kind(volume: Mapping[str, Any]) -> str:
    (kind,) = (key for key in volume if key != "name")
    return kind


def numeric_user(image_user: str) -> tuple[int, int | None] | None:
    """(uid, gid) of a USER value, None when it names a user (a kubelet can't verify a name)."""
    uid, _, gid = (image_user or "0").partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        return None
    return int(uid), int(gid) if gid else None


def non_root_refusal(run: ContainerRun, image_user: str) -> str | None:
    """The kubelet's refusal to start `run` from an image with USER `image_user`, None when it starts.
    The messages are the kubelet's (pkg/kubelet/kuberuntime/security_context_others.go)."""
    if not run.run_as_non_root:
        return None
    if run.uid is not None:
        return "container's runAsUser breaks non-root policy" if run.uid == 0 else None
    user = numeric_user(image_user)
    if user is None:
        return (
            f"container has runAsNonRoot and image has non-numeric user ({image_user}), "
            "cannot verify user is non-root"
        )
    if user[0] == 0:
        return "container has runAsNonRoot and image will run as root"
    return None


def run_options(run: ContainerRun, image_user: str, sources: Mapping[str, Path]) -> list[str]:
    """podman run options that start `run` the way its pod says: user, root, privileges, mounts
    (`sources`: the host directory or file behind each mount path)."""
    image_uid, image_gid = numeric_user(image_user) or (0, None)
    uid = image_uid if run.uid is None else run.uid
    # A runAsUser without runAsGroup gets the group the image's /etc/passwd gives that uid; our
    # images have no entry for 65532, so 0, as containerd and CRI-O start it.
    gid = run.gid if run.gid is not None else (image_gid if run.uid is None and image_gid is not None else 0)
    options = ["--user", f"{uid}:{gid}"]
    if run.read_only_root:
        options += ["--read-only", "--read-only-tmpfs=false"]
    if run.privileged:
        options.append("--privileged")
    elif run.drop_all:
        options += ["--cap-drop", "ALL"]
    for mount in run.mounts:
        mode = "ro" if mount.read_only else "rw"
        options += ["--mount", f"type=bind,src={sources[mount.path]},dst={mount.path},{mode}"]
    return options

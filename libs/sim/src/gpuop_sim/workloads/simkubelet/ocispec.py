"""Pure: a pod's container and its image -> the OCI runtime spec (config.json) runc runs.

What containerd's CRI plugin builds, for the fields gpuop's pods use:
- the process: Kubernetes' command/args over the image's Entrypoint/Cmd, the image's Env under the
  pod's, the working dir, the `RunIdentity` (uid, gid, groups, capabilities, no_new_privs);
- the default mounts (proc, a tmpfs /dev, devpts, shm, mqueue, sysfs, /run), each dropped where a
  pod mount lands on the same path, then the pod's volumes as bind mounts (configMap, secret,
  downwardAPI and projected ones read-only, as the kubelet makes them);
- namespaces: mount, IPC, and PID unless `hostPID`, UTS unless `hostNetwork`; never a network
  namespace (why: docs/simulated-cluster.md, "Container mode");
- unprivileged: containerd's masked and read-only /proc and /sys paths, sysfs read-only;
  privileged: none of those, every capability the node has, every device allowed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuop_sim.workloads.objects import Obj, spec_of
from gpuop_sim.workloads.simkubelet.identity import RunIdentity
from gpuop_sim.workloads.simkubelet.imagestore import ImageConfig
from gpuop_sim.workloads.simkubelet.podspec import ContainerConfigError

OCI_VERSION = "1.0.2"
# The kubelet makes these volume kinds read-only in every container, whatever the volumeMount says.
API_DATA_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")
# containerd's defaults (oci.populateDefaultUnixSpec) for what a container must not see or change.
MASKED_PATHS = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
_TMPFS = ["nosuid", "strictatime", "mode=755", "size=65536k"]


@dataclass(frozen=True)
class Mount:
    """A bind mount of a host path (file or directory) at `destination` in the container."""

    destination: str
    source: Path
    readonly: bool = False


def container_args(image: ImageConfig, container: Mapping[str, Any]) -> list[str]:
    """What the container execs: `command` replaces the image's Entrypoint (and drops its Cmd),
    `args` replaces its Cmd; nothing at all is containerd's "no command specified"."""
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    argv = [*command, *args] if command else [*image.entrypoint, *(args or image.cmd)]
    if not argv:
        raise ContainerConfigError(
            "CreateContainerError",
            f"failed to generate container {container.get('name')!r} spec: no command specified",
        )
    return argv


def volume_mounts(pod: Obj, container: Mapping[str, Any], volume_dirs: Mapping[str, Path]) -> list[Mount]:
    """The container's volumeMounts as bind mounts of the host dirs behind the pod's volumes."""
    kinds = {}
    for volume in spec_of(pod).get("volumes") or []:
        kinds[str(volume.get("name") or "")] = next((k for k in API_DATA_VOLUMES if k in volume), "")
    mounts = []
    for mount in container.get("volumeMounts") or []:
        name = str(mount.get("name") or "")
        source = volume_dirs.get(name)
        if source is None:
            raise ContainerConfigError(
                "CreateContainerConfigError", f"volumeMount {mount.get('name')!r} names no pod volume"
            )
        destination = str(mount.get("mountPath") or "")
        if not destination.startswith("/"):
            raise ContainerConfigError(
                "CreateContainerConfigError",
                f"volumeMount {name!r}: mountPath must be an absolute path, not {destination!r}",
            )
        sub_path = str(mount.get("subPath") or "")
        if sub_path.startswith("/") or ".." in Path(sub_path).parts:
            raise ContainerConfigError(
                "CreateContainerConfigError", f"volumeMount {name!r}: subPath {sub_path!r} leaves the volume"
            )
        readonly = bool(mount.get("readOnly")) or bool(kinds.get(name))
        mounts.append(Mount(destination.rstrip("/") or "/", source / sub_path, readonly))
    return mounts


@dataclass(frozen=True)
class RuntimeInputs:
    """Everything `runtime_spec` needs besides the pod: resolved by the worker, pure data here."""

    args: Sequence[str]
    env: Mapping[str, str]
    working_dir: str
    identity: RunIdentity
    mounts: Sequence[Mount]
    rootfs: Path
    hostname: str
    node_capabilities: frozenset[str]  # what a privileged container gets: all the node itself has


def _container_flag(container: Mapping[str, Any], field: str) -> bool:
    """`privileged` and `readOnlyRootFilesystem` exist only in a container's securityContext."""
    return bool((container.get("securityContext") or {}).get(field))


def _default_mounts(privileged: bool) -> list[dict[str, Any]]:
    return [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": list(_TMPFS)},
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        },
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        },
        {
            "destination": "/dev/mqueue",
            "type": "mqueue",
            "source": "mqueue",
            "options": ["nosuid", "noexec", "nodev"],
        },
        {
            "destination": "/sys",
            "type": "sysfs",
            "source": "sysfs",
            "options": ["nosuid", "noexec", "nodev", "rw" if privileged else "ro"],
        },
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": list(_TMPFS)},
    ]


def _covered(destination: str, pod_mounts: Sequence[Mount]) -> bool:
    """A default mount a pod mount replaces: one at the same path, or under it (a hostPath /dev
    takes /dev/pts and /dev/shm's place too, as it does for containerd's defaults)."""
    return any(
        destination == m.destination or destination.startswith(m.destination.rstrip("/") + "/")
        for m in pod_mounts
    )


def _bind(mount: Mount) -> dict[str, Any]:
    options = ["rbind", "rprivate", "ro" if mount.readonly else "rw"]
    return {"destination": mount.destination, "type": "bind", "source": str(mount.source), "options": options}


def _capability_names(names: frozenset[str]) -> list[str]:
    return sorted(f"CAP_{n}" for n in names)


def runtime_spec(pod: Obj, container: Mapping[str, Any], inputs: RuntimeInputs) -> dict[str, Any]:
    """The config.json of one container of `pod`."""
    spec = spec_of(pod)
    privileged = _container_flag(container, "privileged")
    readonly_root = _container_flag(container, "readOnlyRootFilesystem")
    identity = inputs.identity
    caps = inputs.node_capabilities if identity.capabilities is None else identity.capabilities
    cap_list = _capability_names(frozenset(caps & inputs.node_capabilities))
    defaults = [m for m in _default_mounts(privileged) if not _covered(m["destination"], inputs.mounts)]
    # Longest destination last, so a mount inside another one's path lands on top of it.
    binds = sorted(inputs.mounts, key=lambda m: len(m.destination))
    namespaces = [{"type": "mount"}, {"type": "ipc"}]
    if not spec.get("hostPID"):
        namespaces.append({"type": "pid"})
    if not spec.get("hostNetwork"):
        namespaces.append({"type": "uts"})
    process: dict[str, Any] = {
        "terminal": False,
        "user": {
            "uid": identity.uid,
            "gid": identity.gid,
            **({"additionalGids": list(identity.groups)} if identity.groups else {}),
        },
        "args": list(inputs.args),
        "env": [f"{k}={v}" for k, v in inputs.env.items()],
        "cwd": inputs.working_dir or "/",
        "capabilities": {
            "bounding": cap_list,
            "effective": cap_list,
            "permitted": cap_list,
        },
        "noNewPrivileges": identity.no_new_privs,
    }
    linux: dict[str, Any] = {"namespaces": namespaces}
    if privileged:
        linux["resources"] = {"devices": [{"allow": True, "access": "rwm"}]}
    else:
        linux["resources"] = {"devices": [{"allow": False, "access": "rwm"}]}
        linux["maskedPaths"] = list(MASKED_PATHS)
        linux["readonlyPaths"] = list(READONLY_PATHS)
    config: dict[str, Any] = {
        "ociVersion": OCI_VERSION,
        "process": process,
        "root": {"path": str(inputs.rootfs), "readonly": readonly_root},
        "mounts": [*defaults, *(_bind(m) for m in binds)],
        "linux": linux,
    }
    if not spec.get("hostNetwork"):
        config["hostname"] = inputs.hostname
    return config

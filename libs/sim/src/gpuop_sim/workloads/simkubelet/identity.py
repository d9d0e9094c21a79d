"""Who a container runs as: the uid, groups and capabilities a kubelet and container runtime give it.

Pure: the pod spec and the image's USER (from `_image_metadata`, generated from the Dockerfiles) in,
a `RunIdentity` out, or the kubelet's `CreateContainerConfigError` when `runAsNonRoot` forbids it.
The process edge (`process.py`) applies the identity with setpriv, so the kernel enforces it.

The rules follow the kubelet (securityContext merge, `verifyRunAsNonRoot`) and containerd/runc (the
default capability set, `privileged`, `capabilities.add/drop`, `allowPrivilegeEscalation` ->
no_new_privs). Capabilities go to the bounding set; only uid 0 keeps them effective across exec:
a runtime also sets them permitted/effective, but the kernel clears those when a non-root process
execs a file without file capabilities, and Kubernetes sets no ambient capabilities.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuop_sim.workloads.objects import Obj, meta, spec_of
from gpuop_sim.workloads.simkubelet._image_metadata import IMAGE_USERS
from gpuop_sim.workloads.simkubelet.podspec import ContainerConfigError, image_script_name

# containerd's (and Docker's) default capability set for an unprivileged container.
DEFAULT_CAPABILITIES = frozenset(
    {
        "CHOWN",
        "DAC_OVERRIDE",
        "FSETID",
        "FOWNER",
        "MKNOD",
        "NET_RAW",
        "SETGID",
        "SETUID",
        "SETFCAP",
        "SETPCAP",
        "NET_BIND_SERVICE",
        "SYS_CHROOT",
        "KILL",
        "AUDIT_WRITE",
    }
)

CONFIG_ERROR = "CreateContainerConfigError"


@dataclass(frozen=True)
class RunIdentity:
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups besides `gid`
    capabilities: frozenset[str] | None  # the bounding set; None: every capability (privileged)
    no_new_privs: bool

    @property
    def effective_capabilities(self) -> frozenset[str] | None:
        """What the container's process can use: its bounding set as root, nothing otherwise."""
        return self.capabilities if self.uid == 0 else frozenset()

    @property
    def home(self) -> str:
        """HOME as a runtime sets it from the image's /etc/passwd: root's home, else `/` (the images'
        passwd has no entry for the non-root uids we use)."""
        return "/root" if self.uid == 0 else "/"


def image_user(image: str, table: Mapping[str, str] = IMAGE_USERS) -> str:
    """The USER of `image` ("" when it sets none, or for an image that is not one of ours: root)."""
    return table.get(image_script_name(image), "")


def _parse_user(user: str) -> tuple[int, int]:
    """`uid[:gid]` (or root) -> (uid, gid); without a gid, the uid's group in the image's
    /etc/passwd, which for our numeric non-root users has no entry: gid 0, as containerd does."""
    uid_text, _, gid_text = user.partition(":")
    uid = 0 if uid_text in ("", "root") else int(uid_text)
    gid = 0 if gid_text in ("", "root") else int(gid_text)
    return uid, gid


def _merged(pod: Obj, container: Mapping[str, Any], field: str) -> Any:
    """A securityContext field: the container's wins over the pod's (`DetermineEffectiveSecurityContext`)."""
    own = (container.get("securityContext") or {}).get(field)
    return own if own is not None else (spec_of(pod).get("securityContext") or {}).get(field)


def _format_pod(pod: Obj) -> str:
    """The kubelet's `format.Pod`, as Go's %q prints it."""
    metadata = meta(pod)
    return f'"{metadata.get("name")}_{metadata.get("namespace")}({metadata.get("uid")})"'


def _cap_names(names: Any) -> set[str]:
    """Kubernetes names capabilities without CAP_ (runtimes accept both); upper case."""
    return {str(n).upper().removeprefix("CAP_") for n in names or []}


def capabilities_of(container: Mapping[str, Any]) -> frozenset[str] | None:
    """The bounding set containerd gives the container; None: all (privileged or `add: [ALL]`)."""
    context = container.get("securityContext") or {}
    if context.get("privileged"):
        return None
    spec = context.get("capabilities") or {}
    add, drop = _cap_names(spec.get("add")), _cap_names(spec.get("drop"))
    if "ALL" in add and "ALL" not in drop:
        return None
    base = set() if "ALL" in drop else set(DEFAULT_CAPABILITIES)
    return frozenset((base | (add - {"ALL"})) - (drop - {"ALL"}))


def _verify_run_as_non_root(pod: Obj, container: Mapping[str, Any], uid: int) -> None:
    """The kubelet's `verifyRunAsNonRoot`: a container that would run as root is not created."""
    if not _merged(pod, container, "runAsNonRoot"):
        return
    where = f"(pod: {_format_pod(pod)}, container: {container.get('name')})"
    if _merged(pod, container, "runAsUser") is not None:
        if uid == 0:
            raise ContainerConfigError(CONFIG_ERROR, f"container's runAsUser breaks non-root policy {where}")
        return
    if uid == 0:
        raise ContainerConfigError(
            CONFIG_ERROR, f"container has runAsNonRoot and image will run as root {where}"
        )


def run_identity(pod: Obj, container: Mapping[str, Any], user: str) -> RunIdentity:
    """The identity a node starts `container` of `pod` with, its image's USER being `user`."""
    image_uid, image_gid = _parse_user(user)
    run_as_user = _merged(pod, container, "runAsUser")
    run_as_group = _merged(pod, container, "runAsGroup")
    uid = image_uid if run_as_user is None else int(run_as_user)
    # runAsUser alone: the runtime takes that uid's group from the image's /etc/passwd, where root's
    # is 0 and our other uids have no entry (0 as well), not the image USER's group.
    default_gid = image_gid if run_as_user is None else 0
    gid = default_gid if run_as_group is None else int(run_as_group)
    _verify_run_as_non_root(pod, container, uid)
    pod_context = spec_of(pod).get("securityContext") or {}
    extra = [int(g) for g in pod_context.get("supplementalGroups") or []]
    if pod_context.get("fsGroup") is not None:
        extra.append(int(pod_context["fsGroup"]))
    return RunIdentity(
        uid=uid,
        gid=gid,
        groups=tuple(dict.fromkeys(extra)),
        capabilities=capabilities_of(container),
        no_new_privs=(container.get("securityContext") or {}).get("allowPrivilegeEscalation") is False,
    )

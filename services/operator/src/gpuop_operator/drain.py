"""Which pods a driver upgrade (or a remediation) must move off a node before it touches the GPUs
(pure; the reconciler sends the evictions and deletions).

As `kubectl drain` does: DaemonSet pods stay (they tolerate the cordon and would come straight back),
mirror (static) pods stay, finished pods are ignored, pods in ignored namespaces stay, and a pod no
controller would recreate is only removed with `force` (otherwise the drain fails naming it). With
the GPU-pod deletion policy only pods that request a GPU resource are removed.

The release's own control pods stay too: the operator's Deployment pod, the driver and remediation
Jobs, the chart's hook Jobs and the test runner. Evicting the operator from the node it is repairing
would stop the very run that evicts it (on a one-node cluster nothing would ever come back to
finish the drain), and the test runner must be there to validate the node afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuop_operator.views import GPU_RESOURCE_PREFIXES, INSTANCE_LABEL

JsonObj = dict[str, Any]
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
OWN_COMPONENT = ("app.kubernetes.io/component", "driver-job")


@dataclass(frozen=True)
class ControlPods:
    """Which pods belong to the operator's release (kept by every drain)."""

    namespace: str
    release: str  # the pods' `app.kubernetes.io/instance`
    own_pod: str = ""  # the operator's own pod, when its chart was installed under another release name

    def holds(self, namespace: str, name: str, instance: str) -> bool:
        if namespace != self.namespace:
            return False
        return instance == self.release or (bool(self.own_pod) and name == self.own_pod)


@dataclass(frozen=True)
class NodePod:
    namespace: str
    name: str
    uid: str
    controller: str  # kind of the controlling owner, "" when none
    mirror: bool = False
    finished: bool = False
    deleting: bool = False
    uses_gpu: bool = False
    ours: bool = False  # a pod of the operator's release (its Jobs, the operator itself): never drained
    node: str = ""  # spec.nodeName

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def node_pod(obj: JsonObj, control: ControlPods | None = None) -> NodePod:
    meta = obj.get("metadata") or {}
    controller = next(
        (str(ref.get("kind", "")) for ref in meta.get("ownerReferences") or [] if ref.get("controller")), ""
    )
    containers = [
        *((obj.get("spec") or {}).get("containers") or []),
        *((obj.get("spec") or {}).get("initContainers") or []),
    ]
    uses_gpu = any(
        name.startswith(GPU_RESOURCE_PREFIXES)
        for container in containers
        for section in ("limits", "requests")
        for name in ((container.get("resources") or {}).get(section) or {})
    )
    labels = meta.get("labels") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    control_pod = control is not None and control.holds(namespace, name, str(labels.get(INSTANCE_LABEL, "")))
    return NodePod(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid", "")),
        controller=controller,
        mirror=MIRROR_ANNOTATION in (meta.get("annotations") or {}),
        finished=(obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        deleting="deletionTimestamp" in meta,
        uses_gpu=uses_gpu,
        ours=labels.get(OWN_COMPONENT[0]) == OWN_COMPONENT[1] or control_pod,
        node=str((obj.get("spec") or {}).get("nodeName", "")),
    )


@dataclass(frozen=True)
class DrainStep:
    remove: tuple[NodePod, ...]  # evict (drain) or delete (GPU-pod policy) now
    waiting: tuple[NodePod, ...]  # already terminating: wait for them
    refused: tuple[NodePod, ...]  # unmanaged pods that need `force`

    @property
    def done(self) -> bool:
        return not self.remove and not self.waiting and not self.refused


def plan_drain(
    pods: Iterable[NodePod],
    *,
    gpu_pods_only: bool,
    force: bool,
    ignore_daemon_sets: bool = True,
    ignore_namespaces: Sequence[str] = (),
) -> DrainStep:
    remove, waiting, refused = [], [], []
    for pod in sorted(pods, key=lambda p: p.key):
        if pod.finished or pod.mirror or pod.ours or pod.namespace in ignore_namespaces:
            continue
        if pod.controller == "DaemonSet" and (ignore_daemon_sets or gpu_pods_only):
            continue
        if gpu_pods_only and not pod.uses_gpu:
            continue
        if pod.deleting:
            waiting.append(pod)
        elif not pod.controller and not force:
            refused.append(pod)
        else:
            remove.append(pod)
    return DrainStep(tuple(remove), tuple(waiting), tuple(refused))

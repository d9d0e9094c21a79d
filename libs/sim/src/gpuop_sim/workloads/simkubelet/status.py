"""Pure builders for the status a kubelet reports: pod phase/conditions/containerStatuses, node Ready."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuop_sim.workloads.objects import Obj, status_of


@dataclass
class ContainerState:
    """What the kubelet knows about one container right now."""

    name: str
    image: str
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    exit_code: int | None = None
    ready: bool = False
    started: bool = False  # running and past its startup probe (if it has one)
    restart_count: int = 0
    started_at: str = ""
    finished_at: str = ""
    container_id: str = ""
    last_termination: Obj = field(default_factory=dict)

    def to_status(self) -> Obj:
        state: Obj
        if self.state == "running":
            state = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {
                "terminated": {
                    "exitCode": self.exit_code if self.exit_code is not None else 0,
                    "reason": self.reason,
                    "message": self.message,
                    "startedAt": self.started_at or None,
                    "finishedAt": self.finished_at,
                    "containerID": self.container_id,
                }
            }
        else:
            state = {"waiting": {"reason": self.reason, "message": self.message}}
        status: Obj = {
            "name": self.name,
            "image": self.image,
            "imageID": f"sim://{self.image}",
            "ready": self.ready,
            "started": self.state == "running" and self.started,
            "restartCount": self.restart_count,
            "state": state,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        if self.last_termination:
            status["lastState"] = {"terminated": self.last_termination}
        return status


def _condition(kind: str, ok: bool, now: str, reason: str = "") -> Obj:
    cond: Obj = {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": now}
    if reason:
        cond["reason"] = reason
    return cond


def pod_status(
    phase: str,
    containers: list[ContainerState],
    address: str,
    start_time: str,
    now: str,
    *,
    qos_class: str,
    initialized: bool = True,
    reason: str = "",
    message: str = "",
) -> Obj:
    """The `status` a kubelet would write for these container states.

    `qos_class` is the one the API server computed at create (`qos_class_of`): the kubelet writes it
    back unchanged, since any other value (or none) is refused as an immutable-field change."""
    ready = phase == "Running" and bool(containers) and all(c.ready for c in containers)
    not_ready_reason = (
        "" if ready else ("PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady")
    )
    status: Obj = {
        "phase": phase,
        "hostIP": address,
        "hostIPs": [{"ip": address}],
        "podIP": address,
        "podIPs": [{"ip": address}],
        "startTime": start_time,
        "conditions": [
            _condition("PodReadyToStartContainers", True, now),
            _condition("Initialized", initialized, now),
            _condition("Ready", ready, now, not_ready_reason),
            _condition("ContainersReady", ready, now, not_ready_reason),
            _condition("PodScheduled", True, now),
        ],
        "containerStatuses": [c.to_status() for c in containers],
    }
    if qos_class:
        status["qosClass"] = qos_class
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return status


def qos_class_of(pod: Obj) -> str:
    """The pod's QoS class as the API server set it at create."""
    return str(status_of(pod).get("qosClass") or "")


def comparable(status: Obj) -> Obj:
    """Status minus timestamps, to decide whether a patch would change anything."""
    out = dict(status)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
    ]
    return out


def node_ready_conditions(now: str) -> list[Obj]:
    base = {"lastHeartbeatTime": now, "lastTransitionTime": now}
    return [
        {**base, "type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
        {**base, "type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
        {**base, "type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
        {
            **base,
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "simulated kubelet is posting ready status",
        },
    ]

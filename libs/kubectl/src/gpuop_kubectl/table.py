"""`kubectl gpuop status`: one row per GPU node, pure functions over the objects the API returns.

`make demo` draws the same table (gpuop_sim.demo imports it from here), so what a user sees in the
demo is what the plugin shows on a real cluster. Columns: node, the DeviceConfig that owns it,
vendor and GPUs (the node labeller's labels), Ready, the operator's stage, the driver, the operand
pods, GPU resources in allocatable, partitioning, the test runner's self-check, GPU health with the
remediation step, and metrics URLs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from gpuop_common.kubeobj import (
    Obj,
    annotations_of,
    condition_of,
    is_extended,
    labels_of,
    name_of,
    node_is_ready,
    pod_is_ready,
    pod_phase,
    spec_of,
    status_of,
)
from gpuop_common.nodemeta import (
    AMD_PARTITION_LABEL,
    AMD_PRESENT_LABEL,
    CONFIG_PROFILE_LABEL,
    CONFIG_STATE_LABEL,
    DEPLOY_LABEL_PREFIX,
    DRIVER_UPGRADE_STATE_LABEL,
    DRIVER_VERSION_LABEL,
    GPU_COUNT_LABEL,
    GPU_HEALTHY_CONDITION,
    GPU_MODEL_LABEL,
    GPU_PARTITION_COUNT_LABEL,
    GPU_VENDOR_LABEL,
    LABEL_PREFIX,
    NVIDIA_PRESENT_LABEL,
    OWNER_ANNOTATION,
    REMEDIATION_STATE_LABEL,
    TEST_REQUEST_ANNOTATION,
    TEST_RESULT_LABEL,
)
from rich.table import Table
from rich.text import Text

DRIVER_LABELS = {DRIVER_VERSION_LABEL: "driver", DRIVER_UPGRADE_STATE_LABEL: "upgrade"}
DRA_DRIVER = "gpu.gpuop.dev"
GPU_RESOURCE_PREFIXES = ("amd.com/", "nvidia.com/")
APP_NAME_LABEL = "app.kubernetes.io/name"


class Tone(StrEnum):
    """How a pod is doing, as the table colours it."""

    READY = "green"
    STARTING = "yellow"
    FAILING = "red"


# Container reasons that mean "broken, a user must look": the kubelet retries, but in vain.
FAILING_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "Error",
        "OOMKilled",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "ContainerCannotRun",
        "UnexpectedAdmissionError",
        "Unschedulable",
        "Failed",
    }
)


@dataclass(frozen=True)
class PodCell:
    """One pod in the `pods` column: `device-plugin`, `node-labeller ContainerCreating`, ..."""

    text: str
    tone: Tone


@dataclass(frozen=True)
class NodeRow:
    node: str
    vendor: str
    gpus: str
    ready: str
    stage: str
    pods: str  # "2/3 ready"
    resources: str
    metrics: str
    pod_cells: tuple[PodCell, ...] = ()
    self_check: str = "-"
    partition: str = "-"
    health: str = "-"
    deviceconfig: str = "-"
    profile: str = "-"  # the partition profile the node asks for

    @property
    def pods_text(self) -> str:
        """The pods column without colour: `1/2 ready: device-plugin, node-labeller Error x3`."""
        return self.pods + (": " + ", ".join(c.text for c in self.pod_cells) if self.pod_cells else "")

    def to_json(self) -> dict[str, Any]:
        """`kubectl gpuop status -o json`: every column, the pods as plain text."""
        data = asdict(self)
        data["pod_cells"] = [cell.text for cell in self.pod_cells]
        data["pods_text"] = self.pods_text
        return data


def is_gpu_node(node: Obj) -> bool:
    """NFD found a GPU, the labeller counted one, or the operator has touched the node."""
    labels = labels_of(node)
    if labels.get(AMD_PRESENT_LABEL) == "true" or labels.get(NVIDIA_PRESENT_LABEL) == "true":
        return True
    if labels.get(GPU_COUNT_LABEL, "0") not in ("", "0") or OWNER_ANNOTATION in annotations_of(node):
        return True
    return any(k.startswith(DEPLOY_LABEL_PREFIX) for k in labels)


def stage_of(node: Obj) -> str:
    """Rollout stage as the operator records it: a `gpuop.dev/...stage|state` annotation plus the
    `gpuop.dev/deploy.<service>` labels, shown generically so new services need no table change."""
    parts = [
        f"{k.split('/', 1)[1]}={v}"
        for k, v in sorted(annotations_of(node).items())
        if k.startswith(LABEL_PREFIX) and ("stage" in k or "state" in k)
    ]
    deployed = [
        k[len(DEPLOY_LABEL_PREFIX) :] + ("" if v == "true" else f"={v}")
        for k, v in sorted(labels_of(node).items())
        if k.startswith(DEPLOY_LABEL_PREFIX)
    ]
    labels = labels_of(node)
    driver = [f"{DRIVER_LABELS[k]}={labels[k]}" for k in DRIVER_LABELS if k in labels]
    if driver:
        parts.append(" ".join(driver))
    if deployed:
        parts.append("deploy: " + ",".join(deployed))
    return "; ".join(parts) or "-"


def self_check_of(node: Obj) -> str:
    """`passed` / `failed` (the agent's result label), `requested` while a request waits, else `-`."""
    if TEST_REQUEST_ANNOTATION in annotations_of(node):
        return "requested"
    return labels_of(node).get(TEST_RESULT_LABEL, "-")


def metrics_urls(pod: Obj) -> list[str]:
    """http://<podIP>:<port>/metrics for each container port named like `metrics`."""
    address = status_of(pod).get("podIP")
    if not address or pod_phase(pod) != "Running":
        return []
    urls = []
    for container in spec_of(pod).get("containers") or []:
        for port in container.get("ports") or []:
            if "metrics" in str(port.get("name") or "") and port.get("containerPort"):
                urls.append(f"http://{address}:{port['containerPort']}/metrics")
    return urls


def dra_devices(slices: Sequence[Obj]) -> dict[str, int]:
    """Node -> devices the DRA driver publishes there (its ResourceSlices' devices)."""
    counts: dict[str, int] = {}
    for item in slices:
        spec = spec_of(item)
        if spec.get("driver") == DRA_DRIVER and spec.get("nodeName"):
            node = str(spec["nodeName"])
            counts[node] = counts.get(node, 0) + len(spec.get("devices") or [])
    return counts


def gpu_allocatable(node: Obj) -> dict[str, str]:
    """GPU resources the kubelet advertises: `amd.com/...` and `nvidia.com/...` in allocatable."""
    allocatable = status_of(node).get("allocatable") or {}
    return {str(k): str(v) for k, v in allocatable.items() if str(k).startswith(GPU_RESOURCE_PREFIXES)}


def vendor_of(node: Obj) -> str:
    labels = labels_of(node)
    if GPU_VENDOR_LABEL in labels:
        return labels[GPU_VENDOR_LABEL]
    found = [v for v, k in (("amd", AMD_PRESENT_LABEL), ("nvidia", NVIDIA_PRESENT_LABEL)) if labels.get(k)]
    return "+".join(found) or "-"


def gpus_of(node: Obj) -> str:
    """`AMD-Instinct-MI300X x8, 64 partitions` from the node labeller's labels, `-` before it ran."""
    labels = labels_of(node)
    count = labels.get(GPU_COUNT_LABEL)
    if count is None:
        return "-"
    text = f"{labels.get(GPU_MODEL_LABEL, 'GPU')} x{count}"
    partitions = labels.get(GPU_PARTITION_COUNT_LABEL, "0")
    return text + (f", {partitions} partitions" if partitions not in ("0", "") else "")


def node_rows(nodes: Sequence[Obj], pods: Sequence[Obj], slices: Sequence[Obj] = ()) -> list[NodeRow]:
    """One table row per Node object (pure: the table's whole view of the cluster)."""
    published = dra_devices(slices)
    rows = []
    for node in sorted(nodes, key=name_of):
        name = name_of(node)
        # Finished Job pods are history; every other pod on the node is shown, broken ones too.
        on_node = [p for p in pods if spec_of(p).get("nodeName") == name and pod_phase(p) != "Succeeded"]
        ready = sum(1 for p in on_node if pod_phase(p) == "Running" and pod_is_ready(p))
        allocatable = status_of(node).get("allocatable") or {}
        resources = ", ".join(f"{k}={v}" for k, v in sorted(allocatable.items()) if is_extended(k))
        if name in published:  # DRA devices are no node resource: show what the slices offer
            resources = ", ".join(filter(None, [resources, f"{DRA_DRIVER}={published[name]} (DRA)"]))
        urls = [url for p in on_node for url in metrics_urls(p)]
        rows.append(
            NodeRow(
                node=name,
                vendor=vendor_of(node),
                gpus=gpus_of(node),
                ready="Ready" if node_is_ready(node) else "NotReady",
                stage=stage_of(node),
                pods=f"{ready}/{len(on_node)} ready",
                resources=resources or "-",
                metrics=" ".join(urls) or "-",
                pod_cells=tuple(pod_cell(p) for p in sorted(on_node, key=app_name)),
                self_check=self_check_of(node),
                partition=partition_of(node),
                health=health_of(node),
                deviceconfig=annotations_of(node).get(OWNER_ANNOTATION, "-"),
                profile=labels_of(node).get(CONFIG_PROFILE_LABEL, "-"),
            )
        )
    return rows


def app_name(pod: Obj) -> str:
    """What a pod is, short: its app name label (the chart's service name) or its own name."""
    return labels_of(pod).get(APP_NAME_LABEL) or name_of(pod)


def pod_reason(pod: Obj) -> str:
    """Why a pod is not Ready, the way `kubectl get pods` STATUS says it ("" when it is Ready).

    The first container that is waiting or terminated gives its reason (CrashLoopBackOff, Error,
    OOMKilled, ContainerCreating, ...); a pod that is running but not ready is "starting".
    """
    if pod_phase(pod) == "Running" and pod_is_ready(pod):
        return ""
    status = status_of(pod)
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        for kind in ("waiting", "terminated"):
            if kind in state:
                return str(state[kind].get("reason") or kind.capitalize())
    scheduled = condition_of(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        return str(scheduled.get("reason") or "Pending")
    if status.get("containerStatuses") and pod_phase(pod) == "Running":
        return "starting"
    return str(status.get("reason") or pod_phase(pod))


def restart_count(pod: Obj) -> int:
    return sum(int(c.get("restartCount") or 0) for c in status_of(pod).get("containerStatuses") or [])


def pod_cell(pod: Obj) -> PodCell:
    """`device-plugin`, `device-plugin starting`, `device-plugin CrashLoopBackOff x26` (x: restarts)."""
    reason = pod_reason(pod)
    restarts = restart_count(pod)
    parts = [app_name(pod), reason, f"x{restarts}" if restarts else ""]
    if not reason:
        tone = Tone.READY
    elif reason in FAILING_REASONS or pod_phase(pod) == "Failed":
        tone = Tone.FAILING
    else:
        tone = Tone.STARTING
    return PodCell(" ".join(p for p in parts if p), tone)


def pods_cell(row: NodeRow) -> Text:
    """The pods column: the ready count, then each pod coloured by its tone (plain when piped)."""
    text = Text(row.pods)
    for index, cell in enumerate(row.pod_cells):
        text.append(": " if index == 0 else ", ")
        text.append(cell.text, style=cell.tone.value)
    return text


def gpu_healthy(node: Obj) -> tuple[str, str]:
    """(status, reason) of the node labeller's GPUHealthy condition; ("", "") before it wrote one."""
    condition = condition_of(node, GPU_HEALTHY_CONDITION) or {}
    return str(condition.get("status", "")), str(condition.get("reason", ""))


def health_of(node: Obj) -> str:
    """`healthy`, `unhealthy RasUncorrectableIncrease`, then the remediation step when one runs."""
    status, reason = gpu_healthy(node)
    text = {"True": "healthy", "False": f"unhealthy {reason}".strip(), "Unknown": "unknown"}.get(status, "-")
    state = labels_of(node).get(REMEDIATION_STATE_LABEL)
    return f"{text}; remediation={state}" if state else text


def partition_of(node: Obj) -> str:
    """`cpx_nps4 success`: the labeller's partition label and the config manager's state."""
    labels = labels_of(node)
    parts = [labels.get(AMD_PARTITION_LABEL, ""), labels.get(CONFIG_STATE_LABEL, "")]
    return " ".join(p for p in parts if p) or "-"


COLUMNS = (
    "node",
    "deviceconfig",
    "vendor",
    "gpus",
    "ready",
    "stage",
    "pods",
    "allocatable",
    "partition",
    "self-check",
    "health",
    "metrics",
)


def render(rows: Sequence[NodeRow], title: str = "gpuop GPU nodes", *, metrics: bool = True) -> Table:
    table = Table(title=title, expand=False)
    columns = COLUMNS if metrics else COLUMNS[:-1]
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        partition = row.partition if row.profile == "-" else f"{row.profile}: {row.partition}"
        cells: list[str | Text] = [
            row.node,
            row.deviceconfig,
            row.vendor,
            row.gpus,
            row.ready,
            row.stage,
            pods_cell(row),
            row.resources,
            partition,
            row.self_check,
            row.health,
            row.metrics,
        ]
        table.add_row(*cells[: len(columns)])
    return table

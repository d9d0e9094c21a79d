"""`gpuop-operator --uninstall-cleanup`: the chart's pre-delete hook, so `helm uninstall` leaves nothing.

Helm deletes the operator Deployment and the DeviceConfigs in one pass. Without this hook the
operator is gone before it can run its finalizer, so the DeviceConfigs stay Terminating forever and
every node keeps its deploy labels, stage annotations and the node labeller's labels. Run before
helm deletes anything, while the operator still works:

1. delete every DeviceConfig the operator manages and wait for them to go: the operator empties
   each node stage by stage (so operator-managed agents leave) and releases its finalizer;
2. after the wait, a DeviceConfig still there (no operator running, or it is stuck) loses our
   finalizer here, and its nodes are cleaned by step 3 instead. A DeviceConfig with
   `driver.uninstallPolicy: Uninstall` keeps its finalizer until the operator has drained and
   uninstalled the driver node by node, which can take far longer than the wait: the hook says so
   up front, and names what it cut short when it releases one itself (the driver stays on the
   nodes the walk had not reached, a node mid-walk stays cordoned);
3. on every node: our deploy labels and annotations go (the stage, the owner, the operand pause
   lists), and what the agents write there goes too on nodes where no pod of that agent runs any
   more: the labels the node labeller owns (its ownership annotation lists them), the config
   manager's state labels and annotations, the test runner's result label and annotations (an
   agent that still runs would write them straight back; it is named in the log). The profile
   label and test requests are the administrator's and stay.

The per-node patch is a pure function; the loop around it is I/O with bounded waits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from gpuop_common.nodemeta import AGENT_NODE_MARKS, LABELLER_OWNED_ANNOTATION, labeller_owned_keys
from gpuop_common.operandpause import PAUSES
from kubernetes.client.exceptions import ApiException

from gpuop_operator.kubeio import DEVICECONFIGS, NODES, PODS, JsonObj, KubeJson
from gpuop_operator.model import FINALIZER, LABEL_PREFIX, OWNER_ANNOTATION, STAGE_ANNOTATION
from gpuop_operator.upgrade import STATE_LABEL

log = logging.getLogger(__name__)
DEPLOY_PREFIX = f"{LABEL_PREFIX}deploy."
LABELLER = "node-labeller"
# Agents whose marks on a Node go only once none of their pods runs there.
MARKING_AGENTS = (LABELLER, *AGENT_NODE_MARKS)


@dataclass(frozen=True)
class CleanupReport:
    deleted: tuple[str, ...]  # DeviceConfigs deleted ("<namespace>/<name>")
    forced: tuple[str, ...]  # of those, released here because the operator did not in time
    cleaned_nodes: tuple[str, ...]
    agents_still_running: tuple[str, ...]  # nodes whose agents' marks were left ("<node> (<agent>)")
    uninstall_cut_short: tuple[str, ...] = ()  # forced ones whose driver uninstall had not ended

    @property
    def complete(self) -> bool:
        return not self.agents_still_running


def node_cleanup_patch(node: Mapping[str, Any], *, agents_running: Collection[str]) -> JsonObj | None:
    """The merge patch that removes gpuop's marks from a Node; None when there is nothing to remove.
    `agents_running`: the agents (MARKING_AGENTS) with a pod on this node, whose marks stay."""
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    drop_labels = {key for key in labels if key.startswith(DEPLOY_PREFIX)}
    ours = (OWNER_ANNOTATION, STAGE_ANNOTATION, *(pause.annotation for pause in PAUSES))
    drop_annotations = {key for key in ours if key in annotations}
    if LABELLER not in agents_running:
        drop_labels |= {key for key in labeller_owned_keys(annotations) if key in labels}
        if LABELLER_OWNED_ANNOTATION in annotations:
            drop_annotations.add(LABELLER_OWNED_ANNOTATION)
    for agent, (agent_labels, agent_annotations) in AGENT_NODE_MARKS.items():
        if agent not in agents_running:
            drop_labels |= {key for key in agent_labels if key in labels}
            drop_annotations |= {key for key in agent_annotations if key in annotations}
    if not drop_labels and not drop_annotations:
        return None
    patch: JsonObj = {"metadata": {}}
    if drop_labels:
        patch["metadata"]["labels"] = dict.fromkeys(sorted(drop_labels))
    if drop_annotations:
        patch["metadata"]["annotations"] = dict.fromkeys(sorted(drop_annotations))
    return patch


def uninstalls_driver(dc: Mapping[str, Any]) -> bool:
    """The operator takes the driver off this DeviceConfig's nodes before releasing it (read from
    the raw object: an invalid spec never started a walk, and a typo is no `Uninstall`)."""
    driver = (dc.get("spec") or {}).get("driver") or {}
    return isinstance(driver, dict) and driver.get("uninstallPolicy") == "Uninstall"


def nodes_in_driver_walk(nodes: list[JsonObj]) -> list[str]:
    """Nodes an interrupted driver walk left behind (its state label on them, maybe cordoned)."""
    return sorted(
        str(n["metadata"]["name"]) for n in nodes if STATE_LABEL in (n["metadata"].get("labels") or {})
    )


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _wait(condition: Callable[[], bool], timeout: float, sleep: Callable[[float], None]) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        sleep(1.0)
    return True


def _agents_by_node(kube: KubeJson, namespace: str, release: str) -> dict[str, set[str]]:
    """Node -> the marking agents of the release with a pod there."""
    selector = f"app.kubernetes.io/name in ({','.join(MARKING_AGENTS)}),app.kubernetes.io/instance={release}"
    pods, _ = kube.list(PODS, namespace, labelSelector=selector)
    running: dict[str, set[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            running.setdefault(str(node), set()).add(str(pod["metadata"]["labels"]["app.kubernetes.io/name"]))
    return running


def _release_finalizer(kube: KubeJson, dc: JsonObj) -> None:
    meta = dc["metadata"]
    remaining = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
    body = {"metadata": {"finalizers": remaining, "resourceVersion": meta.get("resourceVersion")}}
    try:
        kube.patch(DEVICECONFIGS, meta["name"], body, meta.get("namespace"))
    except ApiException as exc:
        if exc.status != 404:
            raise


def _clean_nodes(kube: KubeJson, *, agents: dict[str, set[str]] | None) -> set[str]:
    """Patch every node; `agents` None: keep every agent's marks this pass."""
    cleaned: set[str] = set()
    nodes, _ = kube.list(NODES)
    for node in nodes:
        name = str(node["metadata"]["name"])
        running = MARKING_AGENTS if agents is None else agents.get(name, set())
        patch = node_cleanup_patch(node, agents_running=running)
        if patch is not None:
            kube.patch(NODES, name, patch)
            cleaned.add(name)
    return cleaned


def uninstall_cleanup(
    kube: KubeJson,
    *,
    namespace: str,
    release: str,
    watch_namespace: str | None,
    timeout: float = 120.0,
    agents_timeout: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
) -> CleanupReport:
    """Steps 1-3 of the module docstring: waits at most `timeout` for the operator's cleanup and
    `agents_timeout` for the operator-managed agents that mark nodes (MARKING_AGENTS) to leave."""
    dcs, _ = kube.list(DEVICECONFIGS, watch_namespace)
    for dc in dcs:
        try:
            kube.delete(DEVICECONFIGS, dc["metadata"]["name"], dc["metadata"].get("namespace"))
        except ApiException as exc:
            if exc.status != 404:
                raise
    log.info(
        "deleted DeviceConfigs; waiting for the operator to clean up",
        extra={"deviceconfigs": [_key(d) for d in dcs]},
    )
    uninstalling = {_key(d) for d in dcs if uninstalls_driver(d)}
    if uninstalling:
        log.warning(
            "these DeviceConfigs have driver.uninstallPolicy Uninstall: the operator drains and "
            "uninstalls the driver node by node before releasing them, and this hook waits only "
            f"{timeout:.0f}s (uninstallCleanup.timeoutSeconds, bounded by helm uninstall --timeout) "
            "before releasing them itself, which cuts the driver uninstall short",
            extra={"deviceconfigs": sorted(uninstalling), "timeout_seconds": timeout},
        )

    def left() -> list[JsonObj]:
        return kube.list(DEVICECONFIGS, watch_namespace)[0]

    forced: list[str] = []
    if not _wait(lambda: not left(), timeout, sleep):
        for dc in left():
            if FINALIZER in (dc["metadata"].get("finalizers") or []):
                log.warning(
                    "the operator did not release its finalizer in time; releasing it",
                    extra={"deviceconfig": _key(dc)},
                )
                _release_finalizer(kube, dc)
                forced.append(_key(dc))
    cut_short = sorted(set(forced) & uninstalling)
    if cut_short:
        log.warning(
            "driver uninstall cut short: these nodes keep the driver gpuop installed or stay in the "
            "walk (cordoned); delete the DeviceConfig before helm uninstall, or raise the timeout",
            extra={"deviceconfigs": cut_short, "nodes": nodes_in_driver_walk(kube.list(NODES)[0])},
        )
    cleaned: set[str] = set()
    # Our deploy labels first (the operator already removed them unless it was absent), so that
    # operator-managed agent pods leave; then each agent's marks where none of its pods runs.
    cleaned |= _clean_nodes(kube, agents=None)
    _wait(lambda: not _agents_by_node(kube, namespace, release), agents_timeout, sleep)
    running = _agents_by_node(kube, namespace, release)
    cleaned |= _clean_nodes(kube, agents=running)
    marked = sorted(f"{node} ({agent})" for node, agents in running.items() for agent in sorted(agents))
    if marked:
        log.warning(
            "agents still run on these nodes (not operator-managed?): their marks stay",
            extra={"nodes": marked},
        )
    return CleanupReport(
        tuple(_key(d) for d in dcs),
        tuple(forced),
        tuple(sorted(cleaned)),
        tuple(marked),
        tuple(cut_short),
    )

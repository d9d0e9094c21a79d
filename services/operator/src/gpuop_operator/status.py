"""DeviceConfig status: conditions, counts and per-node stages computed from a plan (pure).

Conditions keep their lastTransitionTime while their status does not change, so a status computed
again from the same cluster state is identical and the reconciler writes nothing at steady state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuop_common.config import OPERAND_SECTIONS
from gpuop_common.config.driver import DriverConfig

from gpuop_operator.driverflow import DriverNodeState
from gpuop_operator.model import READY, REMOVING
from gpuop_operator.overridecheck import REASON as OVERRIDE_REASON
from gpuop_operator.plan import RolloutPlan
from gpuop_operator.remediation import NodeRemediation
from gpuop_operator.validation import Validation

JsonObj = dict[str, Any]
CONDITION_TYPES = ("Ready", "Progressing", "Degraded")


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str

    def to_wire(self, generation: int, now: str, previous: Mapping[str, Any] | None) -> JsonObj:
        status = "True" if self.status else "False"
        unchanged = previous is not None and previous.get("status") == status
        since = previous.get("lastTransitionTime") if unchanged and previous else None
        return {
            "type": self.type,
            "status": status,
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": generation,
            "lastTransitionTime": since or now,
        }


def invalid_conditions(validation: Validation) -> list[Condition]:
    reason, message = validation.summary()
    return [
        Condition("Ready", False, reason, message),
        Condition("Progressing", False, reason, "nothing is changed on nodes until the spec is fixed"),
        Condition("Degraded", True, reason, message),
    ]


def rollout_conditions(
    plan: RolloutPlan,
    missing: Collection[str],
    deleting: bool = False,
    held: str = "",
    problem: tuple[str, str] = ("", ""),
) -> list[Condition]:
    """Conditions of a valid DeviceConfig from its plan; `missing`: enabled operands with no DaemonSet.

    `held`: why the driver lifecycle is held (a broken playbook override), shown as Degraded;
    `problem`: (reason, message) of a setting that cannot be used (e.g. the ConfigMap
    `configManager.profilesConfigMap` names), shown as Degraded when the message is set."""
    stages = plan.stages
    selected = [stage for stage in stages.values() if stage != REMOVING]
    ready = sum(1 for stage in selected if stage == READY)
    removing = len(stages) - len(selected)
    if deleting:
        return [
            Condition("Ready", False, "Deleting", f"removing operands from {removing} node(s)"),
            Condition("Progressing", True, "Deleting", f"removing operands from {removing} node(s)"),
            Condition("Degraded", False, "AsExpected", ""),
        ]
    rolling = ready < len(selected) or removing > 0
    if not selected:
        ready_condition = Condition("Ready", True, "NoNodesSelected", "the selector matches no node")
    elif ready == len(selected):
        ready_condition = Condition(
            "Ready", True, "RolloutComplete", f"{ready}/{len(selected)} node(s) ready"
        )
    else:
        ready_condition = Condition(
            "Ready", False, "RolloutInProgress", f"{ready}/{len(selected)} node(s) ready"
        )
    progressing = (
        Condition(
            "Progressing", True, "Rolling", f"{len(selected) - ready} node(s) rolling, {removing} leaving"
        )
        if rolling
        else Condition("Progressing", False, "Complete", "every selected node is at its desired stage")
    )
    if held:
        degraded = Condition("Degraded", True, OVERRIDE_REASON, held)
    elif problem[1]:
        degraded = Condition("Degraded", True, problem[0], problem[1])
    elif missing:
        sections = ", ".join(f"spec.{OPERAND_SECTIONS[s]}" for s in sorted(missing))
        degraded = Condition(
            "Degraded", True, "OperandNotInstalled", f"{sections}: enabled, but its chart is not installed"
        )
    else:
        degraded = Condition("Degraded", False, "AsExpected", "")
    return [ready_condition, progressing, degraded]


def build_status(
    generation: int,
    conditions: Sequence[Condition],
    plan: RolloutPlan | None,
    previous: Mapping[str, Any] | None,
    now: str,
) -> JsonObj:
    """The whole status object; `plan` None (invalid spec) keeps the previous counts and stages."""
    previous = previous or {}
    old = {c.get("type"): c for c in previous.get("conditions") or [] if isinstance(c, Mapping)}
    status: JsonObj = {
        "observedGeneration": generation,
        "conditions": [c.to_wire(generation, now, old.get(c.type)) for c in conditions],
    }
    if plan is None:
        for key in ("selectedNodes", "readyNodes", "operands", "stages", "nodes", "driver", "remediation"):
            if key in previous:
                status[key] = previous[key]
        return status
    stages = plan.stages
    selected = {node: stage for node, stage in stages.items() if stage != REMOVING}
    status["selectedNodes"] = len(selected)
    status["readyNodes"] = sum(1 for stage in selected.values() if stage == READY)
    status["operands"] = {
        OPERAND_SECTIONS[service]: {"desired": desired, "ready": ready}
        for service, (desired, ready) in sorted(plan.operands.items())
    }
    status["stages"] = dict(sorted(Counter(stages.values()).items()))
    status["nodes"] = dict(sorted(stages.items()))
    return status


def driver_status(driver: DriverConfig, states: Mapping[str, DriverNodeState]) -> JsonObj:
    """`status.driver`: the wanted version, each node's driver state and version, counts per state,
    and a one-line summary for the `Driver` printer column."""
    # An empty spec version is each vendor's default: one version when the nodes agree on it.
    wanted = sorted({s.wanted for s in states.values() if s.wanted})
    want = driver.version or (", ".join(wanted) if wanted else "default")
    at = sum(1 for state in states.values() if state.version and state.version == state.wanted)
    nodes = {
        name: {k: v for k, v in (("state", s.state), ("version", s.version), ("message", s.message)) if v}
        for name, s in sorted(states.items())
    }
    return {
        "version": want,
        "summary": f"{at}/{len(states)} at {want}",
        "states": dict(sorted(Counter(s.state for s in states.values()).items())),
        "nodes": nodes,
    }


def remediation_status(states: Mapping[str, NodeRemediation]) -> JsonObj:
    """`status.remediation`: nodes per state, and per node in or after a run its state, why, and
    the last runs (start, end, trigger, steps, result). Healthy nodes with no history are left out."""
    nodes = {}
    for name, node in sorted(states.items()):
        if node.state == "healthy" and not node.history:
            continue
        entry: JsonObj = {"state": node.state}
        if node.message:
            entry["message"] = node.message
        if node.history:
            entry["history"] = [dict(run) for run in node.history]
        nodes[name] = entry
    counted = Counter(s.state for s in states.values() if s.state != "healthy")
    return {"states": dict(sorted(counted.items())), "nodes": nodes}


def transitions(previous: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[JsonObj]:
    """Conditions whose status or reason changed: each becomes an Event."""
    old = {c.get("type"): c for c in (previous or {}).get("conditions") or [] if isinstance(c, Mapping)}
    changed = []
    for condition in current.get("conditions", []):
        before = old.get(condition["type"])
        if before is None or (before.get("status"), before.get("reason")) != (
            condition["status"],
            condition["reason"],
        ):
            changed.append(condition)
    return changed

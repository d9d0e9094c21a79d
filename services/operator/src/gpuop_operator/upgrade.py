"""Rolling driver upgrades: which nodes may start now, within `maxParallelUpgrades` and
`maxUnavailableNodes` (pure; the reconciler applies the answer).

Per node the label `gpuop.dev/driver-upgrade-state` walks `upgrade-required -> cordoned -> draining
-> pod-restart -> upgrading -> rebooting -> validating -> upgrade-done`, or ends at `upgrade-failed`
until a user sets it back to `upgrade-required`. An uninstall walks `uninstall-required -> cordoned
-> draining -> pod-restart -> uninstalling -> (label removed)`, or ends at `uninstall-failed`.
The planner is asked on every reconcile and only ever *starts* nodes; it never moves a node past
its current step, so its answer is safe to apply after an operator restart from whatever the
labels say.

The bounds hold at every moment, not on average:
- in flight (`cordoned` .. `validating`) never exceeds `maxParallelUpgrades` (0: no limit);
- unavailable never exceeds `maxUnavailableNodes` of the selected nodes (a percentage rounds up, as
  Kubernetes rounds `maxUnavailable`), where unavailable counts the nodes in flight, the failed
  ones, and the nodes that are NotReady or cordoned for any other reason (an admin's cordon, a
  node being repaired): the budget is about capacity, whoever took it away.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuop_common.config.driver import DriverUpgradePolicy
from gpuop_common.nodemeta import DRIVER_UPGRADE_STATE_LABEL

STATE_LABEL = DRIVER_UPGRADE_STATE_LABEL


class UpgradeState(StrEnum):
    REQUIRED = "upgrade-required"
    CORDONED = "cordoned"
    DRAINING = "draining"
    POD_RESTART = "pod-restart"
    UPGRADING = "upgrading"
    REBOOTING = "rebooting"
    VALIDATING = "validating"
    DONE = "upgrade-done"
    FAILED = "upgrade-failed"
    # The uninstall walk (`uninstallPolicy: Uninstall`) shares cordoned .. pod-restart, then runs the
    # driver-uninstall Job instead of the install; done, the node loses the state label.
    UNINSTALL_REQUIRED = "uninstall-required"
    UNINSTALLING = "uninstalling"
    UNINSTALL_FAILED = "uninstall-failed"


IN_FLIGHT = frozenset(
    {
        UpgradeState.CORDONED,
        UpgradeState.DRAINING,
        UpgradeState.POD_RESTART,
        UpgradeState.UPGRADING,
        UpgradeState.REBOOTING,
        UpgradeState.VALIDATING,
        UpgradeState.UNINSTALLING,
    }
)
WAITING = frozenset({UpgradeState.REQUIRED, UpgradeState.UNINSTALL_REQUIRED})
FAILED_STATES = frozenset({UpgradeState.FAILED, UpgradeState.UNINSTALL_FAILED})
# The order a node walks; `FAILED` may be entered from any step in flight.
SEQUENCE: tuple[UpgradeState, ...] = (
    UpgradeState.REQUIRED,
    UpgradeState.CORDONED,
    UpgradeState.DRAINING,
    UpgradeState.POD_RESTART,
    UpgradeState.UPGRADING,
    UpgradeState.REBOOTING,
    UpgradeState.VALIDATING,
    UpgradeState.DONE,
)


def parse_state(value: str | None) -> UpgradeState | None:
    """The label's state; None when absent. An unknown value is None too: the planner then treats
    the node as not upgrading, and the reconciler reports the bad label (it never guesses a step)."""
    try:
        return UpgradeState(value) if value else None
    except ValueError:
        return None


def next_state(state: UpgradeState, *, reboot: bool) -> UpgradeState:
    """The step after `state` on the happy path; `rebooting` is skipped when no reboot is needed."""
    if state in (UpgradeState.DONE, UpgradeState.FAILED):
        raise ValueError(f"{state} is final")
    following = SEQUENCE[SEQUENCE.index(state) + 1]
    if following is UpgradeState.REBOOTING and not reboot:
        return UpgradeState.VALIDATING
    return following


@dataclass(frozen=True)
class NodeView:
    """What the planner needs of one selected node."""

    name: str
    state: UpgradeState | None
    ready: bool = True
    unschedulable: bool = False  # spec.unschedulable, whoever set it


def max_unavailable(value: int | str, total: int) -> int:
    """`maxUnavailableNodes` as a node count: a percentage of `total`, rounded up."""
    if isinstance(value, int):
        return value
    if value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def is_unavailable(node: NodeView) -> bool:
    return node.state in IN_FLIGHT or node.state in FAILED_STATES or not node.ready or node.unschedulable


@dataclass(frozen=True)
class UpgradePlan:
    start: tuple[str, ...]  # nodes to move from `upgrade-required` (or uninstall-) to `cordoned` now
    waiting: int  # nodes still waiting after this plan
    in_flight: int  # after this plan
    unavailable: int  # after this plan
    limit_parallel: int | None  # None: no limit
    limit_unavailable: int


def plan_upgrades(nodes: Sequence[NodeView], policy: DriverUpgradePolicy) -> UpgradePlan:
    """Nodes to start now (an upgrade or an uninstall: the same bounds), in name order
    (deterministic across restarts), within both bounds.

    A node that is already unavailable for another reason (NotReady, cordoned) costs nothing more
    to upgrade, so it may start even when the unavailable budget is spent; it still takes one of
    the parallel slots.
    """
    limit_unavailable = max_unavailable(policy.max_unavailable_nodes, len(nodes))
    limit_parallel = policy.max_parallel_upgrades or None
    in_flight = sum(1 for n in nodes if n.state in IN_FLIGHT)
    unavailable = sum(1 for n in nodes if is_unavailable(n))
    start: list[str] = []
    candidates = sorted((n for n in nodes if n.state in WAITING), key=lambda n: n.name)
    for node in candidates:
        # `upgradePolicy.enable` is about upgrades; an uninstall is asked for by uninstallPolicy.
        if node.state is UpgradeState.REQUIRED and not policy.enable:
            continue
        if limit_parallel is not None and in_flight >= limit_parallel:
            break
        already_down = is_unavailable(node)
        if not already_down and unavailable >= limit_unavailable:
            continue  # a node that is already down may still fit
        start.append(node.name)
        in_flight += 1
        unavailable += 0 if already_down else 1
    return UpgradePlan(
        start=tuple(start),
        waiting=len(candidates) - len(start),
        in_flight=in_flight,
        unavailable=unavailable,
        limit_parallel=limit_parallel,
        limit_unavailable=limit_unavailable,
    )

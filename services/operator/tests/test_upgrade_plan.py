"""The rolling-upgrade planner: which nodes may start, within maxParallelUpgrades and
maxUnavailableNodes, checked after every single state change of a simulated rollout."""

from __future__ import annotations

import random

import pytest
from gpuop_common.config.driver import DriverUpgradePolicy
from gpuop_operator.upgrade import (
    IN_FLIGHT,
    NodeView,
    UpgradeState,
    is_unavailable,
    max_unavailable,
    next_state,
    parse_state,
    plan_upgrades,
)

S = UpgradeState


def policy(parallel: int = 1, unavailable: int | str = "25%", enable: bool = True) -> DriverUpgradePolicy:
    return DriverUpgradePolicy(
        enable=enable, max_parallel_upgrades=parallel, max_unavailable_nodes=unavailable
    )


def nodes(count: int, state: UpgradeState | None = S.REQUIRED) -> list[NodeView]:
    return [NodeView(f"gpu-{i:03d}", state) for i in range(count)]


@pytest.mark.parametrize(
    ("value", "total", "expected"),
    [(3, 50, 3), ("20%", 50, 10), ("25%", 10, 3), ("1%", 50, 1), ("0%", 50, 0), ("100%", 7, 7), ("4", 9, 4)],
)
def test_max_unavailable_rounds_a_percentage_up(value: int | str, total: int, expected: int) -> None:
    assert max_unavailable(value, total) == expected


def test_the_walk_skips_rebooting_only_when_no_reboot_is_needed() -> None:
    walk, state = [S.REQUIRED], S.REQUIRED
    while state is not S.DONE:
        state = next_state(state, reboot=True)
        walk.append(state)
    assert [s.value for s in walk] == [
        "upgrade-required", "cordoned", "draining", "pod-restart", "upgrading", "rebooting",
        "validating", "upgrade-done",
    ]  # fmt: skip
    assert next_state(S.UPGRADING, reboot=False) is S.VALIDATING
    for final in (S.DONE, S.FAILED):
        with pytest.raises(ValueError, match="final"):
            next_state(final, reboot=True)


@pytest.mark.parametrize("bad", ["", None, "upgrading-now", "UPGRADE-DONE", "done"])
def test_an_absent_or_unknown_label_is_no_state(bad: str | None) -> None:
    assert parse_state(bad) is None


def test_starts_in_name_order_up_to_max_parallel() -> None:
    plan = plan_upgrades(nodes(50), policy(parallel=5, unavailable="20%"))
    assert plan.start == ("gpu-000", "gpu-001", "gpu-002", "gpu-003", "gpu-004")
    assert (plan.in_flight, plan.unavailable, plan.waiting) == (5, 5, 45)
    assert (plan.limit_parallel, plan.limit_unavailable) == (5, 10)


def test_unavailable_budget_counts_failed_notready_and_cordoned_nodes() -> None:
    cluster = nodes(10)
    cluster[0] = NodeView("gpu-000", S.FAILED)
    cluster[1] = NodeView("gpu-001", S.DONE, ready=False)
    cluster[2] = NodeView("gpu-002", None, unschedulable=True)  # an admin's cordon
    plan = plan_upgrades(cluster, policy(parallel=5, unavailable=4))
    assert plan.start == ("gpu-003",)  # 3 already unavailable, room for one more
    assert plan.unavailable == 4


def test_a_node_already_down_may_start_when_the_budget_is_spent() -> None:
    cluster = [
        NodeView("gpu-000", S.CORDONED),
        NodeView("gpu-001", S.REQUIRED),
        NodeView("gpu-002", S.REQUIRED, ready=False),  # upgrading it costs no capacity
    ]
    plan = plan_upgrades(cluster, policy(parallel=3, unavailable=1))
    assert plan.start == ("gpu-002",)
    assert plan.unavailable == 2  # gpu-000 in flight, gpu-002 down anyway


def test_nothing_starts_when_disabled_or_parallel_slots_are_full() -> None:
    assert plan_upgrades(nodes(4), policy(enable=False)).start == ()
    busy = [NodeView("a", S.UPGRADING), NodeView("b", S.REQUIRED)]
    assert plan_upgrades(busy, policy(parallel=1, unavailable="100%")).start == ()
    assert plan_upgrades(busy, policy(parallel=0, unavailable="100%")).start == ("b",)  # 0: no limit


def test_failed_nodes_wait_for_a_user_and_done_nodes_are_never_restarted() -> None:
    cluster = [NodeView("a", S.FAILED), NodeView("b", S.DONE), NodeView("c", None)]
    assert plan_upgrades(cluster, policy(parallel=10, unavailable="100%")).start == ()


def _assert_bounds(cluster: dict[str, NodeView], limit_parallel: int, limit_unavailable: int) -> None:
    in_flight = sum(1 for n in cluster.values() if n.state in IN_FLIGHT)
    unavailable = sum(1 for n in cluster.values() if is_unavailable(n))
    assert in_flight <= limit_parallel, cluster
    assert unavailable <= limit_unavailable, cluster


@pytest.mark.parametrize(
    ("seed", "unavailable", "limit"),
    [(1, "20%", 10), (2, "20%", 10), (3, "8%", 4)],  # 8%: the unavailable bound binds before parallel
)
def test_a_50_node_rollout_stays_within_bounds_after_every_change(
    seed: int, unavailable: str, limit: int
) -> None:
    # 50 nodes, 5 in parallel; one node fails, nodes advance in random order, and the planner is
    # asked after each single step, as the reconciler asks on each event.
    rng = random.Random(seed)
    rules = policy(parallel=5, unavailable=unavailable)
    cluster = {n.name: n for n in nodes(50)}
    doomed = f"gpu-{rng.randrange(50):03d}"
    steps = 0
    while True:
        for name in plan_upgrades(list(cluster.values()), rules).start:
            cluster[name] = NodeView(name, S.CORDONED, unschedulable=True)
            _assert_bounds(cluster, 5, limit)
        moving = sorted(n for n, v in cluster.items() if v.state in IN_FLIGHT)
        if not moving:
            break
        name = rng.choice(moving)
        state = cluster[name].state
        assert state is not None
        if name == doomed and state is S.UPGRADING:
            cluster[name] = NodeView(name, S.FAILED, unschedulable=True)
        else:
            after = next_state(state, reboot=True)
            cluster[name] = NodeView(
                name, after, ready=after is not S.REBOOTING, unschedulable=after in IN_FLIGHT
            )
        _assert_bounds(cluster, 5, limit)
        steps += 1
    states = [v.state for v in cluster.values()]
    assert states.count(S.DONE) == 49 and states.count(S.FAILED) == 1
    # From cordoned (where the planner puts a node) each node took 6 steps to done; the failed one
    # took 3 to upgrading, then failed.
    assert steps == 49 * 6 + 4


def test_a_restarted_planner_repeats_no_finished_node() -> None:
    # What the labels say after a restart is all the planner knows; done nodes are never picked.
    cluster = [NodeView(f"gpu-{i}", S.DONE) for i in range(3)] + [NodeView("gpu-3", S.REQUIRED)]
    assert plan_upgrades(cluster, policy(parallel=5, unavailable="100%")).start == ("gpu-3",)

"""Agents started on a busy machine come up Ready without a single restart.

Every simulated node shares this machine's CPUs; here two busy loops hog them too, so each agent's
Python takes seconds to import before its probe port opens. The kubelet's probe budget (the charts'
startup probe, 2 s x 30) covers that, on the simulated kubelet as on a real one: no agent is killed
while starting, none ends in CrashLoopBackOff.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuop_sim import helm
from gpuop_sim.cluster import SimCluster
from gpuop_sim.cpuload import busy_loops
from gpuop_sim.workloads.kubeapi import EVENTS, PODS

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ("device-plugin", "node-labeller", "metrics-exporter")
NAMESPACE = "gpuop"


def restart_counts(pods: list[dict[str, Any]]) -> dict[str, int]:
    return {
        f"{p['metadata']['name']}/{c['name']}": int(c.get("restartCount", 0))
        for p in pods
        for c in (p.get("status") or {}).get("containerStatuses") or []
    }


@pytest.mark.slow
def test_every_agent_becomes_ready_with_no_restarts_while_the_cpus_are_busy() -> None:
    with (
        busy_loops(2),
        SimCluster(
            profiles=["amd-single", "amd-mi210x8", "nvidia-h100x8", "nvidia-h100x8-mig"], pods="process"
        ) as cluster,
    ):
        for agent in AGENTS:
            helm.kubectl_install(cluster.kubeconfig, ROOT / "charts" / agent, namespace=NAMESPACE)
        for agent in AGENTS:
            cluster.wait_for_daemonset_ready(f"gpuop-{agent}", NAMESPACE, timeout=300)
        api = cluster.api()
        pods, _ = api.list(PODS, NAMESPACE)
        counts = restart_counts(pods)
        assert len(counts) == len(AGENTS) * len(cluster.nodes), counts
        assert set(counts.values()) == {0}, counts
        events, _ = api.list(EVENTS, NAMESPACE)
        assert [e["message"] for e in events if e["reason"] == "Killing"] == []

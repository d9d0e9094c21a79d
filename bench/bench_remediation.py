"""Node remediation: time from a GPU fault to the node untainted, and API writes per remediation.

A 20-node stub-pod cluster, the real operator as a process, `remediation` enabled with no hold
time, no parallel limit and no validation recipe. Every node gets `GPUHealthy=False` at once
(through `nodes/status`, as the labeller writes it); each repair Job's stub pod runs RESET_S
seconds and "clears" the GPU by setting the condition True (what the labeller would see after a
good reset). Measured per node: the fault write to the moment our taint is gone, less RESET_S
(the simulated reset), i.e. what the operator's steps cost (taint, drain, Job start, reading the
Job's report, validation, untaint); and operator writes and node PATCHes per remediation.
"""

from __future__ import annotations

import statistics
import threading
import time
from datetime import UTC, datetime
from typing import Any

from gpuop_common.kubejson import STRATEGIC_MERGE_PATCH
from gpuop_operator.jobresult import PlaybookSummary
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES, KubeRest
from gpuop_sim.workloads.objects import Obj
from gpuop_sim.workloads.simkubelet.stub import StubOutcome

from bench.bench_operator import (
    DEVICECONFIGS,
    NAMESPACE,
    _free_port,
    _metric,
    _row,
    _wait,
    install_operands,
    start_operator,
)

SIZE = 20
RESET_S = 2.0  # a simulated GPU reset; excluded from the measured time
TAINT_KEY = "gpuop.dev/gpu-unhealthy"
STATE_LABEL = "gpuop.dev/remediation-state"
POLL_S = 0.05


def _stamp() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _set_health(rest: KubeRest, node: str, healthy: bool) -> None:
    condition = {
        "type": "GPUHealthy",
        "status": "True" if healthy else "False",
        "reason": "AsExpected" if healthy else "RasUncorrectable",
        "message": "all GPUs healthy" if healthy else "unhealthy GPUs: 0000:c1:00.0",
        "lastTransitionTime": _stamp(),
        "lastHeartbeatTime": _stamp(),
    }
    body = {"status": {"conditions": [condition]}}
    rest.patch(NODES, node, body, sub="status", content_type=STRATEGIC_MERGE_PATCH)


class _Outcomes:
    def __init__(self) -> None:
        self.rest: KubeRest | None = None

    def __call__(self, pod: Obj) -> StubOutcome | None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get("gpuop.dev/operation") != "gpu-reset":
            return None
        node = str((pod.get("spec") or {}).get("nodeName", ""))
        assert self.rest is not None
        threading.Timer(RESET_S, _set_health, args=(self.rest, node, True)).start()
        now = datetime.now(UTC)
        summary = PlaybookSummary(
            playbook="gpu-reset",
            status="successful",
            rc=0,
            facts={"reboot_required": "false"},
            started_at=now,
            finished_at=now,
        )
        return StubOutcome(duration_s=RESET_S, termination_message=summary.to_termination_message())


def _tainted(node: Obj) -> bool:
    return any(t.get("key") == TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])


def measure() -> dict[str, Any]:
    outcomes = _Outcomes()
    with SimCluster(amd_nodes=SIZE, pods="stub", stub_outcome=outcomes) as cluster:
        rest, server = cluster.api(), cluster.server
        assert server is not None
        outcomes.rest = rest
        install_operands(rest)
        for node in cluster.nodes:
            rest.patch(NODES, node.name, {"status": {"allocatable": {"amd.com/gpu": "8"}}}, sub="status")
        port = _free_port()
        operator = start_operator(
            cluster.kubeconfig, port, "--driver-job-image", "gpuop/gpuop-operator:bench"
        )
        try:
            spec = {
                "remediation": {
                    "enable": True,
                    "conditionHoldSeconds": 0,
                    "maxParallel": 0,
                    "validateAfter": False,
                }
            }
            body = {"apiVersion": "gpuop.dev/v1alpha1", "kind": "DeviceConfig", "metadata": {"name": "gpus"}}
            rest.create(DEVICECONFIGS, {**body, "spec": spec}, NAMESPACE)
            _wait(
                lambda: (
                    (rest.get(DEVICECONFIGS, "gpus", NAMESPACE).get("status") or {}).get("readyNodes") == SIZE
                ),
                120,
                "nodes ready",
            )
            writes_before = _metric(port, "gpuop_operator_api_writes_total")
            before = server.stats()
            faulted: dict[str, float] = {}
            for node in cluster.nodes:
                _set_health(rest, node.name, False)
                faulted[node.name] = time.monotonic()
            seen_tainted: set[str] = set()
            untainted: dict[str, float] = {}
            deadline = time.monotonic() + 300
            while len(untainted) < SIZE and time.monotonic() < deadline:
                nodes, _ = rest.list(NODES)
                now = time.monotonic()
                for item in nodes:
                    name = item["metadata"]["name"]
                    if _tainted(item):
                        seen_tainted.add(name)
                    elif (
                        name in seen_tainted
                        and name not in untainted
                        and (item["metadata"].get("labels") or {}).get(STATE_LABEL) == "recovered"
                    ):
                        untainted[name] = now
                time.sleep(POLL_S)
            if len(untainted) < SIZE:
                raise TimeoutError(f"only {len(untainted)}/{SIZE} nodes untainted after 300 s")
            # The status write that follows the last step, so the per-remediation count is whole.
            _wait(
                lambda: (
                    (rest.get(DEVICECONFIGS, "gpus", NAMESPACE).get("status") or {})
                    .get("remediation", {})
                    .get("states")
                    == {"recovered": SIZE}
                ),
                30,
                "status.remediation recovered",
            )
            after = server.stats()
            writes = _metric(port, "gpuop_operator_api_writes_total") - writes_before
        finally:
            operator.terminate()
            operator.wait(timeout=30)
    patches = after.get(("patch", "nodes"), 0) - before.get(("patch", "nodes"), 0)
    spans = sorted(untainted[n] - faulted[n] - RESET_S for n in untainted)
    return {
        "median": statistics.median(spans),
        "max": spans[-1],
        "writes": writes / SIZE,
        # The fault and the simulated labeller's clear are two status PATCHes per node, not ours.
        "patches": patches / SIZE,
    }


def run() -> list[dict[str, Any]]:
    r = measure()
    note = f"{SIZE} nodes faulted at once, maxParallel 0; {RESET_S:.0f} s simulated reset excluded"
    return [
        _row("fault -> untainted, median", r["median"], "s", "", note),
        _row("fault -> untainted, slowest node", r["max"], "s", "", note + f"; {POLL_S}s polling"),
        _row("operator writes per remediation", r["writes"], "req", "",
             "gpuop_operator_api_writes_total: node patches, Jobs, Events excluded, status"),
        _row("node PATCHes per remediation", r["patches"], "req", "",
             "API server count, incl. 2 condition writes by the simulated labeller"),
    ]  # fmt: skip


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<45} {row['value']:>10.3g} {row['unit']}")

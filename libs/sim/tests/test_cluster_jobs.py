"""Jobs the way the operator's driver Jobs use them, on stub nodes with simulated pod outcomes.

The outcome hook decides per pod how long it runs and how it ends; everything else (deadline, backoff
limit, TTL, garbage collection of the pods) is the simulated controller-manager's batch/v1 semantics.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import JOBS, PODS, KubeRest, is_status
from gpuop_sim.workloads.simkubelet.stub import StubOutcome

NS = "default"


def outcome_from_labels(pod: dict[str, Any]) -> StubOutcome | None:
    """Tests pick a pod's fate through its labels: `sim/run-s`, `sim/exit`, `sim/message`."""
    labels = pod["metadata"].get("labels") or {}
    if "sim/run-s" not in labels:
        return None
    message = (pod["metadata"].get("annotations") or {}).get("sim/message", "")
    return StubOutcome(float(labels["sim/run-s"]), int(labels.get("sim/exit", "0")), message)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with SimCluster(amd_nodes=1, nvidia_nodes=1, pods="stub", stub_outcome=outcome_from_labels) as sim:
        yield sim


def driver_job(name: str, run_s: float, exit_code: int = 0, message: str = "", **spec: Any) -> dict[str, Any]:
    labels = {"sim/run-s": str(run_s), "sim/exit": str(exit_code)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "backoffLimit": 0,
            **spec,
            "template": {
                "metadata": {"labels": labels, "annotations": {"sim/message": message}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": "amd-0",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "driver", "image": "ghcr.io/gpuop/gpuop-operator:0.1.0"}],
                },
            },
        },
    }


def condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind and cond["status"] == "True":
            return dict(cond)
    return None


def job_pods(api: KubeRest, name: str) -> list[dict[str, Any]]:
    items, _ = api.list(PODS, NS, labelSelector=f"batch.kubernetes.io/job-name={name}")
    return list(items)


def test_pod_outcome_reaches_the_job_and_the_termination_message(cluster: SimCluster) -> None:
    api = cluster.api()
    api.create(JOBS, driver_job("install-ok", 0.5, 0, '{"failed": []}'), NS)
    pod = cluster.wait_for(lambda: next(iter(job_pods(api, "install-ok")), None), 10)
    running = cluster.wait_for_object(
        PODS, pod["metadata"]["name"], NS, lambda p: p["status"].get("phase") == "Running"
    )
    assert "running" in running["status"]["containerStatuses"][0]["state"]
    done = cluster.wait_for_object(JOBS, "install-ok", NS, lambda j: condition(j, "Complete"), timeout=20)
    assert done["status"]["succeeded"] == 1 and done["status"]["active"] == 0
    (finished,) = job_pods(api, "install-ok")
    assert finished["status"]["phase"] == "Succeeded"
    terminated = finished["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        0,
        "Completed",
        '{"failed": []}',
    )


def test_backoff_limit_zero_fails_the_job_with_the_pods_message(cluster: SimCluster) -> None:
    api = cluster.api()
    api.create(JOBS, driver_job("install-bad", 0.2, 2, "dkms build failed"), NS)
    failed = cluster.wait_for_object(JOBS, "install-bad", NS, lambda j: condition(j, "Failed"), timeout=20)
    assert condition(failed, "Failed")["reason"] == "BackoffLimitExceeded"  # type: ignore[index]
    assert condition(failed, "FailureTarget") is not None
    assert failed["status"]["failed"] == 1
    pods = job_pods(api, "install-bad")
    assert len(pods) == 1  # no retry with backoffLimit 0
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        2,
        "Error",
        "dkms build failed",
    )


def test_active_deadline_fails_the_job_and_deletes_its_running_pod(cluster: SimCluster) -> None:
    api = cluster.api()
    started = time.monotonic()
    api.create(JOBS, driver_job("install-slow", 600, activeDeadlineSeconds=2), NS)
    cluster.wait_for(lambda: job_pods(api, "install-slow"), 10)
    failed = cluster.wait_for_object(JOBS, "install-slow", NS, lambda j: condition(j, "Failed"), timeout=20)
    elapsed = time.monotonic() - started
    assert condition(failed, "Failed")["reason"] == "DeadlineExceeded"  # type: ignore[index]
    assert elapsed >= 1.0  # not before its deadline (timestamps have one-second resolution)
    assert elapsed < 8  # at the deadline, not at the next resync
    assert failed["status"]["failed"] == 1 and failed["status"]["active"] == 0
    assert job_pods(api, "install-slow") == []  # the running pod was deleted before Failed


def test_ttl_after_finished_deletes_the_job_and_its_pods(cluster: SimCluster) -> None:
    api = cluster.api()
    api.create(JOBS, driver_job("install-ttl", 0.1, ttlSecondsAfterFinished=2), NS)
    done = cluster.wait_for_object(JOBS, "install-ttl", NS, lambda j: condition(j, "Complete"), timeout=20)
    assert job_pods(api, "install-ttl")  # kept until the TTL passes
    finished_at = time.monotonic()

    def gone() -> bool:
        try:
            api.get(JOBS, "install-ttl", NS)
        except Exception as error:
            if is_status(error, 404):
                return True
            raise
        return False

    cluster.wait_for(gone, 20, what="the TTL controller to delete the Job")
    assert time.monotonic() - finished_at >= 0.9
    assert done["status"]["succeeded"] == 1
    cluster.wait_for(lambda: not job_pods(api, "install-ttl"), 20, what="its pods to be collected")


def test_hook_answering_none_keeps_the_default_and_outcomes_can_change(cluster: SimCluster) -> None:
    api = cluster.api()
    body = driver_job("plain", 0)
    del body["spec"]["template"]["metadata"]["labels"]["sim/run-s"]
    api.create(JOBS, body, NS)
    cluster.wait_for_object(JOBS, "plain", NS, lambda j: condition(j, "Complete"), timeout=20)
    cluster.set_stub_outcome(lambda _pod: StubOutcome(0.1, 7, "always fails"))
    try:
        api.create(JOBS, driver_job("changed", 0.1, 0), NS)
        failed = cluster.wait_for_object(JOBS, "changed", NS, lambda j: condition(j, "Failed"), timeout=20)
        assert failed["status"]["failed"] == 1
    finally:
        cluster.set_stub_outcome(outcome_from_labels)


def test_stub_outcome_needs_stub_pods() -> None:
    with pytest.raises(ValueError, match="stub_outcome needs pods='stub'"):
        SimCluster(pods="process", stub_outcome=outcome_from_labels)


def test_restarting_stub_pod_goes_through_crash_loop_back_off(cluster: SimCluster) -> None:
    api = cluster.api()
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "crasher", "namespace": NS, "labels": {"sim/run-s": "0.1", "sim/exit": "1"}},
        "spec": {"nodeName": "nvidia-0", "containers": [{"name": "c", "image": "test/crash:1"}]},
    }
    api.create(PODS, body, NS)
    seen: set[str] = set()

    def restarted_twice(pod: dict[str, Any]) -> bool:
        status = pod["status"]["containerStatuses"][0]
        seen.update(status["state"])
        if "waiting" in status["state"]:
            seen.add(status["state"]["waiting"]["reason"])
        return bool(status["restartCount"] >= 2)

    started = time.monotonic()
    pod = cluster.wait_for_object(PODS, "crasher", NS, restarted_twice, timeout=20)
    # two runs of 0.1 s with the first back-off (0.5 s) between them: the count goes up at each exit
    assert time.monotonic() - started >= 0.5 + 0.2
    assert "CrashLoopBackOff" in seen
    last = pod["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (1, "Error")
    assert pod["status"]["phase"] == "Running"
    api.delete(PODS, "crasher", NS)


def test_job_pods_keep_host_namespaces_and_get_the_servers_defaults(cluster: SimCluster) -> None:
    # Operator tests check these fields on every Job the operator makes, so they must survive.
    api = cluster.api()
    job = driver_job("host-namespaces", 0.2)
    template_spec = job["spec"]["template"]["spec"]
    template_spec.update(hostNetwork=True, hostPID=True)
    template_spec["containers"][0]["ports"] = [{"containerPort": 9100}]
    stored = api.create(JOBS, job, NS)
    pod = cluster.wait_for(lambda: next(iter(job_pods(api, "host-namespaces")), None), 10)
    for spec in (stored["spec"]["template"]["spec"], pod["spec"]):
        assert spec["hostNetwork"] is True and spec["hostPID"] is True
        assert spec["dnsPolicy"] == "ClusterFirst"
        assert spec["containers"][0]["ports"] == [
            {"containerPort": 9100, "hostPort": 9100, "protocol": "TCP"}
        ]

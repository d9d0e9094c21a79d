"""Controller planners as pure functions: what a DaemonSet/Deployment/ReplicaSet/Job controller does next."""

from __future__ import annotations

from typing import Any

from gpuop_sim.workloads.daemonset import build_daemon_pod, plan_daemonset
from gpuop_sim.workloads.deployment import plan_deployment, plan_replicaset
from gpuop_sim.workloads.job import build_job_pod, plan_job
from gpuop_sim.workloads.objects import REVISION_HASH_LABEL, template_hash
from gpuop_sim.workloads.scheduler import plan_bindings

NOW = "2026-01-01T00:00:00Z"


def node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec, "status": {}}


def daemonset(
    node_selector: dict[str, str] | None = None, image: str = "img:1", **strategy: Any
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "c", "image": image}]}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    spec: dict[str, Any] = {"template": {"metadata": {"labels": {"app": "x"}}, "spec": pod_spec}}
    if strategy:
        spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": strategy}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "ds", "namespace": "ns", "uid": "ds-uid", "generation": 2},
        "spec": spec,
    }


def running(pod: dict[str, Any], ready: bool = True) -> dict[str, Any]:
    pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return pod


def test_daemonset_creates_one_pod_per_matching_node_only() -> None:
    ds = daemonset({"gpu": "yes"})
    nodes = [node("a", {"gpu": "yes"}), node("b"), node("c", {"gpu": "yes"})]
    plan = plan_daemonset(ds, nodes, [])
    assert plan.create_on == ["a", "c"]
    assert plan.status["desiredNumberScheduled"] == 2
    assert plan.status["currentNumberScheduled"] == 0
    assert plan.status["observedGeneration"] == 2


def test_daemon_pod_is_bound_owned_and_labelled_with_the_template_hash() -> None:
    ds = daemonset()
    pod = build_daemon_pod(ds, "a")
    assert pod["spec"]["nodeName"] == "a"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "ds-uid"
    assert pod["metadata"]["ownerReferences"][0]["controller"] is True
    assert pod["metadata"]["labels"][REVISION_HASH_LABEL] == template_hash(ds["spec"]["template"])
    assert pod["metadata"]["labels"]["app"] == "x"
    assert build_daemon_pod(ds, "a")["metadata"]["name"] == pod["metadata"]["name"]


def test_daemonset_deletes_pods_on_nodes_that_stop_matching_and_counts_status() -> None:
    ds = daemonset({"gpu": "yes"})
    pods = [running(build_daemon_pod(ds, "a")), running(build_daemon_pod(ds, "b"), ready=False)]
    plan = plan_daemonset(ds, [node("a", {"gpu": "yes"}), node("b")], pods)
    assert [p["spec"]["nodeName"] for p in plan.delete] == ["b"]
    assert plan.create_on == []
    assert plan.status == {
        "observedGeneration": 2,
        "desiredNumberScheduled": 1,
        "currentNumberScheduled": 1,
        "numberMisscheduled": 1,
        "numberReady": 1,
        "updatedNumberScheduled": 1,
        "numberAvailable": 1,
        "numberUnavailable": 0,
    }


def test_daemonset_keeps_pods_on_noschedule_tainted_nodes_but_evicts_on_noexecute() -> None:
    ds = daemonset()
    taint_ns = [{"key": "t", "effect": "NoSchedule"}]
    taint_ne = [{"key": "t", "effect": "NoExecute"}]
    pods = [running(build_daemon_pod(ds, "a")), running(build_daemon_pod(ds, "b"))]
    plan = plan_daemonset(
        ds, [node("a", taints=taint_ns), node("b", taints=taint_ne), node("c", taints=taint_ns)], pods
    )
    assert [p["spec"]["nodeName"] for p in plan.delete] == ["b"]
    assert plan.create_on == []  # c is tainted NoSchedule: no new pod


def test_daemonset_rolls_a_new_template_within_max_unavailable() -> None:
    old = daemonset(image="img:1")
    nodes = [node(n) for n in "abcd"]
    pods = [running(build_daemon_pod(old, n)) for n in "abcd"]
    new = daemonset(image="img:2", maxUnavailable=2)
    plan = plan_daemonset(new, nodes, pods)
    assert len(plan.delete) == 2
    assert plan.status["updatedNumberScheduled"] == 0
    # One old pod not ready: it goes for free, plus one more within the budget of two.
    pods[0]["status"]["conditions"][0]["status"] = "False"
    plan = plan_daemonset(new, nodes, pods)
    assert len(plan.delete) == 2
    assert pods[0] in plan.delete


def test_daemonset_waits_for_a_terminating_pod_before_replacing_it() -> None:
    ds = daemonset()
    pod = running(build_daemon_pod(ds, "a"))
    pod["metadata"]["deletionTimestamp"] = NOW
    plan = plan_daemonset(ds, [node("a")], [pod])
    assert plan.create_on == []
    assert plan.delete == []


def test_daemonset_ondelete_strategy_never_deletes_outdated_pods() -> None:
    old = daemonset(image="img:1")
    new = daemonset(image="img:2")
    new["spec"]["updateStrategy"] = {"type": "OnDelete"}
    plan = plan_daemonset(new, [node("a")], [running(build_daemon_pod(old, "a"))])
    assert plan.delete == []


def test_daemonset_replaces_failed_pods() -> None:
    ds = daemonset()
    pod = running(build_daemon_pod(ds, "a"))
    pod["status"]["phase"] = "Failed"
    plan = plan_daemonset(ds, [node("a")], [pod])
    assert plan.delete == [pod]
    assert plan.create_on == ["a"]


def deployment(replicas: int, image: str = "img:1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "uid": "dep-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"image": image}]}},
        },
    }


def test_deployment_creates_a_replicaset_then_scales_old_ones_down() -> None:
    plan = plan_deployment(deployment(3), [])
    assert len(plan.create) == 1
    rs = plan.create[0]
    assert rs["spec"]["replicas"] == 3
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "dep-uid"
    assert rs["spec"]["selector"]["matchLabels"]["pod-template-hash"]
    rs["metadata"]["uid"] = "rs1"
    rs["status"] = {"replicas": 3, "readyReplicas": 3}
    assert plan_deployment(deployment(3), [rs]).create == []
    assert plan_deployment(deployment(3), [rs]).status["readyReplicas"] == 3
    rolled = plan_deployment(deployment(3, image="img:2"), [rs])
    assert len(rolled.create) == 1
    assert rolled.scale == [(rs, 0)]


def test_replicaset_creates_missing_and_deletes_surplus_pods() -> None:
    rs = {
        "metadata": {"name": "web-1", "namespace": "ns", "uid": "rs1"},
        "spec": {"replicas": 2, "template": {}},
    }
    assert plan_replicaset(rs, []).create == 2
    owned = [
        {"metadata": {"name": f"p{i}", "ownerReferences": [{"uid": "rs1", "controller": True}]}, "spec": {}}
        for i in range(3)
    ]
    owned[2]["spec"]["nodeName"] = "a"
    plan = plan_replicaset(rs, owned)
    assert plan.create == 0
    assert len(plan.delete) == 1
    assert plan.delete[0]["spec"].get("nodeName") is None  # unscheduled pods go first


def job(completions: int = 2, backoff_limit: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
        "spec": {"completions": completions, "parallelism": 1, "backoffLimit": backoff_limit, "template": {}},
    }


def job_pod(phase: str) -> dict[str, Any]:
    pod = build_job_pod(job())
    pod["status"] = {"phase": phase}
    return pod


def test_job_runs_pods_until_completions_then_reports_complete() -> None:
    assert plan_job(job(), [], NOW).create == 1
    assert plan_job(job(), [job_pod("Running")], NOW).create == 0
    plan = plan_job(job(), [job_pod("Succeeded")], NOW)
    assert plan.create == 1
    assert plan.status["succeeded"] == 1
    done = plan_job(job(), [job_pod("Succeeded"), job_pod("Succeeded")], NOW)
    assert done.create == 0
    assert done.status["conditions"][-1]["type"] == "Complete"
    assert done.status["completionTime"] == NOW


def test_job_fails_after_backoff_limit() -> None:
    plan = plan_job(job(backoff_limit=1), [job_pod("Failed"), job_pod("Failed")], NOW)
    assert plan.create == 0
    assert plan.status["failed"] == 2
    assert plan.status["conditions"][-1]["reason"] == "BackoffLimitExceeded"


def deadline_job(**spec: Any) -> dict[str, Any]:
    body = job(completions=1, backoff_limit=0)
    body["spec"].update(spec)
    body["status"] = {"startTime": "2026-01-01T00:00:00Z"}
    return body


def conditions(plan: Any) -> list[tuple[str, str]]:
    return [(c["type"], c["reason"]) for c in plan.status["conditions"]]


def test_backoff_limit_zero_fails_the_job_on_the_first_failed_pod() -> None:
    body = deadline_job()
    plan = plan_job(body, [job_pod("Failed")], "2026-01-01T00:00:05Z")
    assert plan.create == 0
    assert conditions(plan) == [("FailureTarget", "BackoffLimitExceeded"), ("Failed", "BackoffLimitExceeded")]
    assert plan.status["failed"] == 1


def test_active_deadline_fails_the_job_after_its_pods_are_gone() -> None:
    body = deadline_job(activeDeadlineSeconds=30)
    running = job_pod("Running")
    early = plan_job(body, [running], "2026-01-01T00:00:10Z")
    assert early.delete == [] and early.status["conditions"] == []
    assert early.requeue_after == 20  # looks again exactly at the deadline

    due = plan_job(body, [running], "2026-01-01T00:00:30Z")
    assert due.delete == [running]
    assert conditions(due) == [("FailureTarget", "DeadlineExceeded")]  # Failed only once pods are gone
    assert due.status["failed"] == 1 and due.status["terminating"] == 1 and due.status["active"] == 0

    body["status"] = dict(due.status)
    terminating = job_pod("Running")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    waiting = plan_job(body, [terminating], "2026-01-01T00:00:31Z")
    assert [c for c, _ in conditions(waiting)] == ["FailureTarget"] and waiting.create == 0
    gone = plan_job(body, [], "2026-01-01T00:00:32Z")
    assert conditions(gone)[-1] == ("Failed", "DeadlineExceeded")
    assert gone.status["failed"] == 1  # the deleted pod stays counted
    assert "completionTime" not in gone.status


def test_job_completes_through_success_criteria_met() -> None:
    plan = plan_job(deadline_job(), [job_pod("Succeeded")], "2026-01-01T00:00:03Z")
    assert conditions(plan) == [
        ("SuccessCriteriaMet", "CompletionsReached"),
        ("Complete", "CompletionsReached"),
    ]
    assert plan.status["completionTime"] == "2026-01-01T00:00:03Z"


def test_ttl_after_finished_deletes_the_job_that_long_after_it_finished() -> None:
    body = deadline_job(ttlSecondsAfterFinished=60)
    body["status"] = plan_job(body, [job_pod("Succeeded")], "2026-01-01T00:01:00Z").status
    waiting = plan_job(body, [job_pod("Succeeded")], "2026-01-01T00:01:45Z")
    assert not waiting.delete_job and waiting.requeue_after == 15
    assert plan_job(body, [job_pod("Succeeded")], "2026-01-01T00:02:00Z").delete_job
    no_ttl = deadline_job()
    no_ttl["status"] = body["status"]
    assert not plan_job(no_ttl, [], "2030-01-01T00:00:00Z").delete_job


def test_job_pod_restart_policy_defaults_to_never_and_has_job_labels() -> None:
    pod = build_job_pod(job())
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "j"


def test_scheduler_spreads_pods_and_reports_why_a_pod_cannot_be_placed() -> None:
    nodes = [node("a"), node("b"), node("cordoned", unschedulable=True)]
    pending = [{"metadata": {"name": f"p{i}", "creationTimestamp": f"{i}"}, "spec": {}} for i in range(4)]
    decisions = plan_bindings(pending, nodes, [])
    assert sorted(d.node or "" for d in decisions) == ["a", "a", "b", "b"]
    stuck = {"metadata": {"name": "q"}, "spec": {"nodeSelector": {"gpu": "yes"}}}
    (decision,) = plan_bindings([stuck], nodes, [])
    assert decision.node is None
    assert decision.reason.startswith("0/3 nodes are available")
    assert "cordoned" in decision.reason

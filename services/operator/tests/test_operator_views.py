"""Views of cached objects: made once per object the cache holds, remade when it is replaced."""

from __future__ import annotations

from typing import Any

from gpuop_common.kubeobj import PullFailure
from gpuop_operator import views
from gpuop_operator.remediation import marked_by_remediation
from gpuop_operator.views import ViewMemo, node_info, trim_node


def node(name: str, version: str, **labels: str) -> dict[str, Any]:
    return trim_node({"metadata": {"name": name, "resourceVersion": version, "labels": labels}, "status": {}})


def test_a_view_is_made_once_per_object_and_again_when_the_cache_replaces_it() -> None:
    made: list[str] = []

    def make(obj: dict[str, Any]) -> str:
        made.append(obj["metadata"]["name"])
        return f"{obj['metadata']['name']}@{obj['metadata']['resourceVersion']}"

    views = ViewMemo(make)
    a, b = node("a", "1"), node("b", "1")
    assert views([a, b]) == ["a@1", "b@1"]
    assert views([a, b]) == ["a@1", "b@1"] and made == ["a", "b"]  # nothing changed: nothing made
    a2 = node("a", "2")  # the watch cache stores a new object on a change
    assert views([a2, b]) == ["a@2", "b@1"] and made == ["a", "b", "a"]
    assert views([b]) == ["b@1"]  # a left the cache
    assert views([a2, b]) == ["a@2", "b@1"] and made == ["a", "b", "a", "a"]  # forgotten, so made again


def test_equal_but_distinct_objects_get_their_own_view() -> None:
    views = ViewMemo(node_info)
    first = node("a", "1", gpu="true")
    again = node("a", "1", gpu="true")  # e.g. a relist: equal content, a new object
    [one] = views([first])
    [two] = views([again])
    assert one == two and one is not two


def test_only_nodes_a_remediation_run_marked_are_released() -> None:
    assert not marked_by_remediation(node_info(node("a", "1", gpu="true")))
    assert marked_by_remediation(node_info(node("b", "1", **{"gpuop.dev/remediation-state": "failed"})))


def test_a_job_pod_that_cannot_pull_keeps_its_job_and_the_kubelets_reason_when_trimmed() -> None:
    """A kubelet keeps such a pod Pending (never Failed): the trimmed pod is all the operator sees."""
    image = "registry.invalid/gpuop/driver:6.2"
    waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
    pod = {
        "metadata": {"name": "gpuop-driver-n0-x1", "labels": {"job-name": "gpuop-driver-n0"}},
        "spec": {"nodeName": "n0"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{"name": "playbook", "image": image, "state": {"waiting": waiting}}],
        },
    }
    started = {**pod, "metadata": {"name": "other", "labels": {"job-name": "gpuop-reset-n0"}}, "status": {}}
    failures = views.job_pull_failures([views.trim_pod(pod), views.trim_pod(started)])
    assert failures == {"gpuop-driver-n0": PullFailure("playbook", image, *waiting.values())}
    operand = {"metadata": {"name": "dp", "labels": {}}, "spec": {"nodeName": "n0"}, "status": pod["status"]}
    assert "pullFailure" not in views.trim_pod(operand)["status"]  # operands: the doctor's business

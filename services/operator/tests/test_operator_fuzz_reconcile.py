"""Random DeviceConfig objects straight into the reconciler (as if the apiserver's schema had been
bypassed): a pass never raises, and every DeviceConfig gets a status with the three conditions."""

from __future__ import annotations

import copy
from typing import Any

from gpuop_operator.kubeio import KubeJson, Resource
from gpuop_operator.model import AMD_PRESENT, NVIDIA_PRESENT
from gpuop_operator.reconciler import Reconciler, ReconcilerSettings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client


class RecordingKube(KubeJson):
    """Applies merge and JSON patches to in-memory objects instead of calling an API server."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        super().__init__(client.ApiClient())
        self.objects = objects
        self.writes: list[tuple[str, str, Any]] = []

    def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        sub: str | None = None,
        content_type: str = "",
    ) -> dict[str, Any]:
        key = f"{namespace}/{name}" if namespace and resource.namespaced else name
        self.writes.append((resource.plural, key, body))
        obj = copy.deepcopy(
            self.objects.setdefault(key, {"metadata": {"name": name, "namespace": namespace}})
        )
        if isinstance(body, list):
            for op in body:
                obj[op["path"].strip("/")] = op["value"]
        else:
            for field, value in body.items():
                if isinstance(value, dict) and isinstance(obj.get(field), dict):
                    obj[field] = {**obj[field], **value}
                else:
                    obj[field] = value
        self.objects[key] = obj
        return obj


_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_sections = st.sampled_from(
    ["selector", "vendor", "driver", "devicePlugin", "nodeLabeller", "metricsExporter", "testRunner", "x"]
)
_specs = st.one_of(_values, st.dictionaries(_sections, _values, max_size=4))

NODES = [
    {"metadata": {"name": "amd-0", "resourceVersion": "1", "labels": {AMD_PRESENT: "true"}}},
    {"metadata": {"name": "nvidia-0", "resourceVersion": "2", "labels": {NVIDIA_PRESENT: "true"}}},
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(_specs, min_size=1, max_size=3))
def test_random_deviceconfigs_never_crash_a_pass_and_always_get_conditions(specs: list[Any]) -> None:
    objects: dict[str, dict[str, Any]] = {}
    kube = RecordingKube(objects)
    reconciler = Reconciler(kube, ReconcilerSettings(namespace="gpu-operator", release="gpuop", workers=1))
    try:
        for node in NODES:
            reconciler.nodes.update(copy.deepcopy(node))
        for index, spec in enumerate(specs):
            dc = {
                "apiVersion": "gpuop.dev/v1alpha1",
                "kind": "DeviceConfig",
                "metadata": {
                    "name": f"dc{index}",
                    "namespace": "ops",
                    "generation": 1,
                    "resourceVersion": str(10 + index),
                    "creationTimestamp": f"2026-01-0{index + 1}T00:00:00Z",
                },
                "spec": spec,
            }
            objects[f"ops/dc{index}"] = dc
            reconciler.deviceconfigs.update(copy.deepcopy(dc))
        reconciler.reconcile_once()
        for index in range(len(specs)):
            status = objects[f"ops/dc{index}"].get("status") or {}
            assert [c["type"] for c in status.get("conditions", [])] == ["Ready", "Progressing", "Degraded"]
            ready = status["conditions"][0]
            if ready["status"] == "False" and ready["reason"] not in ("RolloutInProgress",):
                assert ready["message"].startswith("spec"), ready
    finally:
        reconciler.stop()
        kube.api_client.close()

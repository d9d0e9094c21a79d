"""DeviceConfig validation: bad specs end in a condition naming the field; fuzzed specs never crash."""

from __future__ import annotations

from typing import Any

import pytest
from gpuop_common.config import LabelSelector
from gpuop_operator.model import AMD_PRESENT, NVIDIA_PRESENT, NodeInfo
from gpuop_operator.plan import plan_rollout
from gpuop_operator.status import build_status, invalid_conditions, rollout_conditions
from gpuop_operator.validation import (
    CONFLICT,
    INVALID_FOR_VENDOR,
    INVALID_SPEC,
    UNSUPPORTED,
    DeviceConfigRef,
    validate,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NODES = [
    NodeInfo("amd-0", {AMD_PRESENT: "true", "pool": "a"}),
    NodeInfo("nvidia-0", {NVIDIA_PRESENT: "true", "pool": "b"}),
]


def dc(spec: Any, name: str = "gpus", created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ops", "creationTimestamp": created}, "spec": spec}


def test_an_enabled_test_runner_section_is_accepted() -> None:
    spec = {"vendor": "amd", "selector": {"matchLabels": {"pool": "a"}}, "testRunner": {"enable": True}}
    result = validate(dc(spec), NODES)
    assert result.ok, result.problems
    recipes = [{"name": "quick", "framework": "RVS", "command": ["rvs", "-c", "/etc/quick.conf"]}]
    spec["testRunner"] = {"enable": True, "recipe": "quick", "recipes": recipes}
    result = validate(dc(spec), NODES)
    assert result.ok and result.spec is not None, result.problems
    assert result.spec.test_runner.recipes[0].command[0] == "rvs"


def test_an_enabled_config_manager_section_is_accepted() -> None:
    profile = {"name": "cpx", "amd": {"computePartition": "CPX", "memoryPartition": "NPS4"}}
    manager = {"enable": True, "profiles": [profile]}
    spec = {"vendor": "amd", "selector": {"matchLabels": {"pool": "a"}}, "configManager": manager}
    result = validate(dc(spec), NODES)
    assert result.ok and result.spec is not None, result.problems
    assert result.spec.config_manager.profiles[0].amd is not None


def test_the_dra_driver_instead_of_the_device_plugin_is_accepted_but_not_both() -> None:
    spec: dict[str, Any] = {"devicePlugin": {"enable": False}, "draDriver": {"enable": True}}
    result = validate(dc(spec), NODES)
    assert result.ok and result.spec is not None, result.problems
    assert result.spec.dra_driver.enable
    both = validate(dc({"draDriver": {"enable": True}}), NODES)  # devicePlugin is on by default
    assert [p.reason for p in both.problems] == [INVALID_SPEC]
    assert "the DRA driver and the device plugin cannot both be enabled" in both.summary()[1]


def _sharing(sharing: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**spec, "devicePlugin": {"sharing": sharing}}


SHARING = "spec.devicePlugin.sharing"
SHARING_CASES = [
    (_sharing({"timeSlicing": {"replicas": 1}}), INVALID_SPEC, f"{SHARING}.timeSlicing.replicas"),
    (
        _sharing({"timeSlicing": {"replicas": 2, "resources": [{"name": "example.com/gpu"}]}}),
        INVALID_SPEC,
        f"{SHARING}.timeSlicing.resources[0].name: 'example.com/gpu' is not a GPU resource",
    ),
    (
        _sharing({"timeSlicing": {"replicas": 2, "resources": [{"name": "nvidia.com/gpu.shared"}]}}),
        INVALID_SPEC,
        f"{SHARING}.timeSlicing.resources[0].name",
    ),
    (
        _sharing({"timeSlicing": {"models": [{"models": ["H100"], "replicas": 1}]}}),
        INVALID_SPEC,
        f"{SHARING}.timeSlicing.models[0].replicas",
    ),
    (
        _sharing({"timeSlicing": {"resources": [{"name": "amd.com/gpu"}]}}),
        INVALID_SPEC,
        f"{SHARING}.timeSlicing.resources[0].replicas: no replica count",
    ),
    (_sharing({"mps": {"replicas": 2}}, vendor="amd"), INVALID_SPEC, f"{SHARING}.mps"),
    (_sharing({"mps": {"replicas": 49}}), INVALID_SPEC, f"{SHARING}.mps.replicas"),
    (
        _sharing({"mps": {"replicas": 2}, "timeSlicing": {"replicas": 2}}),
        INVALID_SPEC,
        f"{SHARING}.mps: cannot be combined",
    ),
    (
        _sharing({"timeSlicing": {"resources": [{"name": "amd.com/gpu", "replicas": 2}]}}, vendor="nvidia"),
        INVALID_SPEC,
        f"{SHARING}.timeSlicing.resources",
    ),
    # vendor auto: MPS is checked against the GPUs the selected nodes have.
    (_sharing({"mps": {"replicas": 2}}), INVALID_FOR_VENDOR, f"{SHARING}.mps"),
    (
        {
            "devicePlugin": {"enable": False},
            "draDriver": {"enable": True, "sharing": {"mps": {"replicas": 2}}},
        },
        INVALID_SPEC,
        "spec.draDriver.sharing.mps: Extra inputs are not permitted",
    ),
]


def test_mps_is_refused_on_nodes_whose_gpus_all_have_mig_enabled_and_with_a_mig_strategy() -> None:
    mps = {"vendor": "nvidia", **_sharing({"mps": {"replicas": 4}})}
    whole = NodeInfo("h100", {NVIDIA_PRESENT: "true", "gpuop.dev/gpu.partition.compute": "none"})
    some_mig = NodeInfo("h100-some-mig", {NVIDIA_PRESENT: "true", "gpuop.dev/gpu.partition.compute": "mixed"})
    all_mig = NodeInfo("h100-mig", {NVIDIA_PRESENT: "true", "gpuop.dev/gpu.partition.compute": "mig"})
    assert validate(dc(mps), [whole, some_mig]).ok
    refused = validate(dc(mps), [whole, all_mig])
    assert [p.reason for p in refused.problems] == [INVALID_FOR_VENDOR]
    assert refused.summary()[1].startswith("spec.devicePlugin.sharing.mps: node h100-mig has MIG enabled")
    # Nothing to check when the plugin does not run here.
    assert validate(dc({**mps, "devicePlugin": {**mps["devicePlugin"], "enable": False}}), [all_mig]).ok
    mixed = validate(dc({**mps, "devicePlugin": {**mps["devicePlugin"], "migStrategy": "mixed"}}), [whole])
    assert [p.reason for p in mixed.problems] == [INVALID_SPEC]
    assert "spec.devicePlugin.sharing.mps: cannot be combined with migStrategy mixed" in mixed.summary()[1]


def test_sharing_configs_are_accepted_and_reach_the_labeller() -> None:
    per_model = {"replicas": 4, "models": [{"models": ["H100"], "replicas": 2}], "renameByDefault": True}
    for sharing in ({"timeSlicing": per_model}, {"mps": {"replicas": 4, "memoryLimitMiB": 8192}}):
        spec = _sharing(sharing, selector={"matchLabels": {"pool": "b"}})
        result = validate(dc(spec), NODES)
        assert result.ok and result.spec is not None, result.problems
        labeller = result.spec.section("node-labeller").to_wire()
        assert labeller["sharing"] == result.spec.device_plugin.sharing.to_wire()


@pytest.mark.parametrize(
    ("spec", "reason", "field"),
    [
        ({"vendr": "amd"}, INVALID_SPEC, "spec.vendr"),
        ({"vendor": "intel"}, INVALID_SPEC, "spec.vendor"),
        ({"metricsExporter": {"port": 70000}}, INVALID_SPEC, "spec.metricsExporter.port"),
        ({"driver": {"upgradePolicy": {"maxUnavailableNodes": "lots"}}}, INVALID_SPEC, "maxUnavailableNodes"),
        ({"devicePlugin": {"enable": "maybe"}}, INVALID_SPEC, "spec.devicePlugin.enable"),
        ({"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, INVALID_SPEC, "spec.selector"),
        ("not an object", INVALID_SPEC, "spec"),
        ({"driver": {"enable": True, "driverType": "vf-passthrough"}}, UNSUPPORTED, "spec.driver.driverType"),
        ({"vendor": "amd", "testRunner": {"framework": "DCGM"}}, INVALID_SPEC, "testRunner.framework"),
        (
            {
                "vendor": "nvidia",
                "testRunner": {"recipes": [{"name": "r", "vendor": "amd", "framework": "selfcheck"}]},
            },
            INVALID_SPEC,
            "testRunner.recipes[].vendor",
        ),
        (
            {"testRunner": {"recipes": [{"name": "r", "framework": "RVS"}]}},
            INVALID_SPEC,
            "spec.testRunner.recipes[0]",
        ),
        (
            {"vendor": "nvidia", "configManager": {"enable": True, "profiles": [{"name": "cpx", "amd": {}}]}},
            INVALID_SPEC,
            "configManager.profiles[].amd",
        ),
        (
            {"vendor": "amd", "devicePlugin": {"migStrategy": "single"}},
            INVALID_SPEC,
            "spec.devicePlugin.migStrategy",
        ),
        ({"devicePlugin": {"migStrategy": "single"}}, INVALID_FOR_VENDOR, "spec.devicePlugin.migStrategy"),
        ({"vendor": "nvidia"}, INVALID_FOR_VENDOR, "spec.vendor"),
        ({"testRunner": {"framework": "DCGM"}}, INVALID_FOR_VENDOR, "testRunner.framework"),
        ({"draDriver": {"enable": True}}, INVALID_SPEC, "spec.draDriver.enable"),
        (
            {"testRunner": {"toolsImage": {"amd": "Docker.io/ROCm/test runner:v1"}}},
            INVALID_SPEC,
            "spec.testRunner.toolsImage.amd",
        ),
        ({"testRunner": {"toolsImage": {"nvidia": 7}}}, INVALID_SPEC, "spec.testRunner.toolsImage.nvidia"),
        ({"testRunner": {"toolsImage": {"intel": "x"}}}, INVALID_SPEC, "spec.testRunner.toolsImage.intel"),
        *SHARING_CASES,
    ],
)
def test_bad_spec_gives_a_reason_and_names_the_field(spec: Any, reason: str, field: str) -> None:
    result = validate(dc(spec), NODES)
    assert not result.ok
    got_reason, message = result.summary()
    assert reason in {p.reason for p in result.problems}
    assert field in message
    assert got_reason == result.problems[0].reason


def test_auto_vendor_checks_each_vendor_of_the_selected_nodes() -> None:
    only_nvidia = {"selector": {"matchLabels": {"pool": "b"}}, "devicePlugin": {"migStrategy": "single"}}
    assert validate(dc(only_nvidia), NODES).ok
    assert not validate(dc({**only_nvidia, "selector": {}}), NODES).ok


def test_the_newer_of_two_overlapping_deviceconfigs_is_in_conflict() -> None:
    old = DeviceConfigRef("ops", "old", "2026-01-01T00:00:00Z")
    new_obj = dc({}, "new", "2026-02-01T00:00:00Z")
    new = DeviceConfigRef.of(new_obj)
    result = validate(new_obj, NODES, {old: LabelSelector(), new: LabelSelector()})
    assert [p.reason for p in result.problems] == [CONFLICT]
    assert "amd-0" in result.problems[0].message and "ops/old" in result.problems[0].message
    assert validate(dc({}, "old", old.created), NODES, {old: LabelSelector(), new: LabelSelector()}).ok
    disjoint = {old: LabelSelector.model_validate({"matchLabels": {"pool": "b"}})}
    assert validate(dc({"selector": {"matchLabels": {"pool": "a"}}}, "new", new.created), NODES, disjoint).ok


def test_invalid_status_keeps_previous_counts_and_names_the_field() -> None:
    previous = {"selectedNodes": 2, "readyNodes": 2, "conditions": [{"type": "Ready", "status": "True"}]}
    result = validate(dc({"vendor": "intel"}), NODES)
    status = build_status(3, invalid_conditions(result), None, previous, "2026-01-01T00:00:00Z")
    ready = status["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", INVALID_SPEC)
    assert ready["message"].startswith("spec.vendor")
    assert status["readyNodes"] == 2 and status["observedGeneration"] == 3


def test_status_is_stable_when_nothing_changed() -> None:
    plan = plan_rollout("ops/gpus", validate(dc({}), NODES).spec, NODES, [])
    first = build_status(1, rollout_conditions(plan, []), plan, None, "2026-01-01T00:00:00Z")
    again = build_status(1, rollout_conditions(plan, []), plan, first, "2026-01-01T00:05:00Z")
    assert first == again
    assert first["stages"] == {"operands-rolling": 2}


# Random specs: a mix of valid section values, wrong types and unknown keys at every level.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["amd", "nvidia", "auto", "25%", "-1", "single", "mixed", "In"]),
)
_keys = st.sampled_from(
    [
        "enable",
        "vendor",
        "port",
        "migStrategy",
        "upgradePolicy",
        "maxUnavailableNodes",
        "matchLabels",
        "matchExpressions",
        "key",
        "operator",
        "values",
        "image",
        "interval",
        "selector",
        "bogus",
        "driverType",
        "resourceNamingStrategy",
        "extraLabels",
        "profiles",
        "healthChecks",
    ]
)
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(_keys, children, max_size=4)),
    max_leaves=12,
)
_sections = st.sampled_from(
    [
        "selector",
        "vendor",
        "driver",
        "devicePlugin",
        "draDriver",
        "nodeLabeller",
        "metricsExporter",
        "testRunner",
        "configManager",
        "remediation",
        "unknownSection",
    ]
)
_specs = st.one_of(st.dictionaries(_sections, _json, max_size=5), _json)


@settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=_specs)
def test_fuzzed_specs_always_end_in_a_condition_and_never_crash(spec: Any) -> None:
    result = validate(dc(spec), NODES)
    if result.ok:
        plan = plan_rollout("ops/gpus", result.spec, NODES, [])
        conditions = rollout_conditions(plan, [])
    else:
        reason, message = result.summary()
        assert reason in {INVALID_SPEC, UNSUPPORTED, INVALID_FOR_VENDOR, CONFLICT}
        assert message.startswith("spec")
        conditions = invalid_conditions(result)
    status = build_status(1, conditions, None, None, "2026-01-01T00:00:00Z")
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Progressing", "Degraded"]

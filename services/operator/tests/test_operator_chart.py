"""charts/crds, charts/operator and the umbrella charts/gpu-operator, rendered with the real helm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.config import DeviceConfigSpec
from gpuop_common.settings import parse_settings
from gpuop_operator.main import OperatorSettings
from gpuop_sim import helm

ROOT = Path(__file__).resolve().parents[3]
CHARTS = ROOT / "charts"
UMBRELLA = CHARTS / "gpu-operator"
KUBE_VERSIONS = ("1.29.0", "1.35.0")
NOT_OPERANDS = {"gpuop-lib", "crds", "operator", "gpu-operator"}


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    for name in ("crds", "operator", "gpu-operator"):
        helm.dependency_build(CHARTS / name)


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m.get("kind") == kind]


def pod_specs(manifests: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (m["metadata"]["name"], m["spec"]["template"]["spec"])
        for m in manifests
        if m.get("kind") in ("DaemonSet", "Deployment", "Job")
    ]


@pytest.mark.slow
@pytest.mark.parametrize("chart", ["crds", "operator", "gpu-operator"])
def test_chart_lints_strict_and_every_object_validates(chart: str) -> None:
    result = helm.lint(CHARTS / chart)
    assert result.returncode == 0, result.stdout + result.stderr
    for version in KUBE_VERSIONS:
        manifests = helm.template(CHARTS / chart, kube_version=version)
        assert manifests
        assert helm.validate_manifests(manifests, version) == []


@pytest.mark.slow
def test_umbrella_depends_on_every_service_chart_with_a_condition() -> None:
    meta = yaml.safe_load((UMBRELLA / "Chart.yaml").read_text())
    deps = {d["name"]: d for d in meta["dependencies"]}
    services = {p.name for p in helm.charts_in(CHARTS)} - NOT_OPERANDS
    assert services <= set(deps), f"service charts missing from the umbrella: {services - set(deps)}"
    for name, dep in deps.items():
        assert dep["condition"] == f"{name}.enabled"
        assert dep["repository"] == f"file://../{name}"
    values = yaml.safe_load((UMBRELLA / "values.yaml").read_text())
    assert all(values[name]["operatorManaged"] is True for name in services)


@pytest.mark.slow
def test_umbrella_daemonsets_run_only_where_the_operator_labels() -> None:
    manifests = helm.template(UMBRELLA)
    daemonsets = by_kind(manifests, "DaemonSet")
    assert daemonsets
    for ds in daemonsets:
        service = ds["metadata"]["labels"]["app.kubernetes.io/name"]
        selector = ds["spec"]["template"]["spec"]["nodeSelector"]
        assert selector[f"gpuop.dev/deploy.{service}"] == "true"
        assert "affinity" not in ds["spec"]["template"]["spec"]


@pytest.mark.slow
def test_global_registry_and_pull_secrets_reach_every_pod() -> None:
    manifests = helm.template(
        UMBRELLA, values=["global.imageRegistry=registry.example:5000", "global.imagePullSecrets={regcred}"]
    )
    specs = pod_specs(manifests)
    assert {name for name, _ in specs} >= {"gpuop-operator", "gpuop-crds-crd-upgrade"}
    for name, spec in specs:
        for container in spec["containers"]:
            assert container["image"].startswith("registry.example:5000/gpuop/gpuop-"), name
        assert {"name": "regcred"} in spec.get("imagePullSecrets", []), name


@pytest.mark.slow
def test_disabling_a_service_drops_its_objects() -> None:
    manifests = helm.template(UMBRELLA, values=["node-labeller.enabled=false", "operator.enabled=false"])
    names = {m["metadata"]["name"] for m in manifests}
    assert "gpuop-node-labeller" not in names
    assert "gpuop-operator" not in names
    assert "gpuop-device-plugin" in names


@pytest.mark.slow
def test_default_deviceconfigs_are_valid_specs_per_vendor() -> None:
    manifests = helm.template(UMBRELLA)
    dcs = {m["metadata"]["name"]: m for m in by_kind(manifests, "DeviceConfig")}
    assert set(dcs) == {"amd", "nvidia"}
    for name, dc in dcs.items():
        spec = DeviceConfigSpec.model_validate(dc["spec"])
        assert spec.vendor == name
        assert dc["metadata"]["namespace"] == "gpu-operator"


@pytest.mark.slow
@pytest.mark.parametrize(
    "values",
    [
        ["deviceConfigs[0].name=amd", "deviceConfigs[0].spec.vendor=intel"],
        ["deviceConfigs[0].name=amd", "deviceConfigs[0].spec.devicePlugin.bogus=1"],
        ["global.registry=typo"],
    ],
)
def test_umbrella_schema_rejects_bad_values(values: list[str]) -> None:
    with pytest.raises(helm.ChartError):
        helm.template(UMBRELLA, values=values)


@pytest.mark.slow
@pytest.mark.parametrize("values", [["workers=0"], ["logLevel=loud"], ["image.repo=x"]])
def test_operator_schema_rejects_bad_values(values: list[str]) -> None:
    with pytest.raises(helm.ChartError):
        helm.template(CHARTS / "operator", values=values)


@pytest.mark.slow
def test_operator_deployment_args_parse_and_probe_port_8080() -> None:
    manifests = helm.template(CHARTS / "operator", values=["watchNamespace=gpus", "leaderElection=false"])
    (deployment,) = by_kind(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    settings = parse_settings(OperatorSettings, container["args"])
    assert settings.release == "gpuop"
    assert settings.watch_namespace == "gpus"
    assert settings.leader_elect is False
    assert settings.probe_port == 8080
    assert container["readinessProbe"]["httpGet"]["port"] == 8080
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    roles = {(m["kind"], m["metadata"]["name"]) for m in manifests}
    assert ("ClusterRole", "gpuop-operator") in roles and ("Role", "gpuop-operator") in roles
    (cluster_role,) = [
        r for r in by_kind(manifests, "ClusterRole") if r["metadata"]["name"] == "gpuop-operator"
    ]
    node_rule = next(r for r in cluster_role["rules"] if r["resources"] == ["nodes"])
    assert "delete" not in node_rule["verbs"] and "update" not in node_rule["verbs"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "values",
    [
        ["driverJobs.activeDeadlineSeconds=5"],
        ["driverJobs.playbookOverrides=Not_A_Name"],
        ["driverJobs.x=1"],
        ["driverJobs.priorityClassName=Not A Class"],
    ],
)
def test_driver_job_values_are_checked(values: list[str]) -> None:
    with pytest.raises(helm.ChartError):
        helm.template(CHARTS / "operator", values=values)


@pytest.mark.slow
def test_driver_jobs_get_the_operator_image_and_the_rbac_they_need() -> None:
    manifests = helm.template(
        CHARTS / "operator",
        values=[
            "driverJobs.playbookOverrides=my-playbooks",
            "driverJobs.hostExec=chroot /host",
            "image.tag=9.9",
        ],
    )
    (deployment,) = by_kind(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    settings = parse_settings(OperatorSettings, container["args"])
    assert settings.driver_job_image == container["image"] and container["image"].endswith(":9.9")
    assert settings.driver_playbook_overrides == "my-playbooks"
    assert settings.driver_job_host_exec == "chroot /host"
    assert settings.driver_job_deadline == 3600
    assert settings.driver_job_priority_class == "system-node-critical"
    (cluster_role,) = [
        r for r in by_kind(manifests, "ClusterRole") if r["metadata"]["name"] == "gpuop-operator"
    ]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in cluster_role["rules"]}
    assert rules[(("",), ("pods/eviction",))] == {"create"}
    assert "delete" in rules[(("",), ("pods",))]
    (role,) = [r for r in by_kind(manifests, "Role") if r["metadata"]["name"] == "gpuop-operator"]
    job_rule = next(r for r in role["rules"] if r["resources"] == ["jobs"])
    assert {"create", "delete", "watch"} <= set(job_rule["verbs"])


@pytest.mark.slow
def test_an_empty_priority_class_reaches_the_operator_as_none() -> None:
    """Where a ResourceQuota refuses system-node-critical outside kube-system (GKE), "" must reach the
    operator as "no class", not fall back to the default."""
    for chart, key in ((CHARTS / "operator", ""), (UMBRELLA, "operator.")):
        manifests = helm.template(chart, values=[f"{key}driverJobs.priorityClassName="])
        (deployment,) = [d for d in by_kind(manifests, "Deployment") if "operator" in d["metadata"]["name"]]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert parse_settings(OperatorSettings, container["args"]).driver_job_priority_class == "", chart


@pytest.mark.slow
def test_crd_hook_runs_the_operator_image_with_apply_crd_before_upgrades() -> None:
    manifests = helm.template(CHARTS / "crds")
    (job,) = by_kind(manifests, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "gpuop/gpuop-operator:0.1.0"
    assert job["spec"]["activeDeadlineSeconds"] == 240  # ends itself before helm's 5m timeout
    assert parse_settings(OperatorSettings, container["args"]).apply_crd is True
    assert not by_kind(helm.template(CHARTS / "crds", values=["upgradeJob.enabled=false"]), "Job")


@pytest.mark.slow
def test_uninstall_hook_runs_the_operator_image_with_uninstall_cleanup_before_deletes() -> None:
    manifests = helm.template(CHARTS / "operator", values=["uninstallCleanup.timeoutSeconds=45"])
    (job,) = by_kind(manifests, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    # An unpullable image leaves the pod Pending, never Failed: the Job's deadline ends the hook.
    assert job["spec"]["activeDeadlineSeconds"] == 45 + 60
    (container,) = job["spec"]["template"]["spec"]["containers"]
    settings = parse_settings(OperatorSettings, container["args"])
    assert settings.uninstall_cleanup is True and settings.cleanup_timeout == 45
    assert settings.leader_elect is False and settings.probe_port == 0
    (role,) = [
        r for r in by_kind(manifests, "ClusterRole") if r["metadata"]["name"] == "gpuop-operator-uninstall"
    ]
    assert role["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    verbs = {tuple(rule["resources"]): set(rule["verbs"]) for rule in role["rules"]}
    assert verbs == {
        ("deviceconfigs",): {"list", "delete", "patch"},
        ("nodes",): {"list", "patch"},
        ("pods",): {"list"},
    }
    assert not by_kind(helm.template(CHARTS / "operator", values=["uninstallCleanup.enabled=false"]), "Job")


@pytest.mark.slow
def test_every_agent_container_has_a_startup_probe_before_liveness() -> None:
    # A slow start on a busy node must not be a crash loop: startup gets 2 s x 30 before liveness.
    manifests = helm.template(UMBRELLA)
    workloads = [m for m in manifests if m.get("kind") in ("DaemonSet", "Deployment")]
    assert {m["metadata"]["name"] for m in workloads} >= {
        "gpuop-operator",
        "gpuop-device-plugin",
        "gpuop-node-labeller",
        "gpuop-metrics-exporter",
    }
    for workload in workloads:
        for container in workload["spec"]["template"]["spec"]["containers"]:
            where = f"{workload['metadata']['name']}/{container['name']}"
            startup = container.get("startupProbe")
            assert startup is not None, f"{where} has no startupProbe"
            assert startup["httpGet"] == container["livenessProbe"]["httpGet"], where
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 60, where


@pytest.mark.slow
def test_node_feature_rule_only_where_nfd_serves_its_api() -> None:
    assert by_kind(helm.template(CHARTS / "operator"), "NodeFeatureRule") == []
    nfd = ["nfd.k8s-sigs.io/v1alpha1/NodeFeatureRule"]
    (rule,) = by_kind(helm.template(CHARTS / "operator", api_versions=nfd), "NodeFeatureRule")
    labels = [next(iter(r["labels"])) for r in rule["spec"]["rules"]]
    assert labels == [
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    vendors = [r["matchFeatures"][0]["matchExpressions"]["vendor"]["value"] for r in rule["spec"]["rules"]]
    assert vendors == [["1002"], ["10de"]]
    off = helm.template(CHARTS / "operator", api_versions=nfd, values=["nodeFeatureRule.enabled=false"])
    assert by_kind(off, "NodeFeatureRule") == []

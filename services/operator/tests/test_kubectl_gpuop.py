"""`kubectl gpuop` on a stub-pod simulated cluster the real operator (in process) drives, with one
node per broken scenario. The breakage is made the way it happens (a driver Job whose playbook fails,
a crashing operand, a labeller condition, a cordon, a label naming no profile); the doctor must name
each with its code and evidence from the cluster, and the plugin goes through the real kubectl.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from gpuop_common import nodemeta
from gpuop_common.kubejson import STRATEGIC_MERGE_PATCH
from gpuop_kubectl import cli
from gpuop_operator.jobresult import PlaybookSummary, TaskFailure
from gpuop_operator.remediation import State as RemediationState
from gpuop_operator.upgrade import UpgradeState
from gpuop_sim.binaries import find_binary
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES, SECRETS
from gpuop_sim.workloads.objects import Obj, labels_of
from gpuop_sim.workloads.simkubelet.stub import StubOutcome

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
SERVICES = ("device-plugin", "node-labeller", "metrics-exporter", "config-manager")
SCENARIO = "doctor.test/dc"  # which DeviceConfig a node is for
SECRET_VALUE = "s3cr3t-token-do-not-ship"
DKMS_ERROR = "make: *** [amdgpu.ko] Error 2: implicit declaration of function 'drm_fb_helper'"


def failed_build() -> str:
    now = datetime.now(UTC)
    task = TaskFailure(task="Build the amdgpu DKMS module", command="dkms build", stderr_tail=DKMS_ERROR)
    summary = PlaybookSummary(
        playbook="driver-install", status="failed", rc=2, failed_tasks=[task], started_at=now, finished_at=now
    )
    return summary.to_termination_message()


def outcome(pod: Obj) -> StubOutcome | None:
    node = (pod.get("spec") or {}).get("nodeName")
    labels = labels_of(pod)
    if node == "amd-1" and labels.get("app.kubernetes.io/name") == "device-plugin":
        return StubOutcome(exit_code=1, termination_message="no GPU found: open /dev/kfd: permission denied")
    if node == "amd-6" and labels.get("gpuop.dev/operation") == "driver-install":
        return StubOutcome(exit_code=2, termination_message=failed_build())
    if node == "amd-3" and labels.get("gpuop.dev/operation") == "gpu-reset":
        return StubOutcome(duration_s=3600)  # the repair runs for the whole test
    return None


@pytest.fixture(scope="module")
def cluster(kit: Any) -> Iterator[SimCluster]:
    with SimCluster(amd_nodes=9, nvidia_nodes=0, cpu_nodes=0, pods="stub", stub_outcome=outcome) as sim:
        api = sim.api()
        kit.install_operands(api, SERVICES)
        roles = {f"amd-{i}": "main" for i in range(9)} | {"amd-6": "driver", "amd-7": "none"}
        for name, role in roles.items():
            api.patch(NODES, name, {"metadata": {"labels": {SCENARIO: role, nodemeta.GPU_COUNT_LABEL: "8"}}})
            gpus = "0" if name == "amd-2" else "8"  # amd-2: the plugin registered, no device
            api.patch(NODES, name, {"status": {"allocatable": {"amd.com/gpu": gpus}}}, sub="status")
        api.create(SECRETS, secret(), NAMESPACE)
        main = {
            "selector": {"matchLabels": {SCENARIO: "main"}},
            "remediation": {"enable": True, "conditionHoldSeconds": 1},
            "configManager": {
                "enable": True,
                "profiles": [{"name": "cpx-nps4", "amd": {"computePartition": "CPX"}}],
            },
        }
        driver = {
            "selector": {"matchLabels": {SCENARIO: "driver"}},
            "driver": {"enable": True, "version": "6.12"},
        }
        extra = {"selector": {"matchLabels": {"doctor.test/extra": "yes"}}}
        with kit.operator_running(sim):
            api.create(kit.deviceconfigs, kit.device_config("main", main), NAMESPACE)
            api.create(kit.deviceconfigs, kit.device_config("driver", driver), NAMESPACE)
            sim.wait_for(lambda: stage(sim, "amd-0") == "ready", timeout=90, what="amd-0 ready")
            api.create(kit.deviceconfigs, kit.device_config("zz-extra", extra), NAMESPACE)
            api.patch(NODES, "amd-8", {"metadata": {"labels": {"doctor.test/extra": "yes"}}})
            api.patch(NODES, "amd-5", {"spec": {"unschedulable": True}})  # kubectl cordon amd-5
            api.patch(NODES, "amd-4", {"metadata": {"labels": {nodemeta.CONFIG_PROFILE_LABEL: "cpx-nps9"}}})
            api.patch(
                NODES,
                "amd-3",
                {"status": {"conditions": [unhealthy()]}},
                sub="status",
                content_type=STRATEGIC_MERGE_PATCH,
            )
            yield sim


def secret() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "pull"},
        "stringData": {"token": SECRET_VALUE},
    }


def unhealthy() -> Obj:
    return {
        "type": nodemeta.GPU_HEALTHY_CONDITION,
        "status": "False",
        "reason": "RasUncorrectableIncrease",
        "message": "1 of 8 GPUs unhealthy: 0000:05:00.0: ras uncorrectable errors 0 -> 1",
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def stage(cluster: SimCluster, node: str) -> str | None:
    annotations = cluster.api().get(NODES, node)["metadata"].get("annotations") or {}
    return annotations.get(nodemeta.STAGE_ANNOTATION)


def doctor(cluster: SimCluster, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = cli.main(["--kubeconfig", str(cluster.kubeconfig), "doctor", "-o", "json", *args])
    return code, json.loads(capsys.readouterr().out)


def verdict_of(cluster: SimCluster, node: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    _, report = doctor(cluster, node, capsys=capsys)
    return dict(report["nodes"][0])


def wait_verdict(
    cluster: SimCluster, node: str, code: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        found = verdict_of(cluster, node, capsys)
        return found if found["verdict"] == code else None

    return dict(cluster.wait_for(check, timeout=90, interval=0.3, what=f"{node}: doctor says {code}"))


def finding(report: dict[str, Any], code: str) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["code"] == code)


def test_the_shared_state_names_are_the_operators(cluster: SimCluster) -> None:
    assert set(nodemeta.DRIVER_UPGRADE_STATES) == {s.value for s in UpgradeState}
    assert set(nodemeta.REMEDIATION_STATES) == {s.value for s in RemediationState}


def test_a_healthy_node_exits_zero(cluster: SimCluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor(cluster, "amd-0", capsys=capsys)
    (node,) = report["nodes"]
    assert code == 0 and node["serving"] and node["findings"] == [] and node["offers"] == "amd.com/gpu=8"


def test_no_deviceconfig_selects_the_node(cluster: SimCluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor(cluster, "amd-7", capsys=capsys)
    node = report["nodes"][0]
    assert code == 1 and node["verdict"] == "GPUOP-S001"
    evidence = " ".join(finding(node, "GPUOP-S001")["evidence"])
    assert "gpu-operator/main selects" in evidence and "doctor.test/dc" in evidence


def test_two_deviceconfigs_select_the_node(cluster: SimCluster, capsys: pytest.CaptureFixture[str]) -> None:
    node = wait_verdict(cluster, "amd-8", "GPUOP-S002", capsys)
    evidence = " ".join(finding(node, "GPUOP-S002")["evidence"])
    assert "gpu-operator/main" in evidence and "gpu-operator/zz-extra" in evidence
    cluster.wait_for(
        lambda: (
            "Conflict" in " ".join(finding(verdict_of(cluster, "amd-8", capsys), "GPUOP-S002")["evidence"])
        ),
        timeout=60,
        what="the operator's Conflict condition in the evidence",
    )


def test_a_failed_driver_build_names_the_task(
    cluster: SimCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    node = wait_verdict(cluster, "amd-6", "GPUOP-D003", capsys)
    found = finding(node, "GPUOP-D003")
    evidence = "\n".join(found["evidence"])
    assert "Build the amdgpu DKMS module" in evidence and "drm_fb_helper" in evidence
    assert "gpuop-driver-amd-6" in evidence
    assert "driver-upgrade-state=upgrade-required" in found["next"]


def test_an_operand_in_crash_loop(cluster: SimCluster, capsys: pytest.CaptureFixture[str]) -> None:
    node = wait_verdict(cluster, "amd-1", "GPUOP-P003", capsys)
    found = finding(node, "GPUOP-P003")
    assert "device-plugin" in found["summary"] and "restarts" in found["summary"]
    assert any("/dev/kfd: permission denied" in line for line in found["evidence"])
    assert "--previous" in found["next"]


def test_plugin_registered_but_zero_allocatable(
    cluster: SimCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    node = wait_verdict(cluster, "amd-2", "GPUOP-R001", capsys)
    evidence = " ".join(finding(node, "GPUOP-R001")["evidence"])
    assert "amd.com/gpu=0" in evidence and "gpuop.dev/gpu.count=8" in evidence


def test_an_unhealthy_gpu_under_remediation(cluster: SimCluster, capsys: pytest.CaptureFixture[str]) -> None:
    def repairing() -> dict[str, Any] | None:
        node = verdict_of(cluster, "amd-3", capsys)
        codes = [f["code"] for f in node["findings"]]
        return (
            node if "GPUOP-M001" in codes and "repairing" in finding(node, "GPUOP-M001")["summary"] else None
        )

    node = cluster.wait_for(repairing, timeout=90, interval=0.3, what="amd-3 repairing")
    assert node["verdict"] == "GPUOP-H001" and not node["serving"]
    health = finding(node, "GPUOP-H001")
    assert "0000:05:00.0" in health["summary"] and "RasUncorrectableIncrease" in health["summary"]
    assert "gpuop-reset-amd-3" in " ".join(finding(node, "GPUOP-M001")["evidence"])
    codes = [f["code"] for f in node["findings"]]
    assert "GPUOP-T001" not in codes  # the cordon is remediation's, not an admin's


def test_an_unknown_partition_profile(cluster: SimCluster, capsys: pytest.CaptureFixture[str]) -> None:
    node = wait_verdict(cluster, "amd-4", "GPUOP-C001", capsys)
    evidence = " ".join(finding(node, "GPUOP-C001")["evidence"])
    assert "gpuop.dev/gpu-config-profile=cpx-nps9" in evidence and "cpx-nps4" in evidence


def test_a_cordon_left_by_an_admin(cluster: SimCluster, capsys: pytest.CaptureFixture[str]) -> None:
    node = wait_verdict(cluster, "amd-5", "GPUOP-T001", capsys)
    assert finding(node, "GPUOP-T001")["next"] == "when the maintenance is over: kubectl uncordon amd-5"


def test_doctor_of_every_gpu_node_exits_non_zero_and_prints_the_verdicts(
    cluster: SimCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["--kubeconfig", str(cluster.kubeconfig), "doctor"])
    out = capsys.readouterr().out
    assert code == 1
    assert "amd-0: serving GPUs (amd.com/gpu=8)" in out
    assert "amd-7: NOT serving GPUs\n  GPUOP-S001 no DeviceConfig selects the node" in out


def test_must_gather_has_the_pieces_and_no_secret_even_with_partial_rbac(
    cluster: SimCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cluster.server is not None
    # This user may not read Jobs (a 403 from the API server, as RBAC would answer).
    cluster.server.faults.fail_next("list", "jobs", 403, count=1)
    out = tmp_path / "bundle.tar.gz"
    assert cli.main(["--kubeconfig", str(cluster.kubeconfig), "must-gather", "--output", str(out)]) == 0
    with tarfile.open(out) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}  # type: ignore[union-attr]
    for name in (
        "deviceconfigs.json",
        "nodes.json",
        "pods.json",
        "events.json",
        "doctor.txt",
        "operator-metrics.txt",
    ):
        assert name in files
    assert "list jobs in gpu-operator: 403" in files["unreadable.txt"]
    assert "GPUOP-D003" in files["doctor.txt"]
    assert any(n.startswith("logs/") and n.endswith(".previous.log") for n in files)  # the crash-looper's
    nodes = {n["name"]: n for n in json.loads(files["nodes.json"])}
    assert nodes["amd-2"]["allocatable"]["amd.com/gpu"] == "0"
    raw = gzip.decompress(out.read_bytes())
    assert SECRET_VALUE.encode() not in raw and b'"kind": "Secret"' not in raw


def test_the_real_kubectl_runs_the_plugin_from_path(cluster: SimCluster, tmp_path: Path) -> None:
    plugin = Path(sys.executable).parent / "kubectl-gpuop"
    assert plugin.is_file()
    env = {
        **os.environ,
        "PATH": f"{plugin.parent}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    kubectl = str(find_binary("kubectl"))
    listed = subprocess.run([kubectl, "plugin", "list"], env=env, capture_output=True, text=True, check=False)
    assert str(plugin) in listed.stdout
    shown = subprocess.run(
        [kubectl, "gpuop", "status", "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rows = {row["node"]: row for row in json.loads(shown.stdout)}
    assert rows["amd-0"]["deviceconfig"] == "gpu-operator/main"
    assert rows["amd-2"]["resources"] == "amd.com/gpu=0"

"""The demo: `--duration` + `--no-live` make it a plain program whose output a test can read."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from gpuop_kubectl.table import (
    NodeRow,
    PodCell,
    Tone,
    health_of,
    pod_cell,
    pods_cell,
    self_check_of,
    stage_of,
)
from gpuop_sim.cluster import SimNode, node_address
from gpuop_sim.demo import (
    DriverUpgrade,
    break_due,
    node_rows,
    partition_due,
    self_check_due,
    upgrade_due,
    use_live,
)

TITLE = "gpuop simulated cluster"


@pytest.mark.slow
def test_demo_prints_kubeconfig_kubectl_command_and_every_node(tmp_path: Path) -> None:
    env = dict(os.environ, COLUMNS="220")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuop_sim.demo",
            "--amd-nodes",
            "2",
            "--nvidia-nodes",
            "1",
            "--pods",
            "stub",
            "--duration",
            "2",
            "--no-live",
            "--chart",
            str(tmp_path / "no-chart"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "kubeconfig: /" in out
    assert "get nodes -L gpuop.dev/sim-profile" in out
    assert "--kubeconfig" in out
    assert "No operator chart" in out
    for node in ("amd-0", "amd-1", "nvidia-0"):
        assert node in out
    assert "Ready" in out
    assert "Stopping the simulated cluster" in out


def test_rows_show_stage_pods_resources_and_metrics_urls() -> None:
    sim = [SimNode("amd-0", "amd-mi210x8", "amd", 8, Path("/r"), "127.10.0.1")]
    node = {
        "metadata": {
            "name": "amd-0",
            "labels": {"gpuop.dev/sim-profile": "amd-mi210x8", "gpuop.dev/deploy.device-plugin": "true"},
            "annotations": {"gpuop.dev/stage": "operands-rolling", "other.io/x": "y"},
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "64", "amd.com/gpu": "8"},
        },
    }
    pod = {
        "metadata": {
            "name": "gpuop-metrics-exporter-x1",
            "namespace": "gpu-operator",
            "labels": {"app.kubernetes.io/name": "metrics-exporter"},
        },
        "spec": {
            "nodeName": "amd-0",
            "containers": [{"ports": [{"name": "metrics", "containerPort": 5000}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": "127.10.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    (row,) = node_rows(sim, [node], [pod])
    assert row == NodeRow(
        node="amd-0",
        vendor="amd",
        gpus="amd-mi210x8 x8",
        ready="Ready",
        stage="stage=operands-rolling; deploy: device-plugin",
        pods="1/1 ready",
        resources="amd.com/gpu=8",
        metrics="http://127.10.0.1:5000/metrics",
        pod_cells=(PodCell("metrics-exporter", Tone.READY),),
    )
    assert row.pods_text == "1/1 ready: metrics-exporter"


def agent_pod(phase: str, *containers: dict[str, Any], ready: bool = False, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpuop-device-plugin-x1", "labels": {"app.kubernetes.io/name": "device-plugin"}},
        "spec": {"nodeName": "amd-0"},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": list(containers),
            **status,
        },
    }


def waiting(reason: str, restarts: int = 0) -> dict[str, Any]:
    return {"name": "c", "restartCount": restarts, "state": {"waiting": {"reason": reason}}}


def running(restarts: int = 0) -> dict[str, Any]:
    return {"name": "c", "restartCount": restarts, "state": {"running": {}}}


@pytest.mark.parametrize(
    ("pod", "cell"),
    [
        (agent_pod("Running", running(), ready=True), PodCell("device-plugin", Tone.READY)),
        (agent_pod("Running", running(2), ready=True), PodCell("device-plugin x2", Tone.READY)),
        (
            agent_pod("Running", waiting("CrashLoopBackOff", 26)),
            PodCell("device-plugin CrashLoopBackOff x26", Tone.FAILING),
        ),
        (
            agent_pod("Pending", waiting("ContainerCreating")),
            PodCell("device-plugin ContainerCreating", Tone.STARTING),
        ),
        (agent_pod("Running", running()), PodCell("device-plugin starting", Tone.STARTING)),
        (
            agent_pod(
                "Running",
                running(),
                {"name": "d", "restartCount": 1, "state": {"terminated": {"reason": "OOMKilled"}}},
            ),
            PodCell("device-plugin OOMKilled x1", Tone.FAILING),
        ),
        # A kubelet keeps a pod that cannot pull Pending (the pull is retried): still red.
        (
            agent_pod("Pending", waiting("ErrImagePull")),
            PodCell("device-plugin ErrImagePull", Tone.FAILING),
        ),
        (
            agent_pod("Pending", waiting("ImagePullBackOff")),
            PodCell("device-plugin ImagePullBackOff", Tone.FAILING),
        ),
        (
            agent_pod("Pending", waiting("InvalidImageName")),
            PodCell("device-plugin InvalidImageName", Tone.FAILING),
        ),
        (
            agent_pod(
                "Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
            ),
            PodCell("device-plugin Unschedulable", Tone.FAILING),
        ),
        (agent_pod("Pending"), PodCell("device-plugin Pending", Tone.STARTING)),
    ],
)
def test_pod_cell_shows_the_container_reason_and_restarts(pod: dict[str, Any], cell: PodCell) -> None:
    assert pod_cell(pod) == cell


def test_rows_list_crash_looping_pods_too_and_colour_each_by_its_tone() -> None:
    node = {"metadata": {"name": "amd-0"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    looping = agent_pod("Running", waiting("CrashLoopBackOff", 3))
    ready = agent_pod("Running", running(), ready=True)
    ready["metadata"] = {"name": "lab-1", "labels": {"app.kubernetes.io/name": "node-labeller"}}
    done = agent_pod("Succeeded")
    (row,) = node_rows([], [node], [looping, ready, done])
    assert row.pods_text == "1/2 ready: device-plugin CrashLoopBackOff x3, node-labeller"
    text = pods_cell(row)
    assert text.plain == row.pods_text
    styles = {text.plain[span.start : span.end]: span.style for span in text.spans}
    assert styles == {"device-plugin CrashLoopBackOff x3": "red", "node-labeller": "green"}


@pytest.mark.parametrize(
    ("no_live", "is_terminal", "live"),
    [(False, True, True), (True, True, False), (False, False, False), (True, False, False)],
)
def test_the_table_redraws_in_place_only_on_a_terminal(no_live: bool, is_terminal: bool, live: bool) -> None:
    assert use_live(no_live=no_live, is_terminal=is_terminal) is live


def test_stage_of_a_fresh_node_is_a_dash() -> None:
    assert stage_of({"metadata": {"name": "n"}}) == "-"


def gpu_node(
    name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> Any:
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}}}


def runner_pod(node: str, *, ready: bool, service: str = "test-runner") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"gpuop-{service}-{node}",
            "labels": {"app.kubernetes.io/name": service},
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def test_the_self_check_is_requested_once_per_node_whose_test_runner_is_ready() -> None:
    nodes = [
        gpu_node("fresh"),  # ready runner, nothing yet: due
        gpu_node("starting"),  # runner not ready yet
        gpu_node("no-runner"),  # testRunner not enabled for it
        gpu_node("waiting", annotations={"gpuop.dev/test-request": "gpuop-selfcheck:demo"}),
        gpu_node("answered", labels={"gpuop.dev/gpu.test-result": "failed"}),
        gpu_node("asked-before"),  # the demo asked; the agent's answer may not show yet
    ]
    pods = [
        runner_pod("fresh", ready=True),
        runner_pod("starting", ready=False),
        runner_pod("waiting", ready=True),
        runner_pod("answered", ready=True),
        runner_pod("asked-before", ready=True),
    ]
    assert self_check_due(nodes, pods, requested={"asked-before"}) == ["fresh"]
    assert [self_check_of(n) for n in nodes] == ["-", "-", "-", "requested", "failed", "-"]
    (row,) = node_rows([], [nodes[4]], [])
    assert row.self_check == "failed"


def test_the_mi300x_spx_node_is_labelled_for_cpx_once_its_config_manager_is_ready() -> None:
    def sim(name: str, profile: str) -> SimNode:
        return SimNode(name, profile, "amd", 8, Path("/x"), "127.0.0.1")

    sims = [sim("spx", "amd-mi300x-spx"), sim("spx-starting", "amd-mi300x-spx"), sim("cpx", "amd-mi300x-cpx")]
    sims.append(sim("spx-labelled", "amd-mi300x-spx"))
    nodes = [
        gpu_node("spx"),
        gpu_node("spx-starting"),  # its config manager is not Ready yet
        gpu_node("cpx"),  # another profile: left alone
        gpu_node(
            "spx-labelled",
            labels={
                "gpuop.dev/gpu-config-profile": "cpx-nps4",
                "gpuop.dev/gpu-config-state": "success",
                "amd.com/gpu.compute-memory-partition": "cpx_nps4",
            },
        ),
    ]
    pods = [
        runner_pod("spx", ready=True, service="config-manager"),
        runner_pod("spx-starting", ready=False, service="config-manager"),
        runner_pod("cpx", ready=True, service="config-manager"),
        runner_pod("spx-labelled", ready=True, service="config-manager"),
    ]
    assert partition_due(sims, nodes, pods) == ["spx"]
    rows = node_rows(sims, nodes, pods)
    assert {r.node: r.partition for r in rows if r.partition != "-"} == {"spx-labelled": "cpx_nps4 success"}


def test_the_mi300x_cpx_node_breaks_once_after_a_passed_self_check_and_health_shows_remediation() -> None:
    def sim(name: str, profile: str) -> SimNode:
        return SimNode(name, profile, "amd", 8, Path("/x"), "127.0.0.1")

    def healthy(status: str, reason: str = "GPUsHealthy") -> dict[str, Any]:
        return {"conditions": [{"type": "Ready", "status": "True"}, {"type": "GPUHealthy", "status": status,
                                                                     "reason": reason}]}  # fmt: skip

    sims = [sim(n, "amd-mi300x-cpx") for n in ("due", "unchecked", "done-before", "broken")]
    sims.append(sim("spx", "amd-mi300x-spx"))
    passed = {"gpuop.dev/gpu.test-result": "passed"}
    nodes = [
        {**gpu_node("due", labels=passed), "status": healthy("True")},
        {**gpu_node("unchecked"), "status": healthy("True")},  # no self-check answer yet
        {**gpu_node("done-before", labels=passed), "status": healthy("True")},  # broken and repaired
        {
            **gpu_node("broken", labels={**passed, "gpuop.dev/remediation-state": "draining"}),
            "status": healthy("False", "RasUncorrectableIncrease"),
        },
        {**gpu_node("spx", labels=passed), "status": healthy("True")},  # another profile
    ]
    assert break_due(sims, nodes, broken={"done-before", "broken"}) == ["due"]
    health = {r.node: r.health for r in node_rows(sims, nodes, [])}
    assert health["broken"] == "unhealthy RasUncorrectableIncrease; remediation=draining"
    assert health["due"] == "healthy" and health_of(gpu_node("fresh")) == "-"


def device_config(
    name: str, vendor: str, driver: dict[str, Any], *, ready: str = "True", observed: int = 2
) -> dict[str, Any]:
    pci = {"amd": "1002", "nvidia": "10de"}[vendor]
    return {
        "metadata": {"name": name, "namespace": "gpu-operator", "generation": 2},
        "spec": {
            "vendor": vendor,
            "selector": {"matchLabels": {f"feature.node.kubernetes.io/pci-{pci}.present": "true"}},
            "driver": driver,
        },
        "status": {"observedGeneration": observed, "conditions": [{"type": "Ready", "status": ready}]},
    }


def driver_node(name: str, vendor: str, version: str | None) -> Any:
    pci = {"amd": "1002", "nvidia": "10de"}[vendor]
    labels = {f"feature.node.kubernetes.io/pci-{pci}.present": "true"}
    return gpu_node(name, labels={**labels, "gpuop.dev/driver.version": version} if version else labels)


def test_a_device_config_upgrades_once_after_its_nodes_all_run_the_first_version() -> None:
    amd, nvidia = {"enable": True, "version": "6.12"}, {"enable": True, "version": "570.124.06"}
    nodes = [driver_node("amd-0", "amd", "6.12"), driver_node("amd-1", "amd", "6.12")]
    nodes.append(driver_node("nvidia-0", "nvidia", "570.124.06"))
    configs = [device_config("amd", "amd", amd), device_config("nvidia", "nvidia", nvidia)]
    assert upgrade_due(configs, nodes, upgraded=set()) == [
        DriverUpgrade("gpu-operator", "amd", "6.13"),
        DriverUpgrade("gpu-operator", "nvidia", "570.133.20"),
    ]
    assert DriverUpgrade("gpu-operator", "amd", "6.13").patch == {"spec": {"driver": {"version": "6.13"}}}
    # Upgraded once: never again, even while its nodes still run the first version.
    assert upgrade_due(configs, nodes, upgraded={"gpu-operator/amd"}) == [
        DriverUpgrade("gpu-operator", "nvidia", "570.133.20")
    ]
    # The spec already names another version (the demo's patch, or an admin's own).
    moved = device_config("amd", "amd", {"enable": True, "version": "6.13"})
    assert upgrade_due([moved], nodes, upgraded=set()) == []


def test_no_upgrade_before_every_node_has_the_first_version_and_the_config_is_ready() -> None:
    driver = {"enable": True, "version": "6.12"}
    installed = [driver_node("amd-0", "amd", "6.12"), driver_node("nvidia-0", "nvidia", None)]
    installing = [driver_node("amd-0", "amd", "6.12"), driver_node("amd-1", "amd", None)]
    assert upgrade_due([device_config("amd", "amd", driver)], installing, upgraded=set()) == []
    not_ready = device_config("amd", "amd", driver, ready="False")
    stale = device_config("amd", "amd", driver, observed=1)  # Ready for the previous generation
    assert upgrade_due([not_ready, stale], installed, upgraded=set()) == []
    nothing_selected = [driver_node("nvidia-0", "nvidia", None)]
    assert upgrade_due([device_config("amd", "amd", driver)], nothing_selected, upgraded=set()) == []


def test_a_device_config_that_does_not_install_the_driver_is_never_upgraded() -> None:
    nodes = [driver_node("amd-0", "amd", "6.12")]  # a driver label from elsewhere
    off = device_config("amd", "amd", {"enable": False, "version": "6.12"})
    absent = device_config("amd", "amd", {})
    assert upgrade_due([off], nodes, upgraded=set()) == []
    assert upgrade_due([absent], nodes, upgraded=set()) == []


CHART_YAML = "apiVersion: v2\nname: gpu-operator\nversion: 0.1.0\n"
DAEMONSET_YAML = """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: demo-agent
  namespace: {{ .Release.Namespace }}
spec:
  selector:
    matchLabels: {app: demo-agent}
  template:
    metadata:
      labels: {app: demo-agent}
    spec:
      nodeSelector:
        feature.node.kubernetes.io/pci-1002.present: "true"
      containers:
      - name: agent
        image: test/agent:1
        ports:
        - {name: metrics, containerPort: 9400}
"""


@pytest.mark.slow
def test_demo_installs_an_operator_chart_with_helm_and_kubectl(tmp_path: Path) -> None:
    chart = tmp_path / "gpu-operator"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(CHART_YAML)
    (chart / "templates" / "daemonset.yaml").write_text(DAEMONSET_YAML)
    env = dict(os.environ, COLUMNS="220")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuop_sim.demo",
            "--amd-nodes",
            "1",
            "--nvidia-nodes",
            "1",
            "--pods",
            "stub",
            "--duration",
            "4",
            "--no-live",
            "--refresh",
            "0.5",
            "--chart",
            str(chart),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Installed gpu-operator into namespace gpu-operator (helm release gpuop)" in done.stdout
    assert "uninstall gpuop" in done.stdout and "rollback gpuop 1" in done.stdout
    # The AMD node's agent pod shows up with its metrics URL; the NVIDIA node has none.
    # Node addresses follow GPUOP_SIM_NODE_NET, which the demo inherits.
    assert f"http://{node_address(0)}:9400/metrics" in done.stdout
    assert f"{node_address(1)}:9400" not in done.stdout


def read_until(process: subprocess.Popen[bytes], needle: bytes, timeout: float) -> bytes:
    """Everything `process` wrote to stdout until `needle` appeared (or it ended, or `timeout`)."""
    assert process.stdout is not None
    out = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while needle not in out and time.monotonic() < deadline:
            if not selector.select(timeout=1.0):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
    return out


@pytest.mark.slow
def test_piped_demo_prints_the_table_while_it_runs_without_escape_codes(tmp_path: Path) -> None:
    # `make demo | tee demo.log`: no --no-live, stdout a pipe. A live table would show nothing
    # until the demo ends; this one must appear while the demo still runs.
    env = dict(os.environ, COLUMNS="220")
    env.pop("FORCE_COLOR", None)
    args = ["--amd-nodes", "1", "--nvidia-nodes", "0", "--pods", "stub", "--chart", str(tmp_path / "none")]
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuop_sim.demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        out = read_until(process, b"amd-0", timeout=120)  # the table's first row
        assert process.poll() is None, out.decode(errors="replace")  # still running: no --duration
        assert TITLE.encode() in out and b"amd-0" in out, out.decode(errors="replace")
        assert b"\x1b[" not in out  # no colours, no cursor movement into a log file
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_no_driver_values_keep_the_umbrella_deviceconfigs_and_turn_the_driver_on(tmp_path: Path) -> None:
    import yaml
    from gpuop_sim.binaries import repo_root
    from gpuop_sim.demo import device_config_values, host_command_values

    chart = repo_root() / "charts" / "gpu-operator"
    out = device_config_values(chart, tmp_path / "v.yaml", driver=True, partitions=True)
    written = yaml.safe_load(out.read_text())
    defaults = yaml.safe_load((chart / "values.yaml").read_text())["deviceConfigs"]
    assert [c["name"] for c in written["deviceConfigs"]] == [c["name"] for c in defaults]
    for config, default in zip(written["deviceConfigs"], defaults, strict=True):
        assert config["spec"]["selector"] == default["spec"]["selector"]
        assert config["spec"]["driver"]["enable"] is True and config["spec"]["driver"]["version"]
        assert config["spec"]["driver"]["upgradePolicy"]["maxParallelUpgrades"] == 1  # node by node
        manager = config["spec"].get("configManager")  # AMD only: the demo's CPX/NPS4 profile
        assert (manager or {}).get("enable", False) is (default["spec"]["vendor"] == "amd")
    hosts = yaml.safe_load(host_command_values(tmp_path / "h.yaml").read_text())
    for where in (hosts["operator"]["driverJobs"], hosts["config-manager"]):
        assert "gpuop_sim.hostfakes --root {host_root}" in where["hostExec"]
    # The umbrella accepts them (its schema and the operator's), and passes them on.
    from gpuop_sim import helm

    helm.dependency_build(chart)  # a fresh clone has no charts/ yet
    docs = helm.template(chart, values_files=[tmp_path / "v.yaml", tmp_path / "h.yaml"])
    daemonsets = [d for d in docs if d["kind"] == "DaemonSet"]
    manager = next(d for d in daemonsets if d["metadata"]["name"].endswith("config-manager"))
    args = manager["spec"]["template"]["spec"]["containers"][0]["args"]
    assert any(a.startswith("--host-exec=") and "gpuop_sim.hostfakes" in a for a in args)


def test_dra_rows_show_the_devices_of_the_node_s_resource_slices() -> None:
    from gpuop_sim.demo import DRA_DRIVER

    sim = [SimNode("amd-0", "amd-mi300x-cpx", "amd", 8, Path("/r"), "127.10.0.1")]
    node = {
        "metadata": {"name": "amd-0", "labels": {"gpuop.dev/sim-profile": "amd-mi300x-cpx"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "64"}},
    }

    def piece(node_name: str, driver: str, count: int) -> dict[str, Any]:
        devices = [{"name": f"d{i}"} for i in range(count)]
        return {"spec": {"driver": driver, "nodeName": node_name, "devices": devices}}

    slices = [piece("amd-0", DRA_DRIVER, 60), piece("amd-0", DRA_DRIVER, 3), piece("amd-0", "other.io", 5)]
    slices.append(piece("amd-1", DRA_DRIVER, 8))
    (row,) = node_rows(sim, [node], [], slices)
    assert row.resources == f"{DRA_DRIVER}=63 (DRA)"
    (plain,) = node_rows(sim, [node], [])
    assert plain.resources == "-"


def test_dra_values_swap_the_device_plugin_for_the_dra_driver(tmp_path: Path) -> None:
    import yaml
    from gpuop_sim import helm
    from gpuop_sim.binaries import repo_root
    from gpuop_sim.demo import DEMO_SHARING, device_config_values

    chart = repo_root() / "charts" / "gpu-operator"
    out = device_config_values(chart, tmp_path / "v.yaml", driver=False, partitions=False, dra=True)
    written = yaml.safe_load(out.read_text())
    defaults = yaml.safe_load((chart / "values.yaml").read_text())["deviceConfigs"]
    assert [c["name"] for c in written["deviceConfigs"]] == [c["name"] for c in defaults]
    for config in written["deviceConfigs"]:
        assert config["spec"]["devicePlugin"] == {"enable": False}
        amd = config["spec"]["vendor"] == "amd"  # the demo's sharing goes with the DRA driver
        assert config["spec"]["draDriver"] == (
            {"enable": True, "sharing": DEMO_SHARING} if amd else {"enable": True}
        )
        assert "driver" not in config["spec"]  # --no-driver not given
    both = device_config_values(chart, tmp_path / "b.yaml", driver=True, partitions=True, dra=True)
    helm.dependency_build(chart)
    docs = helm.template(chart, values_files=[both])
    assert any(d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gpuop-dra-driver" for d in docs)


def test_the_demo_time_slices_the_mi210_node_and_says_what_its_allocatable_becomes(tmp_path: Path) -> None:
    import yaml
    from gpuop_common.config import DeviceConfigSpec
    from gpuop_sim.binaries import repo_root
    from gpuop_sim.demo import DEMO_SHARING, device_config_values, sharing_notes

    chart = repo_root() / "charts" / "gpu-operator"
    out = device_config_values(chart, tmp_path / "v.yaml", driver=False, partitions=False)
    specs = {
        c["name"]: DeviceConfigSpec.model_validate(c["spec"])
        for c in yaml.safe_load(out.read_text())["deviceConfigs"]
    }
    assert (
        specs["amd"].device_plugin.sharing.to_wire()
        == DeviceConfigSpec.model_validate(
            {"devicePlugin": {"sharing": DEMO_SHARING}}
        ).device_plugin.sharing.to_wire()
    )
    assert specs["nvidia"].device_plugin.sharing.time_slicing.enabled is False
    nodes = [
        SimNode("amd-0", "amd-mi300x-cpx", "amd", 8, Path("/r0"), "127.10.0.1"),
        SimNode("amd-1", "amd-mi210x8", "amd", 8, Path("/r1"), "127.10.0.2"),
    ]
    (note,) = sharing_notes(nodes, dra=False)
    assert "amd-1 (8x MI210) is time-sliced 4 ways: amd.com/gpu 8 without sharing -> 32" in note

"""The console script as a real process: publishes, registers, prepares, removes its sockets on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuop_common.kubejson import NODES, RESOURCECLAIMS, RESOURCESLICES, KubeJson
from gpuop_dra_driver import DRIVER_NAME
from gpuop_sim.kubelet import DraClaim, KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo
from gpuop_sim.waiting import wait_until

MakeRoot = Callable[..., NodeRootInfo]
NODE = "proc-node"


def node_with_plugin_dirs(api: KubeJson, kubelet_emulator: KubeletEmulator) -> Path:
    """The Node and the kubelet's plugin folders a driver process expects; the plugins folder."""
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    plugins = kubelet_emulator.root / "var/lib/kubelet/plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    kubelet_emulator.plugins_registry.mkdir(parents=True, exist_ok=True)
    return plugins


def create_claim(api: Any, name: str, request: str) -> dict[str, Any]:
    """A ResourceClaim in `default` asking for one device of this driver's class."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": DRIVER_NAME}}]}},
    }
    created: dict[str, Any] = api.create(RESOURCECLAIMS, body, "default")
    return created


def test_the_process_publishes_prepares_and_cleans_up_on_sigterm(
    gpu_node_root: MakeRoot,
    kubelet_emulator: KubeletEmulator,
    kube_api_client: Any,
    sim_kubeconfig: Path,
) -> None:
    info = gpu_node_root("amd-mi300x-cpx")
    api = KubeJson(kube_api_client)
    plugins = node_with_plugin_dirs(api, kubelet_emulator)
    args = [
        sys.executable,
        "-m",
        "gpuop_dra_driver.main",
        f"--host-root={info.root}",
        f"--node-name={NODE}",
        f"--kubeconfig={sim_kubeconfig}",
        f"--plugins-dir={plugins}",
        f"--registry-dir={kubelet_emulator.plugins_registry}",
        f"--cdi-spec-dir={info.root / 'var/run/cdi'}",
        "--probe-port=0",
        "--interval=0.2",
    ]
    proc = subprocess.Popen(args, env={**os.environ, **info.env}, stderr=subprocess.PIPE, text=True)
    try:
        kubelet_emulator.wait_for(lambda: DRIVER_NAME in kubelet_emulator.dra_drivers(), timeout=60)

        def slices() -> list[dict[str, Any]]:
            return api.list(RESOURCESLICES, fieldSelector=f"spec.nodeName={NODE}")[0]

        wait_until(lambda: bool(slices()), timeout=60)
        (published,) = slices()
        devices = sorted(d["name"] for d in published["spec"]["devices"])
        assert len(devices) == 63
        claim = create_claim(api, "c", "p")
        result = {"request": "p", "driver": DRIVER_NAME, "pool": NODE, "device": devices[0]}
        api.replace_status(RESOURCECLAIMS, claim, {"allocation": {"devices": {"results": [result]}}})
        ref = DraClaim("default", claim["metadata"]["uid"], "c")
        answer = kubelet_emulator.prepare(DRIVER_NAME, [ref])[ref.uid]
        assert answer.error == "" and [d.device_name for d in answer.devices] == [devices[0]]
        assert (info.root / f"var/run/cdi/gpuop-dra-{ref.uid}.json").is_file()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr[-3000:]
    assert not (plugins / DRIVER_NAME / "dra.sock").exists()
    assert not (kubelet_emulator.plugins_registry / f"{DRIVER_NAME}-reg.sock").exists()
    assert (plugins / DRIVER_NAME / "checkpoint.json").is_file()  # the prepared claim outlives the process
    kubelet_emulator.wait_for(lambda: kubelet_emulator.dra_drivers() == {}, timeout=30)


def test_bad_directories_end_the_process_with_a_clear_error(
    gpu_node_root: MakeRoot, sim_kubeconfig: Path, short_tmp_dir: Path
) -> None:
    info = gpu_node_root("amd-single")
    deep = short_tmp_dir / ("d" * 60) / ("e" * 40)  # the registration socket would not fit sun_path
    deep.mkdir(parents=True)
    common = [
        sys.executable, "-m", "gpuop_dra_driver.main", f"--host-root={info.root}", f"--node-name={NODE}",
        f"--kubeconfig={sim_kubeconfig}", f"--plugins-dir={short_tmp_dir / 'plugins'}", "--probe-port=0",
    ]  # fmt: skip
    for registry, message in (
        (short_tmp_dir / "missing", "kubelet plugin-registration directory does not exist"),
        (deep, "cannot serve the plugin sockets"),
    ):
        done = subprocess.run(
            [*common, f"--registry-dir={registry}"], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 1, done.stderr[-2000:]
        assert message in done.stderr
        assert "Traceback" not in done.stderr


def _reserve(api: KubeJson, claim: dict[str, Any], device: str, pods: list[str]) -> dict[str, Any]:
    """The scheduler's work for a shared claim: allocated once, reserved for each of its pods."""
    result = {"request": "gpu", "driver": DRIVER_NAME, "pool": NODE, "device": device}
    reserved = [{"resource": "pods", "name": f"pod-{uid}", "uid": uid} for uid in pods]
    status = {"allocation": {"devices": {"results": [result]}}, "reservedFor": reserved}
    return api.replace_status(RESOURCECLAIMS, claim, status)


def test_time_slicing_from_the_config_file_and_one_claim_shared_by_two_pods(
    gpu_node_root: MakeRoot,
    kubelet_emulator: KubeletEmulator,
    kube_api_client: Any,
    sim_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    info = gpu_node_root("amd-single")
    api = KubeJson(kube_api_client)
    plugins = node_with_plugin_dirs(api, kubelet_emulator)
    config = tmp_path / "config.yaml"  # the chart's ConfigMap: the draDriver section of the spec
    config.write_text("sharing:\n  timeSlicing:\n    replicas: 2\n")
    args = [
        sys.executable,
        "-m",
        "gpuop_dra_driver.main",
        f"--host-root={info.root}",
        f"--node-name={NODE}",
        f"--kubeconfig={sim_kubeconfig}",
        f"--plugins-dir={plugins}",
        f"--registry-dir={kubelet_emulator.plugins_registry}",
        f"--cdi-spec-dir={info.root / 'var/run/cdi'}",
        f"--config-file={config}",
        "--config-poll-interval=0.2",
        "--probe-port=0",
        "--interval=0.2",
    ]
    proc = subprocess.Popen(args, env={**os.environ, **info.env}, stderr=subprocess.PIPE, text=True)
    try:
        kubelet_emulator.wait_for(lambda: DRIVER_NAME in kubelet_emulator.dra_drivers(), timeout=60)

        def published() -> dict[str, dict[str, Any]]:
            slices = api.list(RESOURCESLICES, fieldSelector=f"spec.nodeName={NODE}")[0]
            return {d["name"]: d["attributes"] for s in slices for d in s["spec"]["devices"]}

        wait_until(lambda: len(published()) == 2, timeout=60)
        devices = published()
        assert all(a["shared"] == {"bool": True} and a["replicas"] == {"int": 2} for a in devices.values())
        assert all("-ts-" in name for name in devices)
        # A config change (the operator rewrote the ConfigMap) is published without a restart.
        config.write_text("sharing:\n  timeSlicing:\n    replicas: 3\n")
        wait_until(lambda: len(published()) == 3, timeout=60)
        config.write_text("{}\n")
        wait_until(lambda: len(published()) == 1, timeout=60)
        ((device, attributes),) = published().items()
        assert "-ts-" not in device and attributes["shared"] == {"bool": False}

        # One claim used by two pods: prepared once, unprepared when the last pod is gone.
        claim = create_claim(api, "shared", "gpu")
        claim = _reserve(api, claim, device, ["uid-a", "uid-b"])
        assert [c["uid"] for c in claim["status"]["reservedFor"]] == ["uid-a", "uid-b"]
        ref = DraClaim("default", claim["metadata"]["uid"], "shared")
        reserved = {ref.uid: [c["uid"] for c in claim["status"]["reservedFor"]]}
        spec = info.root / f"var/run/cdi/gpuop-dra-{ref.uid}.json"
        first = kubelet_emulator.prepare_pod(DRIVER_NAME, "uid-a", [ref], reserved)[ref.uid]
        assert first.error == "" and [d.device_name for d in first.devices] == [device]
        written = spec.stat().st_mtime_ns
        second = kubelet_emulator.prepare_pod(DRIVER_NAME, "uid-b", [ref], reserved)[ref.uid]
        assert second == first  # the same CDI device for both pods
        assert spec.stat().st_mtime_ns == written
        refused = kubelet_emulator.prepare_pod(DRIVER_NAME, "uid-c", [ref], reserved)[ref.uid]
        assert refused.error == "pod uid-c is not allowed to use resource claim default/shared"
        assert kubelet_emulator.dra_claim_users(ref.uid) == {"uid-a", "uid-b"}

        assert kubelet_emulator.unprepare_pod(DRIVER_NAME, "uid-a", [ref]) == {}
        assert spec.is_file() and ref.uid in kubelet_emulator.dra_prepared_claims()
        assert kubelet_emulator.unprepare_pod(DRIVER_NAME, "uid-b", [ref]) == {ref.uid: ""}
        assert not spec.exists() and ref.uid not in kubelet_emulator.dra_prepared_claims()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr[-3000:]

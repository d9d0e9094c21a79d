"""Process-mode pods: termination messages, node reboots (the API and the fake `reboot` run by a
privileged host Job), the way the operator's driver and reboot Jobs see them.

This file is also the container program (image `test/host-tool`):
`--message=TEXT` writes TEXT to the file named by `--message-file`, `--lines=N` prints N log lines,
`--report=PATH` records argv, `--host-cmd=CMD[;CMD...]` runs host-command fakes on `--host-root`,
`--sleep` runs until killed, `--exit=N` ends with that code.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def container_main(argv: list[str]) -> int:
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if "report" in opts:
        Path(opts["report"]).parent.mkdir(parents=True, exist_ok=True)
        Path(opts["report"]).write_text(json.dumps(argv))
    for number in range(int(opts.get("lines", "0"))):
        print(f"log line {number:03d}", flush=True)
    if "message" in opts:
        Path(opts["message-file"]).write_text(
            opts["message"].replace("\\n", "\n") * int(opts.get("repeat", "1"))
        )
    for command in opts.get("host-cmd", "").split(";"):
        if not command.strip():
            continue
        fake = [sys.executable, "-m", "gpuop_sim.hostfakes", "--root", opts["host-root"], *command.split()]
        if subprocess.run(fake, check=False).returncode != 0:
            return 1
    if "--sleep" in argv:
        while True:
            time.sleep(1)
    return int(opts.get("exit", "0"))


if __name__ == "__main__":
    sys.exit(container_main(sys.argv[1:]))

# ---------------------------------------------------------------------------------------------------
from gpuop_sim import hostfakes  # noqa: E402
from gpuop_sim.cluster import SimCluster  # noqa: E402
from gpuop_sim.workloads.kubeapi import JOBS, NODES, PODS, KubeRest  # noqa: E402

NS = "default"
IMAGE = "test/host-tool:1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    commands = {"test/host-tool": [sys.executable, str(Path(__file__).resolve())]}
    with SimCluster(
        profiles=["amd-single"],
        pods="process",
        image_commands=commands,
        device_plugins=False,
        driver_loaded=False,
    ) as sim:
        yield sim


def pod(name: str, args: list[str], restart: str = "Never", **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": IMAGE, "args": args, **container}],
        },
    }


def terminated(cluster: SimCluster, name: str) -> dict[str, Any]:
    def done(obj: dict[str, Any]) -> bool:
        return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    obj = cluster.wait_for_object(PODS, name, NS, done, timeout=30)
    state: dict[str, Any] = obj["status"]["containerStatuses"][0]["state"]["terminated"]
    return state


def test_termination_message_file_becomes_the_terminated_message(cluster: SimCluster) -> None:
    cluster.api().create(PODS, pod("msg", ["--message-file=/dev/termination-log", "--message=all done"]), NS)
    state = terminated(cluster, "msg")
    assert (state["exitCode"], state["message"]) == (0, "all done")


def test_custom_termination_message_path_is_rewritten_and_capped_at_4096_bytes(cluster: SimCluster) -> None:
    args = ["--message-file=/run/out/summary.json", "--message=0123456789abcdef", "--repeat=1000", "--exit=4"]
    spec = pod("msg-long", args, terminationMessagePath="/run/out/summary.json")
    cluster.api().create(PODS, spec, NS)
    state = terminated(cluster, "msg-long")
    assert state["exitCode"] == 4
    assert state["message"] == ("0123456789abcdef" * 256)


def test_fallback_to_logs_on_error_takes_the_log_tail(cluster: SimCluster) -> None:
    api = cluster.api()
    api.create(
        PODS, pod("tail", ["--lines=120", "--exit=3"], terminationMessagePolicy="FallbackToLogsOnError"), NS
    )
    api.create(PODS, pod("tail-ok", ["--lines=5"], terminationMessagePolicy="FallbackToLogsOnError"), NS)
    api.create(PODS, pod("no-fallback", ["--lines=5", "--exit=3"]), NS)
    message = terminated(cluster, "tail")["message"]
    lines = message.splitlines()
    assert len(lines) == 80 and lines[0] == "log line 040" and lines[-1] == "log line 119"
    assert len(message.encode()) <= 2048
    assert terminated(cluster, "tail-ok")["message"] == ""  # exit 0: no fallback
    assert terminated(cluster, "no-fallback")["message"] == ""  # policy File


def ready_of(node: dict[str, Any]) -> str:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return f"{cond['status']}/{cond.get('reason', '')}"
    return "missing"


class NodeWatcher:
    """Records (Ready, bootID, taint keys) on every watch event of one node."""

    def __init__(self, api: KubeRest, name: str) -> None:
        self.events: list[tuple[str, str, tuple[str, ...]]] = []
        self._api, self._name = api, name
        self._stream: Any = None
        _, self._rv = api.list(NODES, fieldSelector=f"metadata.name={name}")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stream = self._api.watch(
            NODES, None, self._rv, 60, on_open=self._remember, fieldSelector=f"metadata.name={self._name}"
        )
        with contextlib.suppress(Exception):  # stop() cuts the stream
            for event in stream:
                obj = event.get("object") or {}
                if event.get("type") == "BOOKMARK":
                    continue
                taints = tuple(t["key"] for t in (obj.get("spec") or {}).get("taints") or [])
                self.events.append((ready_of(obj), obj["status"]["nodeInfo"]["bootID"], taints))

    def _remember(self, stream: Any) -> None:
        self._stream = stream

    def stop(self) -> None:
        if self._stream is not None:
            self._stream.shutdown()


def test_reboot_node_flips_ready_changes_boot_id_and_restarts_containers(cluster: SimCluster) -> None:
    api = cluster.api()
    node = cluster.nodes[0]
    api.create(PODS, pod("daemon", ["--sleep"], restart="Always"), NS)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "long-job", "namespace": NS},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": pod("x", ["--sleep"])["spec"] | {"nodeName": node.name}},
        },
    }
    api.create(JOBS, job, NS)

    def running(obj: dict[str, Any]) -> bool:
        statuses = (obj.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and "running" in statuses[0]["state"]

    cluster.wait_for_object(PODS, "daemon", NS, running, timeout=30)
    job_pod = cluster.wait_for(lambda: api.list(PODS, NS, labelSelector="job-name=long-job")[0], 30)[0]
    cluster.wait_for_object(PODS, job_pod["metadata"]["name"], NS, running, timeout=30)
    old_boot = api.get(NODES, node.name)["status"]["nodeInfo"]["bootID"]
    boots_before = hostfakes.boots(node.root)

    watcher = NodeWatcher(api, node.name)
    try:
        new_boot = cluster.reboot_node(node.name, down_seconds=0.5)
        cluster.wait_for(
            lambda: (
                watcher.events and watcher.events[-1][0] == "True/KubeletReady" and not watcher.events[-1][2]
            ),
            10,
            what="Ready and untainted again",
        )
    finally:
        watcher.stop()
    assert new_boot != old_boot
    assert api.get(NODES, node.name)["status"]["nodeInfo"]["bootID"] == new_boot
    assert hostfakes.boots(node.root) == boots_before + 1  # the host root went through a boot
    readiness = [ready for ready, _, _ in watcher.events]
    assert "False/KubeletNotReady" in readiness
    assert any(
        ready == "False/KubeletNotReady" and "node.kubernetes.io/not-ready" in taints
        for ready, _, taints in watcher.events
    )
    assert watcher.events[-1][1] == new_boot and "node.kubernetes.io/not-ready" not in watcher.events[-1][2]

    def restarted(obj: dict[str, Any]) -> bool:
        status = obj["status"]["containerStatuses"][0]
        return bool(status["restartCount"] == 1 and "running" in status["state"])

    daemon = cluster.wait_for_object(PODS, "daemon", NS, restarted, timeout=30)
    last = daemon["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("Unknown", 255)

    def failed(obj: dict[str, Any]) -> bool:
        return any(c["type"] == "Failed" for c in (obj.get("status") or {}).get("conditions") or [])

    done = cluster.wait_for_object(JOBS, "long-job", NS, failed, timeout=30)
    assert done["status"]["failed"] == 1
    api.delete(PODS, "daemon", NS)


def host_job(name: str, node: str, args: list[str]) -> dict[str, Any]:
    """A Job pod shaped like the operator's driver Jobs: privileged, host PID, host root at /host."""
    container = {
        "name": "host",
        "image": IMAGE,
        "args": ["--host-root=/host", *args],
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "host", "mountPath": "/host"}],
    }
    spec = {
        "restartPolicy": "Never",
        "nodeName": node,
        "hostPID": True,
        "tolerations": [{"operator": "Exists"}],
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
        "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 120, "template": {"spec": spec}},
    }


def test_privileged_host_job_sees_the_node_root_at_host(cluster: SimCluster) -> None:
    node = cluster.nodes[0]
    args = ["--report=/host/var/lib/gpuop/report.json", "--host-cmd=uname -r"]
    cluster.api().create(JOBS, host_job("host-probe", node.name, args), NS)

    def complete(obj: dict[str, Any]) -> bool:
        return any(c["type"] == "Complete" for c in (obj.get("status") or {}).get("conditions") or [])

    cluster.wait_for_object(JOBS, "host-probe", NS, complete, timeout=30)
    argv = json.loads((node.root / "var/lib/gpuop/report.json").read_text())
    assert f"--host-root={node.root}" in argv
    assert ["uname", "-r"] in hostfakes.recorded(node.root)


def test_host_job_installs_and_loads_the_driver_on_a_node_without_one(cluster: SimCluster) -> None:
    from gpuop_common.gpu.amd import AmdSysfsBackend

    node = cluster.nodes[0]
    assert not node.driver_loaded and not (node.root / "dev/kfd").exists()
    assert AmdSysfsBackend(node.root).enumerate() == []
    radeon = "deb file:///srv/repo.radeon.com/amdgpu/6.3.4/ubuntu/ jammy main"
    hostfakes.write_file(node.root / "etc/apt/sources.list.d/amdgpu.list", radeon)
    version = hostfakes.amd_dkms_version("6.3.4")
    commands = [
        "apt-get update",
        f"apt-get install -y linux-headers-{hostfakes.DEFAULT_KERNEL}",
        f"apt-get install -y amdgpu-dkms={version}",
        "modprobe amdgpu",
    ]
    cluster.api().create(JOBS, host_job("install", node.name, [f"--host-cmd={';'.join(commands)}"]), NS)

    def complete(obj: dict[str, Any]) -> bool:
        return any(c["type"] == "Complete" for c in (obj.get("status") or {}).get("conditions") or [])

    cluster.wait_for_object(JOBS, "install", NS, complete, timeout=30)
    assert (node.root / "dev/kfd").is_file()
    (gpu,) = AmdSysfsBackend(node.root).enumerate()
    assert gpu.pci_address == "0000:19:00.0"
    assert (node.root / "sys/module/amdgpu/version").read_text().strip() == version


def test_fake_reboot_in_a_host_job_reboots_the_node_and_fails_the_pod(cluster: SimCluster) -> None:
    api = cluster.api()
    node = cluster.nodes[0]
    old_boot = api.get(NODES, node.name)["status"]["nodeInfo"]["bootID"]
    boots_before = hostfakes.boots(node.root)
    api.create(JOBS, host_job("reboot", node.name, ["--host-cmd=systemctl reboot"]), NS)

    def new_boot(obj: dict[str, Any]) -> bool:
        return bool(obj["status"]["nodeInfo"]["bootID"] != old_boot and ready_of(obj) == "True/KubeletReady")

    cluster.wait_for_object(NODES, node.name, None, new_boot, timeout=30)
    assert hostfakes.boots(node.root) == boots_before + 1

    def failed(obj: dict[str, Any]) -> bool:
        return any(c["type"] == "Failed" for c in (obj.get("status") or {}).get("conditions") or [])

    cluster.wait_for_object(JOBS, "reboot", NS, failed, timeout=30)  # killed by the reboot it asked for
    (job_pod,) = api.list(PODS, NS, labelSelector="job-name=reboot")[0]
    state = job_pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["reason"], state["exitCode"]) == ("Unknown", 255)


def test_reboot_does_not_wait_for_pods_that_never_started(cluster: SimCluster) -> None:
    api = cluster.api()
    ghost = pod("ghost", [])
    ghost["spec"]["containers"][0]["image"] = "ghcr.io/nobody/not-installed:1"
    api.create(PODS, ghost, NS)
    waiting = pod(
        "no-config", [], env=[{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}}]
    )
    api.create(PODS, waiting, NS)

    def has_waiting_reason(obj: dict[str, Any]) -> bool:
        statuses = (obj.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and "waiting" in statuses[0]["state"]

    cluster.wait_for_object(PODS, "ghost", NS, has_waiting_reason)
    cluster.wait_for_object(PODS, "no-config", NS, has_waiting_reason)
    started = time.monotonic()
    cluster.reboot_node(cluster.nodes[0].name, down_seconds=0.2)
    assert time.monotonic() - started < 10  # the 30 s per-pod wait never kicked in
    for name in ("ghost", "no-config"):
        api.delete(PODS, name, NS)

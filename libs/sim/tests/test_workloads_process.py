"""`process` pods end to end: containers run as local processes on a simulated node.

This file is also the container program: the tests map the image `test/echo-server` to
`python <this file>`, which reports its argv/env, serves /healthz and /config on the node's bind
address, and records SIGTERM, so every assertion is about what the "container" really saw.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

PORT = 18080
NS = "default"


def container_main(argv: list[str]) -> int:
    """The echo-server container: `--report=PATH --config=PATH --port=N [--exit=CODE]`."""
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if "exit" in opts:
        print(f"echo-server exiting with {opts['exit']}", flush=True)
        return int(opts["exit"])
    report = Path(opts["report"])
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}))
    config = Path(opts["config"])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = config.read_bytes() if self.path == "/config" else b"ok"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((os.environ["GPUOP_BIND_ADDRESS"], int(opts["port"])), Handler)

    def on_term(signum: int, _frame: Any) -> None:
        (report.parent / "terminated").write_text(signal.Signals(signum).name)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    print(f"echo-server listening on {server.server_address}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(container_main(sys.argv[1:]))

# ---------------------------------------------------------------------------------------------------
from gpuop_sim.cluster import SimCluster  # noqa: E402
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, JOBS, PODS, SECRETS, KubeRest  # noqa: E402

IMAGE = "test/echo-server:1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    commands = {"test/echo-server": [sys.executable, str(Path(__file__).resolve())]}
    with SimCluster(profiles=["amd-single"], pods="process", image_commands=commands) as sim:
        yield sim


def pod(name: str, args: list[str], restart: str = "Always", **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE, "args": args}
    container.update(extra)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 5, "containers": [container]},
    }


def phase_is(*phases: str) -> Any:
    return lambda obj: (obj.get("status") or {}).get("phase") in phases


def is_ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_container_sees_env_downward_api_volumes_and_rewritten_paths(cluster: SimCluster) -> None:
    api: KubeRest = cluster.api()
    node = cluster.nodes[0]
    api.create(CONFIGMAPS, {"metadata": {"name": "echo-cfg"}, "data": {"config.yaml": "level: one\n"}}, NS)
    secret_data = {"token": base64.b64encode(b"s3cret").decode()}
    api.create(SECRETS, {"metadata": {"name": "echo-secret"}, "data": secret_data}, NS)
    spec = pod(
        "echo",
        [
            "--host-root=/host",
            "--config=/etc/echo/config.yaml",
            "--report=/work/report.json",
            f"--port={PORT}",
        ],
        env=[
            {"name": "PLAIN", "value": "hello"},
            {"name": "SYS_PATH", "value": "/host/sys/class/drm"},
            {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "echo-cfg", "key": "config.yaml"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "echo-secret", "key": "token"}}},
        ],
        ports=[{"name": "http", "containerPort": PORT}],
        readinessProbe={"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
        volumeMounts=[
            {"name": "host", "mountPath": "/host"},
            {"name": "cfg", "mountPath": "/etc/echo"},
            {"name": "work", "mountPath": "/work"},
        ],
    )
    spec["spec"]["volumes"] = [
        {"name": "host", "hostPath": {"path": "/"}},
        {"name": "cfg", "configMap": {"name": "echo-cfg"}},
        {"name": "work", "emptyDir": {}},
    ]
    api.create(PODS, spec, NS)

    running = cluster.wait_for_object(PODS, "echo", NS, is_ready, timeout=30)
    assert running["status"]["phase"] == "Running"
    assert running["spec"]["nodeName"] == node.name  # bound by the scheduler
    assert running["status"]["podIP"] == node.address
    report_path = cluster.wait_for(
        lambda: next(cluster.state_dir.glob("pods/*/*echo_*/volumes/work/report.json"), None)
    )
    report = json.loads(report_path.read_text())
    argv, env = report["argv"], report["env"]
    assert f"--host-root={node.root}" in argv
    assert any(a.startswith("--config=") and a.endswith("/volumes/cfg/config.yaml") for a in argv)
    assert env["PLAIN"] == "hello"
    assert env["SYS_PATH"] == f"{node.root}/sys/class/drm"
    assert (env["MY_NODE"], env["MY_NAME"], env["MY_NS"], env["MY_IP"]) == (
        node.name,
        "echo",
        NS,
        node.address,
    )
    assert env["LEVEL"] == "level: one\n"
    assert env["TOKEN"] == "s3cret"
    assert env["NODE_NAME"] == env["GPUOP_NODE_NAME"] == node.name
    assert env["GPUOP_BIND_ADDRESS"] == node.address
    # The pod's own kubeconfig (its ServiceAccount token), absolute: containers run in their own cwd.
    kubeconfig = Path(env["GPUOP_KUBECONFIG"])
    assert kubeconfig.is_absolute() and kubeconfig != cluster.kubeconfig
    assert str(cluster.url) in kubeconfig.read_text()
    for key, value in node.env.items():
        assert env[key] == value

    # Hot reload: a ConfigMap change reaches the mounted file through the `..data` swap.
    url = f"http://{node.address}:{PORT}/config"
    assert urllib.request.urlopen(url, timeout=5).read() == b"level: one\n"
    api.patch(CONFIGMAPS, "echo-cfg", {"data": {"config.yaml": "level: two\n"}}, NS)
    cluster.wait_for(
        lambda: urllib.request.urlopen(url, timeout=5).read() == b"level: two\n", 15, what="reload"
    )

    log = cluster.pod_log(NS, "echo", "main")
    assert "echo-server listening" in log

    api.delete(PODS, "echo", NS)
    cluster.wait_for((report_path.parent / "terminated").is_file, 15, what="SIGTERM in the container")
    assert (report_path.parent / "terminated").read_text() == "SIGTERM"

    def gone() -> bool:
        items, _ = api.list(PODS, NS, fieldSelector="metadata.name=echo")
        return not items

    cluster.wait_for(gone, 15, what="the pod object to be removed")


def test_container_that_exits_fails_the_pod_when_restart_policy_is_never(cluster: SimCluster) -> None:
    api = cluster.api()
    api.create(PODS, pod("quitter", ["--exit=3"], restart="Never"), NS)
    failed = cluster.wait_for_object(PODS, "quitter", NS, phase_is("Failed"), timeout=30)
    (status,) = failed["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 3
    assert "exiting with 3" in cluster.pod_log(NS, "quitter", "main")


def test_container_that_exits_zero_succeeds(cluster: SimCluster) -> None:
    api = cluster.api()
    api.create(PODS, pod("done", ["--exit=0"], restart="OnFailure"), NS)
    cluster.wait_for_object(PODS, "done", NS, phase_is("Succeeded"), timeout=30)


def test_crashing_container_is_restarted_with_backoff(cluster: SimCluster) -> None:
    api = cluster.api()
    api.create(PODS, pod("crasher", ["--exit=1"], restart="Always"), NS)

    def restarted_twice(obj: dict[str, Any]) -> bool:
        statuses = (obj.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and statuses[0]["restartCount"] >= 2

    crashed = cluster.wait_for_object(PODS, "crasher", NS, restarted_twice, timeout=30)
    status = crashed["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert crashed["status"]["phase"] == "Running"
    assert not is_ready(crashed)


def waiting_reason(reason: str) -> Any:
    def check(obj: dict[str, Any]) -> bool:
        statuses = (obj.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and (statuses[0]["state"].get("waiting") or {}).get("reason") == reason

    return check


def pod_events(cluster: SimCluster, name: str, *wanted: str) -> list[dict[str, Any]]:
    """The pod's Events once one with each `wanted` "Reason: message start" is there."""

    def mine(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e for e in events if e["involvedObject"]["name"] == name]

    def seen(events: list[dict[str, Any]]) -> bool:
        lines = [f"{e['reason']}: {e['message']}" for e in mine(events)]
        return all(any(line.startswith(w) for line in lines) for w in wanted)

    return mine(cluster.wait_for_events(NS, seen, what=f"{wanted} on pod {name}"))


def test_unknown_image_keeps_the_pod_pending_and_pulls_again_with_back_off(cluster: SimCluster) -> None:
    """A kubelet never fails a pod for an image pull: ErrImagePull, then ImagePullBackOff while the
    image back-off runs, the pod Pending all along; the Events are the kubelet's four."""
    api = cluster.api()
    image = "ghcr.io/nobody/not-installed:1.0"
    spec = pod("ghost", [], restart="Never")
    spec["spec"]["containers"][0]["image"] = image
    api.create(PODS, spec, NS)
    backing_off = cluster.wait_for_object(PODS, "ghost", NS, waiting_reason("ImagePullBackOff"), timeout=30)
    assert backing_off["status"]["phase"] == "Pending"
    assert "reason" not in backing_off["status"]
    waiting = backing_off["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["message"] == f'Back-off pulling image "{image}"'
    events = pod_events(
        cluster,
        "ghost",
        f'Failed: Failed to pull image "{image}": ',
        "Failed: Error: ErrImagePull",
        f'BackOff: Back-off pulling image "{image}"',
        "Failed: Error: ImagePullBackOff",
    )
    kinds = {e["reason"]: e["type"] for e in events}
    assert kinds == {"Failed": "Warning", "BackOff": "Normal"}
    assert all(e["involvedObject"].get("fieldPath") == "spec.containers{main}" for e in events)
    # Still Pending after the Events: nothing ever turns the pod Failed.
    assert api.get(PODS, "ghost", NS)["status"]["phase"] == "Pending"


def test_an_image_pushed_later_is_pulled_when_the_back_off_expires(cluster: SimCluster) -> None:
    """As a kubelet: the pod is not lost to a failed pull; the next pull (10 s later) finds it."""
    api = cluster.api()
    image = "ghcr.io/nobody/pushed-later:1.0"
    spec = pod("late", ["--exit=0"], restart="Never")
    spec["spec"]["containers"][0]["image"] = image
    api.create(PODS, spec, NS)
    cluster.wait_for_object(PODS, "late", NS, waiting_reason("ImagePullBackOff"), timeout=30)
    cluster.push_image(image, [sys.executable, str(Path(__file__).resolve())])
    done = cluster.wait_for_object(PODS, "late", NS, phase_is("Succeeded"), timeout=60)
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_malformed_image_reference_is_invalid_image_name_and_stays_pending(cluster: SimCluster) -> None:
    """Bad input: an upper-case repository ("Nobody/Upper") does not parse; refused before a pull."""
    api = cluster.api()
    image = "ghcr.io/Nobody/Upper:1.0"
    spec = pod("malformed", [], restart="Never")
    spec["spec"]["containers"][0]["image"] = image
    api.create(PODS, spec, NS)
    invalid = cluster.wait_for_object(PODS, "malformed", NS, waiting_reason("InvalidImageName"), timeout=30)
    assert invalid["status"]["phase"] == "Pending"
    waiting = invalid["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["message"].startswith(f'Failed to apply default image tag "{image}": couldn\'t parse')
    pod_events(
        cluster,
        "malformed",
        "InspectFailed: Failed to apply default image tag",
        "Failed: Error: InvalidImageName",
    )
    assert api.get(PODS, "malformed", NS)["status"]["phase"] == "Pending"


def test_job_whose_image_cannot_be_pulled_stays_active_with_its_pod_pending(cluster: SimCluster) -> None:
    """backoffLimit counts failed pods; a pod that cannot pull never fails, so the Job stays active
    (only activeDeadlineSeconds would end it)."""
    container = {"name": "main", "image": "ghcr.io/nobody/not-installed:2.0"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "unpullable", "namespace": NS},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }
    api = cluster.api()
    api.create(JOBS, job, NS)
    cluster.wait_for_object(
        JOBS, "unpullable", NS, lambda o: (o.get("status") or {}).get("active") == 1, timeout=30
    )
    pods, _ = api.list(PODS, NS, labelSelector="job-name=unpullable")
    (name,) = [p["metadata"]["name"] for p in pods]
    stuck = cluster.wait_for_object(PODS, name, NS, waiting_reason("ImagePullBackOff"), timeout=30)
    assert stuck["status"]["phase"] == "Pending"
    current = api.get(JOBS, "unpullable", NS)["status"]
    assert current.get("active") == 1
    assert not current.get("failed")
    assert not [c for c in current.get("conditions") or [] if c["type"] == "Failed"]


def test_stop_leaves_no_container_processes(tmp_path: Path) -> None:
    import psutil

    commands = {"test/echo-server": [sys.executable, str(Path(__file__).resolve())]}
    sim = SimCluster(profiles=["cpu-only"], pods="process", image_commands=commands).start()
    try:
        args = ["--config=/dev/null", f"--report={tmp_path}/r.json", f"--port={PORT + 1}"]
        sim.api().create(PODS, pod("lingering", args), NS)
        sim.wait_for_object(PODS, "lingering", NS, is_ready, timeout=30)
        children = psutil.Process().children(recursive=True)
        assert children
    finally:
        sim.stop()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


def test_exec_readiness_probe_runs_locally_with_container_paths_rewritten(cluster: SimCluster) -> None:
    api = cluster.api()
    spec = pod(
        "exec-probe",
        ["--config=/dev/null", "--report=/work/report.json", f"--port={PORT + 2}"],
        readinessProbe={"exec": {"command": ["test", "-f", "/work/report.json"]}, "periodSeconds": 1},
        volumeMounts=[{"name": "work", "mountPath": "/work"}],
    )
    spec["spec"]["volumes"] = [{"name": "work", "emptyDir": {}}]
    api.create(PODS, spec, NS)
    ready = cluster.wait_for_object(PODS, "exec-probe", NS, is_ready, timeout=30)
    assert ready["status"]["containerStatuses"][0]["ready"] is True


def test_job_pods_run_as_processes_until_the_job_completes(cluster: SimCluster) -> None:
    container = {"name": "main", "image": IMAGE, "args": ["--exit=0"]}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch", "namespace": NS},
        "spec": {
            "completions": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }
    cluster.api().create(JOBS, job, NS)

    def complete(obj: dict[str, Any]) -> bool:
        return any(c["type"] == "Complete" for c in (obj.get("status") or {}).get("conditions") or [])

    done = cluster.wait_for_object(JOBS, "batch", NS, complete, timeout=60)
    assert done["status"]["succeeded"] == 2

"""`kubectl logs` (the real kubectl 1.32) against a process-mode simulated cluster.

This file is also the container program: the image `test/talker` runs `python <this file>`, which
prints numbered lines, counts its runs in a file to crash a given number of times, and can wait for a
trigger file before printing one more line, so every assertion is about what a container really wrote.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any


def container_main(argv: list[str]) -> int:
    """`--name=N --lines=K [--stderr=TEXT] [--count=PATH --crash-until=R] [--trigger=PATH]`."""
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    name = opts.get("name", "main")
    for number in range(1, int(opts.get("lines", "0")) + 1):
        print(f"{name} line {number}", flush=True)
    if "stderr" in opts:
        print(opts["stderr"], file=sys.stderr, flush=True)
    if "count" in opts:
        counter = Path(opts["count"])
        run = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(run))
        print(f"run {run}", flush=True)
        if run < int(opts["crash-until"]):
            return 1
    if "trigger" in opts:
        trigger = Path(opts["trigger"])
        while not trigger.exists():
            time.sleep(0.05)
        print("late line", flush=True)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(container_main(sys.argv[1:]))

# ---------------------------------------------------------------------------------------------------
import queue  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
from gpuop_sim.binaries import find_binary  # noqa: E402
from gpuop_sim.cluster import SimCluster  # noqa: E402
from gpuop_sim.workloads.kubeapi import PODS  # noqa: E402

pytestmark = pytest.mark.slow

NS = "default"
IMAGE = "test/talker:1"
STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (.*)$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    commands = {"test/talker": [sys.executable, str(Path(__file__).resolve())]}
    with SimCluster(profiles=["cpu-only"], pods="process", image_commands=commands) as sim:
        yield sim


class Kubectl:
    def __init__(self, kubeconfig: Path, cache: Path) -> None:
        self.base = [str(find_binary("kubectl")), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache)]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=60, check=False)

    def ok(self, *args: str) -> str:
        proc = self(*args)
        assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {proc.stderr}"
        return proc.stdout

    def popen(self, *args: str) -> Follower:
        return Follower([*self.base, *args])


class Follower:
    """A running `kubectl logs -f`; its lines are read in a thread so a test can wait with a deadline."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # end of output

    def readline(self, timeout: float = 30) -> str:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"kubectl printed no line within {timeout}s") from None

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def kubectl(cluster: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(cluster.kubeconfig, tmp_path_factory.mktemp("kubectl-cache"))


def talker(name: str, *containers: tuple[str, list[str]], restart: str = "Always") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": c, "image": IMAGE, "args": args} for c, args in containers],
        },
    }


def running(restarts: int = 0) -> Any:
    def check(pod: dict[str, Any]) -> bool:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and all(
            "running" in s["state"] and s["restartCount"] >= restarts for s in statuses
        )

    return check


def start(cluster: SimCluster, pod: dict[str, Any], restarts: int = 0) -> None:
    cluster.api().create(PODS, pod, NS)
    cluster.wait_for_object(PODS, pod["metadata"]["name"], NS, running(restarts), timeout=60)


def wait_for_log(cluster: SimCluster, name: str, container: str, text: str) -> None:
    """The container has written `text` (the log file is the only sign a process printed)."""
    cluster.wait_for(lambda: text in cluster.pod_log(NS, name, container), 30, what=f"{text!r} in the log")


def raw_get(cluster: SimCluster, path: str) -> tuple[int, str, dict[str, Any] | str]:
    """GET on the API server itself, for answers kubectl checks before it asks."""
    try:
        with urllib.request.urlopen(cluster.url + path, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], json.loads(error.read())


def test_logs_tail_timestamps_since_and_limit(cluster: SimCluster, kubectl: Kubectl) -> None:
    start(cluster, talker("five", ("main", ["--name=main", "--lines=5"])))
    wait_for_log(cluster, "five", "main", "main line 5")
    lines = [f"main line {n}" for n in range(1, 6)]
    assert kubectl.ok("logs", "five").splitlines() == lines
    assert kubectl.ok("logs", "five", "--tail=2").splitlines() == lines[3:]
    stamped = kubectl.ok("logs", "five", "--timestamps").splitlines()
    assert [STAMPED.match(line).group(1) for line in stamped] == lines  # type: ignore[union-attr]
    assert kubectl.ok("logs", "five", "--limit-bytes=13") == "main line 1\nm"
    assert kubectl.ok("logs", "five", "--since=1h").splitlines() == lines
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    assert kubectl.ok("logs", "five", f"--since-time={future}") == ""
    status, content_type, body = raw_get(cluster, f"/api/v1/namespaces/{NS}/pods/five/log?tailLines=1")
    assert (status, content_type, body) == (200, "text/plain", "main line 5\n")


def test_logs_of_one_container_of_two(cluster: SimCluster, kubectl: Kubectl) -> None:
    start(
        cluster,
        talker(
            "two", ("a", ["--name=a", "--lines=1", "--stderr=a complains"]), ("b", ["--name=b", "--lines=2"])
        ),
    )
    wait_for_log(cluster, "two", "b", "b line 2")
    wait_for_log(cluster, "two", "a", "a complains")
    assert kubectl.ok("logs", "two", "-c", "b").splitlines() == ["b line 1", "b line 2"]
    # kubectl 1.32 picks the first container itself and says so; the server asks for a name.
    defaulted = kubectl("logs", "two")
    assert defaulted.returncode == 0, defaulted.stderr
    # stdout and stderr are read apart (as a runtime does), so only their own order is kept.
    assert sorted(defaulted.stdout.splitlines()) == ["a complains", "a line 1"]
    assert 'Defaulted container "a" out of: a, b' in defaulted.stderr
    status, _, body = raw_get(cluster, f"/api/v1/namespaces/{NS}/pods/two/log")
    assert status == 400
    assert isinstance(body, dict)
    assert (body["reason"], body["message"]) == (
        "BadRequest",
        "a container name must be specified for pod two, choose one of: [a b]",
    )


def test_previous_shows_the_instance_before_a_restart(
    cluster: SimCluster, kubectl: Kubectl, tmp_path: Path
) -> None:
    args = ["--name=main", "--lines=1", f"--count={tmp_path / 'runs'}", "--crash-until=2"]
    start(cluster, talker("crashy", ("main", args)), restarts=1)
    wait_for_log(cluster, "crashy", "main", "run 2")
    assert kubectl.ok("logs", "crashy").splitlines() == ["main line 1", "run 2"]
    assert kubectl.ok("logs", "crashy", "--previous").splitlines() == ["main line 1", "run 1"]
    never = kubectl("logs", "five", "--previous")
    assert never.returncode != 0
    assert 'Error from server (BadRequest): previous terminated container "main" in pod "five" not found' in (
        never.stderr
    )


def test_follow_streams_new_lines_until_the_container_exits(
    cluster: SimCluster, kubectl: Kubectl, tmp_path: Path
) -> None:
    trigger = tmp_path / "go"
    start(cluster, talker("waiter", ("main", ["--lines=2", f"--trigger={trigger}"]), restart="Never"))
    wait_for_log(cluster, "waiter", "main", "main line 2")
    follower = kubectl.popen("logs", "-f", "waiter")
    try:
        assert follower.readline() == "main line 1\n"
        assert follower.readline() == "main line 2\n"
        trigger.touch()
        assert follower.readline() == "late line\n"
        # The container exited 0: the stream ends and kubectl with it.
        assert follower.readline() == ""
        assert follower.proc.wait(timeout=60) == 0
    finally:
        follower.stop()


def test_follow_ends_on_the_server_when_kubectl_goes(cluster: SimCluster, kubectl: Kubectl) -> None:
    start(cluster, talker("steady", ("main", ["--lines=1"])))
    wait_for_log(cluster, "steady", "main", "main line 1")
    server = cluster.server
    assert server is not None
    follower = kubectl.popen("logs", "--follow", "steady")
    try:
        assert follower.readline() == "main line 1\n"
    finally:
        follower.stop()

    # A request is logged once its handler returns: the stream noticed the hang-up.
    def stream_closed() -> bool:
        return any(r.path.endswith("/pods/steady/log") and r.query.get("follow") for r in server.requests())

    cluster.wait_for(stream_closed, 30, what="the follow handler to end")


def test_errors_name_the_pod_the_container_and_the_option(cluster: SimCluster, kubectl: Kubectl) -> None:
    # kubectl reads the pod first, so its 404 is the pod GET's; the log GET answers the same below.
    missing = kubectl("logs", "nope")
    assert missing.returncode != 0
    assert '(NotFound): pods "nope" not found' in missing.stderr
    # kubectl checks a container name against the pod before it asks; the server checks it again.
    unknown = kubectl("logs", "five", "-c", "nope")
    assert unknown.returncode != 0
    assert "container nope is not valid for pod five" in unknown.stderr
    base = f"/api/v1/namespaces/{NS}/pods"
    cases = [
        ("/nope/log", 404, "NotFound", 'pods "nope" not found'),
        ("/five/log?container=nope", 400, "BadRequest", "container nope is not valid for pod five"),
        (
            "/five/log?tailLines=-1",
            422,
            "Invalid",
            'PodLogOptions "five" is invalid: tailLines: Invalid value: -1: '
            "must be greater than or equal to 0",
        ),
        ("/five/log?tailLines=x", 400, "BadRequest", 'strconv.ParseInt: parsing "x": invalid syntax'),
    ]
    for path, code, reason, message in cases:
        status, content_type, body = raw_get(cluster, base + path)
        assert (status, content_type) == (code, "application/json"), path
        assert isinstance(body, dict)
        assert (body["kind"], body["reason"], body["message"]) == ("Status", reason, message), path


def test_stub_pods_have_empty_logs() -> None:
    with SimCluster(profiles=["cpu-only"], pods="stub") as sim:
        start(sim, talker("quiet", ("main", ["--lines=3"])))
        status, content_type, body = raw_get(sim, f"/api/v1/namespaces/{NS}/pods/quiet/log")
        assert (status, content_type, body) == (200, "text/plain", "")

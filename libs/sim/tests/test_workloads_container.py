"""Container mode with the real runc: pods run from an image in a podman store of this module's own.

The image is Debian's static busybox imported offline (`gpuop_sim.oci`): no Entrypoint, Cmd, Env or
USER, so what the containers get comes from the pod and the runtime alone. One cluster for the module.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpuop_sim.cluster import SimCluster
from gpuop_sim.oci import Podman
from gpuop_sim.oci_fixtures import skip_without_oci_tools
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, PODS

pytestmark = pytest.mark.slow
NS = "default"
NODE = "cpu-0"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Podman, str]]:
    skip_without_oci_tools()
    # Not under /dev/shm (make test's TMPDIR): podman refuses a run root over 50 characters.
    root = Path(tempfile.mkdtemp(prefix="gpc-", dir="/var/tmp"))
    try:
        podman = Podman(root)
        yield podman, podman.import_busybox(tmp_path_factory.mktemp("busybox"))
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(store: tuple[Podman, str]) -> Iterator[SimCluster]:
    podman, _ = store
    with SimCluster(cpu_nodes=1, pods="container", image_store=podman.command()) as sim:
        sim.api().create(
            CONFIGMAPS,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cfg"},
                "data": {"key": "from-cm"},
            },
            NS,
        )
        yield sim


def pod(name: str, image: str, script: str | None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image, **spec.pop("container", {})}
    if script is not None:
        container["command"] = ["/bin/sh", "-c", script]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": NODE, "restartPolicy": "Never", "containers": [container], **spec},
    }


def container_status(cluster: SimCluster, name: str) -> dict[str, Any]:
    statuses = (cluster.api().get(PODS, name, NS).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def wait_state(cluster: SimCluster, name: str, key: str, timeout: float = 120) -> dict[str, Any]:
    cluster.wait_for(
        lambda: key in container_status(cluster, name).get("state", {}), timeout=timeout, what=f"{name} {key}"
    )
    return dict(container_status(cluster, name)["state"][key])


# Everything a user sees from inside: ids, read-only root, each volume, env, caps, termination file.
INSIDE = """
echo "uid=$(busybox id -u) gid=$(busybox id -g) groups=$(busybox id -G)"
echo "cm=$(cat /cfg/key) greeting=$GREETING home=$HOME"
ls /node-sys/class
busybox touch /rootfile 2>/dev/null && echo "root writable" || echo "root read-only"
busybox touch /cfg/x 2>/dev/null && echo "cm writable" || echo "cm read-only"
busybox touch /scratch/ok && echo "scratch writable"
busybox grep -E '^Cap(Eff|Bnd)' /proc/self/status
echo "pid=$$ hostname=$(busybox hostname)"
echo "kubeconfig=$KUBECONFIG $(busybox head -c 10 $KUBECONFIG)"
echo "done it" > /dev/termination-log
echo to-stderr >&2
exit 3
"""


def test_a_container_runs_with_the_pods_identity_volumes_and_env(
    cluster: SimCluster, store: tuple[Podman, str]
) -> None:
    _, image = store
    spec = pod(
        "inside",
        image,
        INSIDE,
        container={
            "env": [{"name": "GREETING", "value": "hi"}],
            "securityContext": {
                "runAsUser": 1234,
                "runAsGroup": 5678,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            },
            "volumeMounts": [
                {"name": "cfg", "mountPath": "/cfg"},
                {"name": "sys", "mountPath": "/node-sys"},
                {"name": "scratch", "mountPath": "/scratch"},
            ],
        },
        securityContext={"supplementalGroups": [44]},
        volumes=[
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "sys", "hostPath": {"path": "/sys"}},
            {"name": "scratch", "emptyDir": {}},
        ],
    )
    (cluster.node(NODE).root / "sys/class/gpuop-node-marker").mkdir(parents=True, exist_ok=True)
    cluster.api().create(PODS, spec, NS)
    terminated = wait_state(cluster, "inside", "terminated")
    log = cluster.pod_log(NS, "inside", "main")
    assert (terminated["exitCode"], terminated["reason"], terminated["message"]) == (
        3,
        "Error",
        "done it\n",
    ), log
    assert terminated["containerID"].startswith("runc://")
    assert "uid=1234 gid=5678 groups=5678 44" in log
    assert "cm=from-cm greeting=hi home=/" in log
    assert "root read-only" in log and "cm read-only" in log and "scratch writable" in log
    assert "CapEff:\t0000000000000000" in log and "CapBnd:\t0000000000000400" in log  # NET_BIND_SERVICE only
    assert "pid=1 hostname=inside" in log  # own PID and UTS namespaces
    assert "kubeconfig=/run/gpuop-sim/kubeconfig apiVersion" in log
    assert "to-stderr" in log
    # The hostPath is the node's own tree (its marker dir), not this machine's /sys.
    assert "\ngpuop-node-marker\n" in log


def test_host_pid_and_privileged_reach_the_node(cluster: SimCluster, store: tuple[Podman, str]) -> None:
    _, image = store
    script = 'echo "pid=$$"; busybox grep CapEff /proc/self/status; busybox touch /sys-rw 2>&1; exit 0'
    spec = pod("hostpid", image, script, hostPID=True, container={"securityContext": {"privileged": True}})
    cluster.api().create(PODS, spec, NS)
    terminated = wait_state(cluster, "hostpid", "terminated")
    log = cluster.pod_log(NS, "hostpid", "main")
    assert terminated["exitCode"] == 0, log
    assert "pid=1\n" not in log  # the host's PID namespace: not the first process there
    own = next(
        line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("CapBnd")
    )
    assert f"CapEff:\t{own.split()[1]}" in log  # privileged root: every capability the node has


def test_a_missing_image_backs_off_and_the_pod_starts_once_the_image_is_built(
    cluster: SimCluster, store: tuple[Podman, str]
) -> None:
    podman, image = store
    late = "localhost/gpuop-late:1"
    cluster.api().create(PODS, pod("late", late, "echo started"), NS)
    events = cluster.wait_for_events(
        NS,
        lambda found: any(  # posted after the pull's own message
            e["message"] == "Error: ErrImagePull" and "late" in e["involvedObject"]["name"] for e in found
        ),
        timeout=120,
        what="the Failed event of the first pull",
    )
    failed = sorted(
        e["message"] for e in events if e["reason"] == "Failed" and e["involvedObject"]["name"] == "late"
    )
    # The kubelet's pair: the pull's own message, then the container's `Error: ErrImagePull`.
    assert failed[0] == "Error: ErrImagePull", failed
    assert failed[1].startswith(f'Failed to pull image "{late}": '), failed
    assert "image not known" in failed[1]  # podman's own words
    cluster.wait_for(
        lambda: (
            container_status(cluster, "late").get("state", {}).get("waiting", {}).get("reason")
            == "ImagePullBackOff"
        ),
        timeout=120,
        what="late in ImagePullBackOff",
    )
    waiting = container_status(cluster, "late")["state"]["waiting"]
    assert waiting["message"] == f'Back-off pulling image "{late}"'
    assert cluster.api().get(PODS, "late", NS)["status"]["phase"] == "Pending"  # retried, not given up
    # The image appears in local storage (a build, here a tag): the next pull finds it.
    subprocess.run(podman.command("tag", image, late), check=True, capture_output=True)
    cluster.wait_for(
        lambda: cluster.api().get(PODS, "late", NS)["status"]["phase"] == "Succeeded",
        timeout=120,
        what="late Succeeded once its image is there",
    )
    assert "started" in cluster.pod_log(NS, "late", "main")


def test_pull_policy_never_does_not_pull(cluster: SimCluster) -> None:
    spec = pod("never", "gpuop/not-built:1", "true", container={"imagePullPolicy": "Never"})
    cluster.api().create(PODS, spec, NS)
    cluster.wait_for(
        lambda: (
            container_status(cluster, "never").get("state", {}).get("waiting", {}).get("reason")
            == "ErrImageNeverPull"
        ),
        timeout=120,
        what="never waiting with ErrImageNeverPull",
    )
    message = container_status(cluster, "never")["state"]["waiting"]["message"]
    assert message == 'Container image "gpuop/not-built:1" is not present with pull policy of Never'


def test_no_command_and_a_missing_executable_are_the_runtimes_errors(
    cluster: SimCluster, store: tuple[Podman, str]
) -> None:
    _, image = store
    cluster.api().create(PODS, pod("nocommand", image, None), NS)  # busybox image: no Entrypoint/Cmd
    cluster.api().create(PODS, pod("noexec", image, None, container={"command": ["/no/such/binary"]}), NS)
    cluster.wait_for(
        lambda: (
            container_status(cluster, "nocommand").get("state", {}).get("waiting", {}).get("reason")
            == "CreateContainerError"
        ),
        timeout=120,
        what="nocommand CreateContainerError",
    )
    assert "no command specified" in container_status(cluster, "nocommand")["state"]["waiting"]["message"]
    terminated = wait_state(cluster, "noexec", "terminated")
    assert (terminated["reason"], terminated["exitCode"]) == ("StartError", 128)
    assert "/no/such/binary" in terminated["message"]


def test_exec_probes_run_inside_and_a_deleted_pod_leaves_nothing_in_runc(
    cluster: SimCluster, store: tuple[Podman, str]
) -> None:
    _, image = store
    # /ready exists only in the container's own root: the readiness probe must run in there.
    script = "trap 'echo got TERM; exit 0' TERM; echo > /ready; while :; do busybox sleep 1; done"
    probe = {"exec": {"command": ["/bin/sh", "-c", "cat /ready"]}, "periodSeconds": 1}
    long = pod("long", image, script, restartPolicy="Always", container={"readinessProbe": probe})
    cluster.api().create(PODS, long, NS)
    cluster.wait_for(
        lambda: container_status(cluster, "long").get("ready") is True,
        timeout=120,
        what="long Ready through its exec probe",
    )
    cluster.api().delete(PODS, "long", NS)
    cluster.wait_for(
        lambda: not cluster.api().list(PODS, NS, fieldSelector="metadata.name=long")[0],
        timeout=60,
        what="long gone",
    )
    assert "got TERM" in cluster.pod_log(NS, "long", "main")
    runc_root = cluster.state_dir / "runc"
    listed = subprocess.run(
        ["runc", "--root", str(runc_root), "list", "-q"], capture_output=True, text=True, check=True
    )
    assert "long" not in listed.stdout

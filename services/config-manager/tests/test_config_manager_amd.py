"""The config manager on simulated MI300X nodes: state sequence, quiesce/restore, failures, restarts."""

from __future__ import annotations

import json
import subprocess
import threading

from gpuop_common.gpu import AmdSysfsBackend
from gpuop_common.gpu.amd_reload import DriverReloader
from gpuop_config_manager.labels import (
    AMD_STATE_LABEL,
    PAUSE,
    PAUSED,
    PROGRESS_ANNOTATION,
    REASON_ANNOTATION,
    STATE_LABEL,
    State,
    profile_digest,
)
from gpuop_config_manager.progress import Progress
from gpuop_sim import hostfakes
from gpuop_sim.nodes import hold_open
from kubernetes import client

NODE = "gpu-node"
DEPLOY = {
    "gpuop.dev/deploy.device-plugin": "true",
    "gpuop.dev/deploy.metrics-exporter": "true",
    "gpuop.dev/deploy.test-runner": "false",
}
PROFILE = "gpuop.dev/gpu-config-profile"
DP = "gpuop.dev/deploy.device-plugin"
ME = "gpuop.dev/deploy.metrics-exporter"
TR = "gpuop.dev/deploy.test-runner"


def _modes(info):
    return {(g.partition.compute, g.partition.memory) for g in AmdSysfsBackend(info.root).enumerate()}


def _partitions(info):
    return sum(len(g.partitions) or 1 for g in AmdSysfsBackend(info.root).enumerate())


def test_spx_to_cpx_nps4_goes_through_every_state_and_restores_the_operands(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS and outcome.changed
    assert h.kube.states() == ["pending", "quiescing", "applying", "success"]
    quiescing = next(p for p in h.kube.label_patches if p.get(STATE_LABEL) == "quiescing")
    assert quiescing[DP] == PAUSED and quiescing[ME] == PAUSED and TR not in quiescing  # false stays false
    node = h.node()
    assert {k: node.labels[k] for k in DEPLOY} == DEPLOY
    assert node.labels[STATE_LABEL] == "success" and node.labels[AMD_STATE_LABEL] == "success"
    assert PROGRESS_ANNOTATION not in (node.annotations or {})
    assert _modes(h.info) == {("CPX", "NPS4")} and _partitions(h.info) == 64
    assert h.events() == ["ConfigPending", "Quiescing", "ApplyingConfig", "ReloadingDriver", "ConfigApplied"]
    # CPX went in at once; NPS4 was a request the driver took at its reload, done once for all GPUs.
    assert hostfakes.recorded(h.info.root) == [["modprobe", "-r", "amdgpu"], ["modprobe", "amdgpu"]]
    # Steady state: nothing written on the next passes.
    writes = h.kube.writes
    for _ in range(2):
        assert not h.agent().run_once().changed
    assert h.kube.writes == writes


def test_cpx_nps4_to_spx_nps1_and_nps1_to_nps4(harness):
    h = harness("amd-mi300x-cpx", {PROFILE: "spx-nps1"})
    assert h.agent().run_once().state is State.SUCCESS
    assert _modes(h.info) == {("SPX", "NPS1")} and _partitions(h.info) == 8
    h.label(**{PROFILE: "cpx-nps1"})
    assert h.agent().run_once().state is State.SUCCESS
    assert _modes(h.info) == {("CPX", "NPS1")}
    h.label(**{PROFILE: "cpx-nps4"})
    assert h.agent().run_once().state is State.SUCCESS
    assert _modes(h.info) == {("CPX", "NPS4")} and _partitions(h.info) == 64


def test_matching_node_is_a_no_op_with_one_success_label(harness):
    h = harness("amd-mi300x-cpx", {"dcm.amd.com/gpu-config-profile": "cpx-nps4"})
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS and not outcome.changed
    assert h.kube.states() == ["success"]
    assert h.node().labels[DP] == "true"
    assert h.events() == ["ConfigAlreadyApplied"]


def test_invalid_profile_is_rejected_with_no_change(harness):
    h = harness("amd-mi300x-cpx", {PROFILE: "spx-nps4"})
    generation = (h.info.root / "sys/class/kfd/kfd/topology/generation_id").read_text()
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    node = h.node()
    reason = node.annotations[REASON_ANNOTATION]
    assert "AMD GPU 0 (0000:05:00.0): compute partition SPX is refused with memory partition NPS4" in reason
    assert node.labels[STATE_LABEL] == "failed" and node.labels[AMD_STATE_LABEL] == "failure"
    assert h.kube.states() == ["failed"]  # never pending: nothing was touched
    assert {k: node.labels[k] for k in DEPLOY} == DEPLOY
    assert (h.info.root / "sys/class/kfd/kfd/topology/generation_id").read_text() == generation
    assert h.events() == ["InvalidProfile"]
    # Not retried in a loop: the next pass writes nothing.
    writes = h.kube.writes
    assert h.agent().run_once().state is State.FAILED and h.kube.writes == writes


def test_unknown_profile_names_the_label_and_the_known_ones(harness):
    h = harness("amd-mi300x-cpx", {PROFILE: "qpx-typo"})
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    assert "profile 'qpx-typo' (label gpuop.dev/gpu-config-profile) is not in the config" in outcome.reason
    assert "cpx-nps4, spx-nps1" in outcome.reason


def test_failed_write_is_failed_with_the_reason_and_the_node_stays_usable(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})
    gpu3 = AmdSysfsBackend(h.info.root).enumerate()[3]
    with hold_open(h.info.root, f"/dev/dri/renderD{gpu3.render_minor}"):
        outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    node = h.node()
    assert "EBUSY" in node.annotations[REASON_ANNOTATION] or "busy" in node.annotations[REASON_ANNOTATION]
    assert gpu3.id in node.annotations[REASON_ANNOTATION]
    assert h.kube.states() == ["pending", "quiescing", "applying", "failed"]
    assert {k: node.labels[k] for k in DEPLOY} == DEPLOY
    assert PROGRESS_ANNOTATION not in node.annotations
    assert h.events()[-1] == "ConfigFailed"
    # Usable: every GPU is still a valid partition state, and a new request applies.
    h.label(**{PROFILE: "spx-nps1"})
    assert h.agent().run_once().state is State.SUCCESS
    assert _modes(h.info) == {("SPX", "NPS1")}


def test_gpu_pod_that_never_leaves_times_out_and_operands_come_back(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"}, quiesceTimeoutSeconds=1)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="trainer", namespace="default"),
        spec=client.V1PodSpec(
            node_name=NODE,
            containers=[
                client.V1Container(
                    name="main",
                    image="x",
                    resources=client.V1ResourceRequirements(limits={"amd.com/gpu": "1"}),
                )
            ],
        ),
    )
    h.core.create_namespaced_pod("default", pod)
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    assert "timed out after 1s waiting for pods to leave the node: default/trainer" in outcome.reason
    node = h.node()
    assert {k: node.labels[k] for k in DEPLOY} == DEPLOY
    assert h.kube.states() == ["pending", "quiescing", "failed"]
    assert _modes(h.info) == {("SPX", "NPS1")}
    assert h.events()[-1] == "QuiesceTimeout"


def test_a_gpu_pod_stuck_pulling_its_image_blocks_and_the_timeout_says_why(harness):
    """A kubelet keeps a pod whose image cannot be pulled Pending, its GPUs allocated, and never
    fails it (it used to turn Failed in the simulator, which let the apply go on): it blocks the
    repartition like a running one, and the timeout names the kubelet's reason."""
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"}, quiesceTimeoutSeconds=1)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="unpulled", namespace="default"),
        spec=client.V1PodSpec(
            node_name=NODE,
            containers=[
                client.V1Container(
                    name="main",
                    image="registry.invalid/train:1",
                    resources=client.V1ResourceRequirements(limits={"amd.com/gpu": "1"}),
                )
            ],
        ),
    )
    h.core.create_namespaced_pod("default", pod)
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "registry.invalid/train:1"'}
    status = {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "main",
                "image": "registry.invalid/train:1",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": waiting},
            }
        ],
    }
    h.core.patch_namespaced_pod_status("unpulled", "default", {"status": status})
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    assert "default/unpulled (Pending, ImagePullBackOff: it never starts" in outcome.reason
    assert _modes(h.info) == {("SPX", "NPS1")}


def test_evicting_gpu_pods_lets_the_apply_go_on(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps1"}, quiesceTimeoutSeconds=20)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="trainer", namespace="default"),
        spec=client.V1PodSpec(
            node_name=NODE,
            containers=[
                client.V1Container(
                    name="main",
                    image="x",
                    resources=client.V1ResourceRequirements(limits={"amd.com/gpu": "2"}),
                )
            ],
        ),
    )
    h.core.create_namespaced_pod("default", pod)
    done = threading.Event()

    def kubelet() -> None:
        # What the kubelet does for a deleted pod: stop it, then remove the object (grace 0).
        while not done.wait(0.05):
            pods = h.core.list_namespaced_pod("default").items
            for item in pods:
                if item.metadata.deletion_timestamp is not None:
                    h.core.delete_namespaced_pod(item.metadata.name, "default", grace_period_seconds=0)

    thread = threading.Thread(target=kubelet, daemon=True)
    thread.start()
    try:
        assert h.agent(evict_gpu_pods=True).run_once().state is State.SUCCESS
    finally:
        done.set()
        thread.join()
    assert not h.core.list_namespaced_pod("default").items


def test_restart_mid_apply_resumes_and_never_stays_applying(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})
    agent = h.agent()
    # The pod died after pausing the operands and writing GPU 0: put the node in that state.
    profile = next(p for p in h.config.profiles if p.name == "cpx-nps4")
    progress = Progress(profile="cpx-nps4", digest=profile_digest(profile), phase="applying", started=0.0)
    h.core.patch_node(
        NODE,
        {"metadata": {"labels": {DP: PAUSED, ME: PAUSED, STATE_LABEL: "applying"},
                      "annotations": {PROGRESS_ANNOTATION: progress.dump(), PAUSE.annotation: f"{DP},{ME}"}}},
    )  # fmt: skip
    AmdSysfsBackend(h.info.root, writer=None).set_partition_mode("0", "cpx")
    del agent
    h.restart()
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS
    node = h.node()
    assert node.labels[STATE_LABEL] == "success" and PROGRESS_ANNOTATION not in node.annotations
    assert {k: node.labels[k] for k in DEPLOY} == DEPLOY
    assert _modes(h.info) == {("CPX", "NPS4")}
    assert h.events()[0] == "ConfigResumed"


def test_restart_after_the_label_changed_rolls_the_pause_back(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "spx-nps1"})
    progress = Progress(profile="cpx-nps4", digest="0" * 16, phase="quiescing", started=0.0)
    h.core.patch_node(
        NODE,
        {
            "metadata": {
                "labels": {DP: PAUSED},
                "annotations": {PROGRESS_ANNOTATION: progress.dump(), PAUSE.annotation: DP},
            }
        },
    )
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS and not outcome.changed
    node = h.node()
    assert node.labels[DP] == "true" and PROGRESS_ANNOTATION not in node.annotations
    assert "ConfigRolledBack" in h.events()
    assert json.loads(node.annotations["gpuop.dev/gpu-config-result"])["profile"] == "spx-nps1"


def test_a_failing_driver_reload_is_failed_with_its_stderr_and_operands_restored(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})
    hostfakes.fail(h.info.root, "modprobe", "modprobe: FATAL: Module amdgpu is in use.")
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    reason = h.node().annotations[REASON_ANNOTATION]
    assert "`modprobe -r amdgpu` failed (exit 1): modprobe: FATAL: Module amdgpu is in use." in reason
    node = h.node()
    assert {k: node.labels[k] for k in DEPLOY} == DEPLOY and PROGRESS_ANNOTATION not in node.annotations
    assert h.events()[-2:] == ["ReloadingDriver", "ConfigFailed"]
    # Usable: the driver is still loaded, the GPUs readable (CPX went in; NPS4 still only requested).
    assert _modes(h.info) == {("CPX", "NPS1")}


def test_with_driver_reload_off_a_memory_change_fails_saying_so(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})
    h.gpus.reloader = None  # --no-driver-reload
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    assert "takes effect at a driver reload, and reloading the driver is off" in outcome.reason
    assert hostfakes.recorded(h.info.root) == []
    # A compute-only change needs no reload and still applies.
    h.label(**{PROFILE: "cpx-nps1"})
    assert h.agent().run_once().state is State.SUCCESS


def test_restart_in_the_middle_of_a_reload_loads_the_driver_and_finishes(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})
    profile = next(p for p in h.config.profiles if p.name == "cpx-nps4")
    progress = Progress(profile="cpx-nps4", digest=profile_digest(profile), phase="reloading", started=0.0)
    h.core.patch_node(
        NODE,
        {"metadata": {"labels": {DP: PAUSED, ME: PAUSED, STATE_LABEL: "applying"},
                      "annotations": {PROGRESS_ANNOTATION: progress.dump(), PAUSE.annotation: f"{DP},{ME}"}}},
    )  # fmt: skip
    # The pod died after writing CPX, requesting NPS4 and unloading the driver.
    backend = AmdSysfsBackend(h.info.root)
    for gpu in backend.enumerate():
        backend.set_partition_mode(gpu.id, "cpx_nps4")
    assert hostfakes.modprobe(h.info.root, ["-r", "amdgpu"]) == 0
    h.restart()
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS
    assert hostfakes.recorded(h.info.root) == [["modprobe", "amdgpu"]]  # the load, no second unload
    assert _modes(h.info) == {("CPX", "NPS4")} and _partitions(h.info) == 64
    node = h.node()
    assert {k: node.labels[k] for k in DEPLOY} == DEPLOY and PROGRESS_ANNOTATION not in node.annotations


def test_a_label_change_in_the_middle_of_a_reload_loads_the_driver_before_the_roll_back(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "spx-nps1"})
    progress = Progress(profile="cpx-nps4", digest="0" * 16, phase="reloading", started=0.0)
    h.core.patch_node(
        NODE,
        {
            "metadata": {
                "labels": {DP: PAUSED},
                "annotations": {PROGRESS_ANNOTATION: progress.dump(), PAUSE.annotation: DP},
            }
        },
    )
    assert hostfakes.modprobe(h.info.root, ["-r", "amdgpu"]) == 0
    h.restart()
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS and not outcome.changed
    assert hostfakes.recorded(h.info.root) == [["modprobe", "amdgpu"]]
    assert h.node().labels[DP] == "true" and "ConfigRolledBack" in h.events()


def test_gpus_that_do_not_come_back_after_the_reload_fail_it_naming_the_count(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})

    def unload_only(argv, **kwargs):  # a `modprobe amdgpu` that loads nothing (a broken module)
        args = argv[argv.index("modprobe") + 1 :]
        code = hostfakes.modprobe(h.info.root, args) if "-r" in args else 0
        return subprocess.CompletedProcess(argv, code, "", "")

    h.gpus.reloader = DriverReloader(("host",), run=unload_only)
    h.gpus._sleep = lambda _seconds: None
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    assert "0 of 8 AMD GPUs back 120s after reloading amdgpu" in outcome.reason
    assert {k: h.node().labels[k] for k in DEPLOY} == DEPLOY  # operands restored, reason recorded


def test_with_amd_smi_on_the_host_auto_applies_through_it(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})
    h.use_partition_tool("auto")
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS
    assert h.kube.states() == ["pending", "quiescing", "applying", "success"]
    assert _modes(h.info) == {("CPX", "NPS4")} and _partitions(h.info) == 64
    calls = hostfakes.recorded(h.info.root)
    assert calls[0] == ["amd-smi", "version"]  # auto: is the tool there?
    sets = [c for c in calls if c[:2] == ["amd-smi", "set"]]
    gpus = sorted({c[3] for c in sets})
    assert len(gpus) == 8 and sets[:2] == [
        ["amd-smi", "set", "--gpu", gpus[0], "--compute-partition", "CPX"],
        ["amd-smi", "set", "--gpu", gpus[0], "--memory-partition", "NPS4"],
    ]
    assert len(sets) == 16  # CPX and NPS4 per GPU; nothing by sysfs beside it
    # The NPS4 requests wait for the driver, reloaded once for all GPUs, as with the sysfs files.
    assert calls[-2:] == [["modprobe", "-r", "amdgpu"], ["modprobe", "amdgpu"]]


def test_amd_smi_chosen_but_not_installed_fails_naming_it_and_restores_the_operands(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps4"})
    hostfakes.absent(h.info.root, "amd-smi")
    h.use_partition_tool("amd-smi")
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    node = h.node()
    reason = node.annotations[REASON_ANNOTATION]
    assert "amd-smi is not installed on the host" in reason and "via amd-smi set --gpu" in reason
    assert {k: node.labels[k] for k in DEPLOY} == DEPLOY  # operands back
    assert _modes(h.info) == {("SPX", "NPS1")}
    # auto, with the tool absent, writes the sysfs files instead (a failed profile is tried again
    # when the label names another one).
    tried = [c for c in hostfakes.recorded(h.info.root) if c[:2] == ["amd-smi", "set"]]
    assert len(tried) == 1  # the first write failed; nothing after it
    h.use_partition_tool("auto")
    h.label(**{PROFILE: "cpx-nps1"})
    assert h.agent().run_once().state is State.SUCCESS
    assert _modes(h.info) == {("CPX", "NPS1")}
    assert [c for c in hostfakes.recorded(h.info.root) if c[:2] == ["amd-smi", "set"]] == tried


def _dra_claim(pod: str) -> dict[str, object]:
    """A claim the scheduler allocated an MI300X partition of this node to, reserved for `pod`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{pod}-gpu", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.gpuop.dev"}}]}},
    }


def test_a_dra_pod_holding_a_partition_blocks_repartitioning_until_it_leaves(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps1"}, quiesceTimeoutSeconds=30)
    custom = client.CustomObjectsApi(h.api)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="dra-trainer", namespace="default"),
        spec=client.V1PodSpec(
            node_name=NODE,
            containers=[client.V1Container(name="main", image="x")],  # no device-plugin resource
            resource_claims=[client.V1PodResourceClaim(name="gpu", resource_claim_name="dra-trainer-gpu")],
        ),
    )
    created = h.core.create_namespaced_pod("default", pod)
    custom.create_namespaced_custom_object(
        "resource.k8s.io", "v1", "default", "resourceclaims", _dra_claim("dra-trainer")
    )
    result = {"request": "gpu", "driver": "gpu.gpuop.dev", "pool": NODE, "device": "gpu-0"}
    status = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": "dra-trainer", "uid": created.metadata.uid}],
    }
    custom.patch_namespaced_custom_object_status(
        "resource.k8s.io", "v1", "default", "resourceclaims", "dra-trainer-gpu", {"status": status}
    )
    seen: dict[str, object] = {}
    done = threading.Event()

    def workload_leaves() -> None:
        # Once the agent waits (quiescing), the pod still runs on the unchanged GPUs; then it ends
        # and the claim is released, as the kubelet and the resource claim controller do.
        while not done.wait(0.05):
            if h.node().labels.get(STATE_LABEL) == State.QUIESCING.value:
                break
        seen["modes while the pod ran"] = _modes(h.info)
        h.core.delete_namespaced_pod("dra-trainer", "default", grace_period_seconds=0)
        custom.patch_namespaced_custom_object_status(
            "resource.k8s.io",
            "v1",
            "default",
            "resourceclaims",
            "dra-trainer-gpu",
            {"status": {"reservedFor": None}},
        )

    thread = threading.Thread(target=workload_leaves, daemon=True)
    thread.start()
    try:
        outcome = h.agent().run_once()
    finally:
        done.set()
        thread.join()
    assert seen["modes while the pod ran"] == {("SPX", "NPS1")}  # not repartitioned under it
    assert outcome.state is State.SUCCESS, outcome.reason
    assert _modes(h.info) == {("CPX", "NPS1")}


def test_the_dra_driver_is_paused_by_default_while_repartitioning(harness):
    h = harness("amd-mi300x-spx", {PROFILE: "cpx-nps1", "gpuop.dev/deploy.dra-driver": "true"})
    assert h.agent().run_once().state is State.SUCCESS
    paused = [p for p in h.kube.label_patches if p.get("gpuop.dev/deploy.dra-driver") == PAUSED]
    assert paused  # paused, then restored
    assert h.node().labels["gpuop.dev/deploy.dra-driver"] == "true"

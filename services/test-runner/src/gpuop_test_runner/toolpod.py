"""Running a vendor tool in its tools image: one Pod per command, pinned to this node.

The test runner's own image carries no vendor tools (RVS and AGFHC come in AMD's test runner image,
`dcgmi` in NVIDIA's DCGM image), so a vendor recipe's command runs in a Pod of the tools image the
config names (`testRunner.toolsImage.<vendor>`): `nodeName` pins it to the node under test,
privileged with the host's `/dev` and `/sys` as the tools expect, host network so `dcgmi` reaches
the node's `nv-hostengine`. The agent polls the Pod, reads the container's output through
`pods/log` once it has terminated and deletes the Pod (also on timeout and stop). An image the node
cannot pull, or one without the tool, is `ToolMissing` naming the setting that provides the tool.

`pod_manifest` and `pod_verdict` are pure; `PodTools.run` is the I/O around them.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from gpuop_common.config.testrunner import Recipe, ToolsImages, tools_image_setting
from gpuop_common.kubejson import PODS, JsonObj, KubeJson, is_status
from gpuop_common.kubeobj import IMAGE_PULL_REASONS
from kubernetes.client.exceptions import ApiException

from gpuop_test_runner.process import LocalTools, ToolMissingError, ToolOutcome, ToolRunner

logger = logging.getLogger(__name__)

CONTAINER = "tools"
NODE_LABEL = "gpuop.dev/test-tools-node"  # every tools pod of a node: leftovers are found by it
RUN_LABEL = "gpuop.dev/test-run"
POLL_S = 0.5  # first wait between reads of the Pod; it grows to MAX_POLL_S for long runs
MAX_POLL_S = 5.0
DELETE_GRACE_S = 5  # the tool gets SIGTERM, then SIGKILL 5 s later: as for a local tool's group
# Waiting reasons of a container whose image the node cannot pull: the kubelet keeps the pod Pending
# and retries with back-off, never failing it, so the first of these is the answer (ToolMissing).
PULL_FAILURES = IMAGE_PULL_REASONS
# Reasons of a container that could not start: the image has no such executable.
START_FAILURES = frozenset({"RunContainerError", "CreateContainerError", "StartError"})


class ToolImageError(ToolMissingError):
    """The tools image cannot provide the tool; the message names the setting to change."""

    def __init__(self, executable: str, message: str) -> None:
        RuntimeError.__init__(self, message)
        self.executable = executable


def pod_name(node: str, run: str) -> str:
    """`gpuop-tools-<node>-<run>`, a valid DNS-1123 name (63 characters at most)."""
    safe = re.sub(r"[^a-z0-9-]", "-", node.lower()).strip("-")[:40].rstrip("-")
    return f"gpuop-tools-{safe}-{run}"[:63].rstrip("-")


def node_label_value(node: str) -> str:
    """The node name as a label value (63 characters, alphanumeric at both ends)."""
    return node[:63].rstrip("-_.")


def pod_manifest(
    *,
    name: str,
    node: str,
    image: str,
    argv: Sequence[str],
    run_id: str,
    runtime_class: str = "",
    pull_secrets: Sequence[str] = (),
) -> JsonObj:
    """The tools Pod: the recipe's argv in `image`, on `node`, with the host's devices."""
    spec: JsonObj = {
        "nodeName": node,
        "restartPolicy": "Never",
        "hostNetwork": True,  # dcgmi talks to the node's nv-hostengine on localhost:5555
        "hostPID": False,
        "terminationGracePeriodSeconds": DELETE_GRACE_S,
        # The node under validation is often tainted (remediation's gpu-unhealthy, a cordon):
        # the tools must run there anyway, as the test runner itself does.
        "tolerations": [{"operator": "Exists"}],
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": list(argv),
                "env": [
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                ],
                # RVS and AGFHC open /dev/kfd and /dev/dri and read PCI config space as root.
                "securityContext": {"privileged": True, "runAsUser": 0},
                "volumeMounts": [
                    {"name": "dev", "mountPath": "/dev"},
                    {"name": "sys", "mountPath": "/sys", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}},
            {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}},
        ],
    }
    if pull_secrets:  # a private registry or an air-gapped mirror: the chart's imagePullSecrets
        spec["imagePullSecrets"] = [{"name": secret} for secret in pull_secrets]
    if runtime_class:
        spec["runtimeClassName"] = runtime_class  # NVIDIA: the driver's libraries come from the runtime
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "gpuop-test-tools",
                "app.kubernetes.io/part-of": "gpuop",
                NODE_LABEL: node_label_value(node),
                RUN_LABEL: run_id,
            },
        },
        "spec": spec,
    }


def _server_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


@dataclass(frozen=True)
class PodVerdict:
    """Where the tools Pod stands: still going, terminated with an exit code, or the tool missing."""

    state: str  # "running" | "terminated" | "missing"
    exit_code: int | None = None
    detail: str = ""


def pod_verdict(pod: JsonObj) -> PodVerdict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if s.get("name") == CONTAINER), None)
    state = (status or {}).get("state") or {}
    waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
    if waiting.get("reason") in PULL_FAILURES | START_FAILURES:
        return PodVerdict("missing", detail=f"{waiting['reason']}: {waiting.get('message', '')}".strip())
    if terminated:
        if terminated.get("reason") in START_FAILURES:
            return PodVerdict("missing", detail=f"{terminated['reason']}: {terminated.get('message', '')}")
        return PodVerdict("terminated", exit_code=int(terminated.get("exitCode", 1)))
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":  # failed before any container state (admission refused, evicted)
        reason = (pod.get("status") or {}).get("reason", "Failed")
        return PodVerdict(
            "terminated", exit_code=None, detail=f"{reason}: {pod['status'].get('message', '')}"
        )
    return PodVerdict("running")


class PodTools:
    """Runs a recipe's commands as Pods of one tools image on this node (see the module doc)."""

    def __init__(
        self,
        kube: KubeJson,
        *,
        node: str,
        namespace: str,
        image: str,
        setting: str,
        runtime_class: str = "",
        pull_secrets: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.node = node
        self.namespace = namespace
        self.image = image
        self.setting = setting
        self.runtime_class = runtime_class
        self.pull_secrets = tuple(pull_secrets)
        self.clock = clock

    def describe(self) -> str:
        return f"in image {self.image} ({self.setting})"

    def run(
        self, argv: Sequence[str], *, timeout: float, log: TextIO, should_stop: Callable[[], bool]
    ) -> ToolOutcome:
        run = uuid.uuid4().hex[:8]
        name = pod_name(self.node, run)
        manifest = pod_manifest(
            name=name,
            node=self.node,
            image=self.image,
            argv=argv,
            run_id=run,
            runtime_class=self.runtime_class,
            pull_secrets=self.pull_secrets,
        )
        log.write(f"--- gpuop: pod {self.namespace}/{name} runs it in {self.image} ({self.setting})\n")
        log.flush()
        try:
            self.kube.create(PODS, manifest, self.namespace)
        except ApiException as exc:
            raise ToolImageError(
                argv[0],
                f"cannot start a tools pod for {argv[0]!r} in namespace {self.namespace} "
                f"({exc.status} {_server_message(exc)}); the test runner's service account needs "
                "pods create/get/list/delete and pods/log get there (charts/test-runner Role)",
            ) from exc
        try:
            return self._wait(name, argv[0], timeout=timeout, log=log, should_stop=should_stop)
        finally:
            self._delete(name)

    def _wait(
        self, name: str, executable: str, *, timeout: float, log: TextIO, should_stop: Callable[[], bool]
    ) -> ToolOutcome:
        deadline = self.clock() + timeout
        pause = POLL_S
        while True:
            if should_stop():
                return ToolOutcome(exit_code=None, output=self._log(name), aborted=True)
            if self.clock() >= deadline:
                return ToolOutcome(exit_code=None, output=self._log(name), timed_out=True)
            try:
                verdict = pod_verdict(self.kube.get(PODS, name, self.namespace))
            except ApiException as exc:
                # An API blip is no verdict: ask again, the recipe's timeout bounds the wait.
                logger.warning("cannot read the tools pod", extra={"pod": name, "status": exc.status})
                time.sleep(pause)
                continue
            if verdict.state == "missing":
                raise ToolImageError(
                    executable,
                    f"{executable!r} cannot run from the tools image {self.image} on node {self.node} "
                    f"({verdict.detail}); set {self.setting} to an image with {executable} that the "
                    "node can pull (a mirror for air-gapped registries)",
                )
            if verdict.state == "terminated":
                output = self._log(name)
                log.write(output)
                if verdict.detail:
                    log.write(f"--- gpuop: pod {name}: {verdict.detail}\n")
                log.flush()
                return ToolOutcome(exit_code=verdict.exit_code, output=output)
            # Seconds matter at the start (an image already pulled, a short recipe); a burn-in of
            # an hour needs no 7,200 reads. The stop flag is checked as often as the Pod is read.
            time.sleep(min(pause, max(0.0, deadline - self.clock())))
            pause = min(MAX_POLL_S, pause * 1.5)

    def _log(self, name: str) -> str:
        try:
            return self.kube.text(PODS.path(self.namespace, name, "log"), query={"container": CONTAINER})
        except ApiException as exc:
            # A container that never started has no log; what it printed is then nothing.
            logger.info("no tools pod log", extra={"pod": name, "status": exc.status})
            return ""

    def _delete(self, name: str) -> None:
        try:
            self.kube.delete(PODS, name, self.namespace, grace_period_seconds=DELETE_GRACE_S)
        except ApiException as exc:
            if not is_status(exc, 404):
                logger.warning("cannot delete the tools pod", extra={"pod": name, "status": exc.status})

    def remove_leftovers(self) -> list[str]:
        """Delete this node's tools Pods a previous agent left (it was killed mid-run)."""
        pods, _ = self.kube.list(
            PODS, self.namespace, labelSelector=f"{NODE_LABEL}={node_label_value(self.node)}"
        )
        names = [str(p["metadata"]["name"]) for p in pods]
        for name in names:
            self._delete(name)
        return names


@dataclass(frozen=True)
class PodSite:
    """Where tools pods go: the API, this node, the agent's namespace, the runtime class (NVIDIA)."""

    kube: KubeJson
    node: str
    namespace: str
    runtime_class: str = ""
    pull_secrets: tuple[str, ...] = ()


def tools_for(recipe: Recipe, images: ToolsImages, *, local_path: str, site: PodSite | None) -> ToolRunner:
    """Where a recipe's tool runs: in its vendor's tools image when one is set and pods can be made
    here, else on this host; a missing local tool then names the setting that would provide it."""
    vendor, image = images.for_recipe(recipe)
    if not vendor:
        return LocalTools(local_path)
    setting = tools_image_setting(vendor)
    if image and site is not None:
        return PodTools(
            site.kube,
            node=site.node,
            namespace=site.namespace,
            image=image,
            setting=setting,
            runtime_class=site.runtime_class,
            pull_secrets=site.pull_secrets,
        )
    if image:
        hint = (
            f"{setting} ({image}) runs only with cluster access (--node-name, a kubeconfig, "
            "--tools-namespace); or install the tool on this host"
        )
    else:
        hint = f"{setting} is empty (tools from this host): set it to an image that has the tool"
    return LocalTools(local_path, hint)

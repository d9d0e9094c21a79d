"""One Pod on a `process`-mode node: its containers as local processes, from start to deletion.

A worker thread owns the pod: it resolves argv/env/volumes once, starts containers, restarts them per
`restartPolicy` with a short crash-loop backoff, runs startup/liveness/readiness probes with kubelet
timing (`probestate`: a probe kills no sooner than a real kubelet would), posts the kubelet's
`Unhealthy`/`Killing` Events, refreshes configMap volumes when the ConfigMap changes, and patches
the pod's status whenever what a user would see changes. On deletion it sends SIGTERM, waits the
(capped) grace period, SIGKILLs, and removes the Pod.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from gpuop_common.kube import EventRecorder, EventType, ObjectRef

from gpuop_sim.crilog import instance_log, pod_dir_name, read_content
from gpuop_sim.workloads.kubeapi import PODS, SERVICEACCOUNTS, KubeRest, is_status
from gpuop_sim.workloads.objects import Obj, meta, name_of, namespace_of, spec_of
from gpuop_sim.workloads.simkubelet.containermode import (
    ContainerPlan,
    ContainerRun,
    resolve_image_container,
    runc_id,
)
from gpuop_sim.workloads.simkubelet.devices import DeviceAllocator, admit_devices
from gpuop_sim.workloads.simkubelet.identity import RunIdentity, image_user, run_identity
from gpuop_sim.workloads.simkubelet.imagepull import PullBackOff, backoff_message
from gpuop_sim.workloads.simkubelet.incluster import access_files, pod_kubeconfig, service_env, token_request
from gpuop_sim.workloads.simkubelet.ocispec import Mount
from gpuop_sim.workloads.simkubelet.podspec import (
    ContainerConfigError,
    PodContext,
    build_env,
    container_mounts,
    resolve_argv,
    rewrite_path,
    volume_dirs,
)
from gpuop_sim.workloads.simkubelet.probes import run_probe
from gpuop_sim.workloads.simkubelet.probestate import (
    ContainerProbes,
    ProbeKind,
    ProbeSpecError,
    ProbeTiming,
    container_probe_timings,
)
from gpuop_sim.workloads.simkubelet.process import ContainerProcess, container_argv
from gpuop_sim.workloads.simkubelet.runc import START_ERROR_CODE, RuncContainer, RuncEngine
from gpuop_sim.workloads.simkubelet.status import ContainerState, comparable, pod_status, qos_class_of
from gpuop_sim.workloads.simkubelet.termination import (
    TerminationSpecError,
    message_path,
    message_policy,
    read_message,
)
from gpuop_sim.workloads.simkubelet.volumes import refresh_pod_volumes

log = logging.getLogger(__name__)

_TICK = 0.1
_MAX_BACKOFF = 5.0
# How soon a refused status write is tried again: the kubelet status manager's sync period.
_STATUS_RETRY = 10.0


def restart_backoff(restart_count: int) -> float:
    """Seconds before restarting a container that has restarted `restart_count` times (the kubelet's
    CrashLoopBackOff doubling, from 0.5 s up to 5 s here where a kubelet goes 10 s up to 300 s)."""
    return float(min(0.5 * (2**restart_count), _MAX_BACKOFF))


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# Waiting reasons after which the kubelet gives the pod up instead of retrying (never an image pull:
# the pod stays Pending and the pull is retried with back-off, see imagepull).
_TERMINAL_REASONS = ("UnexpectedAdmissionError",)
# The Event a kubelet posts with an image error's own message, before its `Error: <reason>` one.
_IMAGE_EVENTS: dict[str, tuple[EventType, str]] = {
    "ErrImagePull": ("Warning", "Failed"),
    "ImagePullBackOff": ("Normal", "BackOff"),
    "InvalidImageName": ("Warning", "InspectFailed"),
    "ErrImageNeverPull": ("Warning", "ErrImageNeverPull"),
}


@dataclass(frozen=True)
class NodeRuntime:
    """Everything a worker needs to know about the node it runs on."""

    name: str
    root: Path
    address: str
    env: Mapping[str, str]
    kubeconfig: Path
    scripts_dir: Path
    pods_dir: Path
    image_commands: Mapping[str, list[str]] = field(default_factory=dict)
    max_grace_seconds: float = 3.0
    # Container mode: runc runs each container from its image; None: process mode.
    engine: RuncEngine | None = None


@dataclass
class _Container:
    spec: Mapping[str, Any]
    argv: list[str]
    env: dict[str, str]
    mounts: list[tuple[str, Path]]
    state: ContainerState
    log_dir: Path  # one CRI log file per instance, named by its restart count (crilog)
    timings: Mapping[ProbeKind, ProbeTiming]
    termination_file: Path  # the host file behind the container's terminationMessagePath
    termination_policy: str
    identity: RunIdentity
    own_args_from: int = 0  # argv[own_args_from:] came from the pod (process mode rewrites paths there)
    plan: ContainerPlan | None = None  # container mode: the image, args and mounts
    process: ContainerProcess | None = None
    probes: ContainerProbes | None = None  # this run's probe counters; a restart starts new ones
    restart_at: float = 0.0
    finished: bool = False


class PodWorker:
    """Runs one pod; `update()` feeds it newer versions of the Pod object, `stop()` ends it."""

    def __init__(
        self,
        runtime: NodeRuntime,
        pod: Obj,
        rest: KubeRest,
        lookup: Callable[[str], Mapping[str, Obj]],
        devices: DeviceAllocator | None = None,
        *,
        node_up: threading.Event | None = None,
    ) -> None:
        self.runtime = runtime
        if node_up is None:
            node_up = threading.Event()
            node_up.set()
        self._node_up = node_up  # cleared while the node reboots: no container starts then
        self._reboot_requests: list[threading.Event] = []
        self._devices = devices
        self._allocated = False
        self.rest = rest
        self._lookup = lookup  # "configmaps"/"secrets" -> {"ns/name": obj}
        self._pod = pod
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._delete_pod = False
        self.uid = str(meta(pod).get("uid", ""))
        self.pod_dir = runtime.pods_dir / pod_dir_name(namespace_of(pod), name_of(pod), self.uid)
        self._containers: list[_Container] = []
        self._last_status: Obj | None = None
        self._refused_status: Obj | None = None  # the last status the server refused (422)
        self._retry_refused_at = 0.0
        self._refused_message = ""
        self._start_time = utc_now()
        self._volume_versions: dict[str, str] = {}
        self._config_error_reported = ""  # the last config error posted as an Event
        self._pulls = PullBackOff()
        self._events = EventRecorder(rest.api_client, "kubelet", host=runtime.name)
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pod-{name_of(pod)}", daemon=True)

    # -- control ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def update(self, pod: Obj) -> None:
        with self._lock:
            self._pod = pod
        if meta(pod).get("deletionTimestamp"):
            self.stop(delete_pod=True)

    def stop(self, *, delete_pod: bool) -> None:
        self._delete_pod = self._delete_pod or delete_pod
        self._stop.set()

    def request_reboot(self) -> threading.Event:
        """The node goes down: every running container dies; the returned event is set once done."""
        done = threading.Event()
        with self._lock:
            self._reboot_requests.append(done)
        if self.finished.is_set():
            done.set()
        return done

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def pod(self) -> Obj:
        with self._lock:
            return self._pod

    def earliest_probe_kills(self) -> dict[str, float | None]:
        """Per running container, the soonest (time.monotonic()) its probes may kill it; None: never."""
        return {c.state.name: c.probes.earliest_kill() for c in self._containers if c.probes is not None}

    # -- main loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._prepare_until_ready()
            while not self._stop.is_set():
                self._handle_reboots()
                self._tick()
                if all(c.finished for c in self._containers):
                    break
                self._stop.wait(_TICK)
            if not self._stop.is_set():
                self._report(self._final_phase())
            self._idle_until_stopped()
        except Exception:
            log.exception(
                "pod %s/%s: simulated kubelet worker failed", namespace_of(self.pod), name_of(self.pod)
            )
        finally:
            self._shutdown()
            self.finished.set()
            self._handle_reboots()

    def _prepare_until_ready(self) -> None:
        """Resolve the containers; config errors are retried, image pulls after the kubelet's image
        back-off (the pod stays Pending meanwhile, as on a kubelet)."""
        while not self._stop.is_set():
            try:
                self._wait_pull_backoff()
                self._prepare()
                return
            except ContainerConfigError as error:
                if error.reason == "ErrImagePull":
                    self._pulls.failed(self._image_of(error.container), time.monotonic())
                self._report_config_error(error)
                states = [
                    ContainerState(
                        str(c.get("name")), str(c.get("image")), reason=error.reason, message=error.message
                    )
                    for c in spec_of(self.pod).get("containers") or []
                ]
                if error.reason in _TERMINAL_REASONS:
                    self._patch(
                        pod_status(
                            "Failed",
                            states,
                            self.runtime.address,
                            self._start_time,
                            utc_now(),
                            qos_class=qos_class_of(self.pod),
                            reason=error.reason,
                            message=error.message,
                        )
                    )
                    self._idle_until_stopped()
                    return
                pending = pod_status(
                    "Pending",
                    states,
                    self.runtime.address,
                    self._start_time,
                    utc_now(),
                    qos_class=qos_class_of(self.pod),
                )
                self._patch(pending)
                for _ in range(int(1.0 / _TICK)):
                    self._handle_reboots()  # nothing runs yet: acknowledge at once
                    if self._stop.wait(_TICK):
                        break

    def _image_of(self, container: str) -> str:
        specs = spec_of(self.pod).get("containers") or []
        return next((str(c.get("image") or "") for c in specs if c.get("name") == container), "")

    def _wait_pull_backoff(self) -> None:
        """ImagePullBackOff while an image of this pod failed to pull and its back-off runs."""
        specs = spec_of(self.pod).get("containers") or []
        image = self._pulls.backing_off([str(c.get("image") or "") for c in specs], time.monotonic())
        if image:
            container = next(str(c.get("name") or "") for c in specs if str(c.get("image") or "") == image)
            raise ContainerConfigError("ImagePullBackOff", backoff_message(image), container)

    def _report_config_error(self, error: ContainerConfigError) -> None:
        """The kubelet's `Failed` Event for a container it could not create; once per message here,
        where a kubelet posts it at every sync and the Event count goes up."""
        if error.message == self._config_error_reported:
            return
        if error.reason == "ContainerCreating":  # a volume the kubelet could not set up
            self._config_error_reported = error.message
            self._event("", "Warning", "FailedMount", error.message)
            return
        if error.reason not in (
            "CreateContainerConfigError",
            "CreateContainerError",
            "RunContainerError",
            *_IMAGE_EVENTS,
        ):
            return
        self._config_error_reported = error.message
        containers = [str(c.get("name")) for c in spec_of(self.pod).get("containers") or []]
        container = error.container or containers[0]
        if error.reason in _IMAGE_EVENTS:
            # The image manager's Event with the message, then the container's `Error: <reason>`.
            kind, reason = _IMAGE_EVENTS[error.reason]
            self._event(container, kind, reason, error.message)
            self._event(container, "Warning", "Failed", f"Error: {error.reason}")
            return
        self._event(container, "Warning", "Failed", f"Error: {error.message}")

    def _prepare(self) -> None:
        pod = self.pod
        volumes = volume_dirs(pod, self.runtime.root, self.pod_dir)
        self._refresh_volumes(force=True)
        server = str(self.rest.api_client.configuration.host)
        specs = list(spec_of(pod).get("containers") or [])
        # Everything that can fail and be retried comes before device admission, which must not repeat.
        resolved = []
        for spec in specs:
            where = f"spec.containers[{spec.get('name')}]"
            try:
                if self.runtime.engine is None:
                    container = self._resolve_process(spec, volumes, server)
                else:
                    container = self._resolve_image(spec, volumes, server, self.runtime.engine)
                container.timings = container_probe_timings(spec, where)
                path, policy = message_path(spec, where), message_policy(spec, where)
            except ContainerConfigError as error:
                error.container = str(spec.get("name") or "")
                raise
            except (ProbeSpecError, TerminationSpecError) as error:
                raise ContainerConfigError(
                    "CreateContainerConfigError", str(error), str(spec.get("name") or "")
                ) from error
            resolved.append((container, path, policy))
        granted = admit_devices(self._devices, self.runtime.root, (namespace_of(pod), name_of(pod)), specs)
        self._allocated = granted is not None
        for container, term_path, term_policy in resolved:
            name = container.state.name
            grant = (granted or {}).get(name)
            container.termination_file = self.pod_dir / "termination" / name / "termination-log"
            container.termination_policy = term_policy
            extra = [(term_path, container.termination_file)]
            if grant is not None:
                container.env.update(grant.env)
                extra += grant.mounts
            if container.plan is not None:
                container.plan.mounts.extend(Mount(path, host) for path, host in extra)
                continue
            mounts = sorted([*container.mounts, *extra], key=lambda m: len(m[0]), reverse=True)
            container.mounts = mounts
            own = _own_env_names(container.spec)
            cut = container.own_args_from
            container.argv = [*container.argv[:cut], *(rewrite_path(a, mounts) for a in container.argv[cut:])]
            container.env = {k: rewrite_path(v, mounts) if k in own else v for k, v in container.env.items()}
        self._containers = [container for container, _, _ in resolved]

    def _resolve_process(
        self, spec: Mapping[str, Any], volumes: Mapping[str, Path], server: str
    ) -> _Container:
        """A process-mode container: the image's console script here, container paths rewritten."""
        pod = self.pod
        ctx = PodContext(
            self.runtime.name, self.runtime.address, self._write_kubeconfig(volumes, server), self.runtime.env
        )
        mounts = container_mounts(spec, volumes)
        command = resolve_argv(spec, self.runtime.scripts_dir, self.runtime.image_commands)
        identity = run_identity(pod, spec, image_user(str(spec.get("image") or "")))
        # The Service variables first: the pod's own env may override them, as on a kubelet.
        env = {
            **service_env(server),
            **build_env(
                spec, pod, ctx, self._lookup("configmaps"), self._lookup("secrets"), home=identity.home
            ),
        }
        # The program runs as is; only the pod's own args may name container paths (rewritten later).
        argv = [*command.program, *command.args]
        return self._new_container(
            spec, argv, env, mounts, identity=identity, program_length=len(command.program)
        )

    def _resolve_image(
        self, spec: Mapping[str, Any], volumes: Mapping[str, Path], server: str, engine: RuncEngine
    ) -> _Container:
        """A container-mode container: its image from local storage (the pull), run by runc."""
        node = (self.runtime.name, self.runtime.address)
        kubeconfig = self.pod_dir / "kubeconfigs" / str(spec.get("name"))
        plan, identity, env = resolve_image_container(
            self.pod,
            spec,
            engine.images,
            volumes,
            node=node,
            server=server,
            lookup=self._lookup,
            kubeconfig=kubeconfig,
        )
        container = self._new_container(spec, plan.args, env, [], identity=identity, program_length=0)
        container.plan = plan
        return container

    def _new_container(
        self,
        spec: Mapping[str, Any],
        argv: list[str],
        env: dict[str, str],
        mounts: list[tuple[str, Path]],
        *,
        identity: RunIdentity,
        program_length: int,
    ) -> _Container:
        name = str(spec.get("name") or "")
        return _Container(
            spec=spec,
            argv=argv,
            env=env,
            mounts=mounts,
            state=ContainerState(name, str(spec.get("image") or "")),
            log_dir=self.pod_dir / "logs" / name,
            timings={},
            termination_file=Path(),
            termination_policy="File",
            identity=identity,
            own_args_from=program_length,
        )

    def _refresh_volumes(self, *, force: bool = False) -> None:
        dirs = volume_dirs(self.pod, self.runtime.root, self.pod_dir)
        refresh_pod_volumes(
            self.pod, dirs, self._lookup, self._volume_versions, force=force, token_for=self._request_token
        )

    def _request_token(self, pod: Obj, source: Mapping[str, Any]) -> str:
        """The kubelet's TokenRequest for the pod's ServiceAccount, bound to the pod."""
        account = str(spec_of(pod).get("serviceAccountName") or "default")
        path = SERVICEACCOUNTS.path(namespace_of(pod), account, "token")
        try:
            answer = self.rest.call("POST", path, body=token_request(pod, source))
        except Exception as error:
            raise ContainerConfigError("ContainerCreating", f"failed to fetch token: {error}") from error
        return str((answer.get("status") or {}).get("token") or "")

    def _write_kubeconfig(self, volumes: Mapping[str, Path], server: str) -> Path:
        """The pod's kubeconfig (absolute: containers run in their own working directory)."""
        token, ca = access_files(self.pod, volumes)
        path = (self.pod_dir / "kubeconfig").resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(pod_kubeconfig(self.pod, server, token, ca), sort_keys=False))
        path.chmod(0o644)  # readable by the container's user, as the token volume is
        return path

    # -- per tick --------------------------------------------------------------------------------
    def _tick(self) -> None:
        now = time.monotonic()
        try:
            self._refresh_volumes()
        except ContainerConfigError as error:
            log.warning("pod %s: %s", name_of(self.pod), error.message)
        policy = str(spec_of(self.pod).get("restartPolicy") or "Always")
        for container in self._containers:
            if container.finished:
                continue
            if container.process is None:
                if now >= container.restart_at and self._node_up.is_set():
                    self._start_container(container)
                continue
            code = container.process.exit_code()
            if code is None:
                self._probe(container, now)
                continue
            failure = container.process.start_failure()
            if failure is not None:
                # The runtime never started the process: the CRI's StartError, exit code 128.
                self._container_exited(
                    container, START_ERROR_CODE, policy, now, reason="StartError", message=failure
                )
                continue
            self._container_exited(container, code, policy, now)
        self._report("Running")

    def _start_container(self, container: _Container) -> None:
        log_path = instance_log(container.log_dir, container.state.restart_count)
        # Each container instance starts with an empty termination-message file, as a new mount.
        container.termination_file.parent.mkdir(parents=True, exist_ok=True)
        container.termination_file.write_bytes(b"")
        # Writable whoever the container runs as, as the kubelet makes it (0666).
        container.termination_file.chmod(0o666)
        try:
            process = self._new_process(container, log_path)
            process.start()
        except (OSError, ContainerConfigError) as error:
            container.state.state, container.state.reason = "waiting", "RunContainerError"
            container.state.message = str(error)
            container.restart_at = time.monotonic() + _MAX_BACKOFF
            return
        container.process = process
        state = container.state
        state.state, state.reason, state.message = "running", "", ""
        state.started_at = utc_now()
        state.container_id = process.container_id
        container.probes = ContainerProbes.begin(container.timings, process.started_at)
        state.started, state.ready = container.probes.started, container.probes.ready

    def _new_process(self, container: _Container, log_path: Path) -> ContainerProcess:
        engine, plan = self.runtime.engine, container.plan
        if engine is None or plan is None:
            return ContainerProcess(
                container.argv, container.env, self.pod_dir / "cwd", log_path, container.identity
            )
        restart = container.state.restart_count
        return engine.prepare(
            self.pod,
            container.spec,
            plan,
            ContainerRun(
                env=container.env,
                identity=container.identity,
                bundle=self.pod_dir / "containers" / f"{container.state.name}-{restart}",
                container_id=runc_id(self.uid, container.state.name, restart),
                log_path=log_path,
            ),
        )

    def _container_exited(
        self,
        container: _Container,
        code: int,
        policy: str,
        now: float,
        *,
        reason: str = "",
        message: str | None = None,
    ) -> None:
        state = container.state
        container.process = None
        container.probes = None
        state.ready = state.started = False
        state.exit_code = code
        state.finished_at = utc_now()
        reason = reason or ("Completed" if code == 0 else "Error")
        log_text = read_content(instance_log(container.log_dir, state.restart_count))
        if message is None:
            message = read_message(container.termination_file, container.termination_policy, code, log_text)
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        if not restart:
            state.state, state.reason, state.message = "terminated", reason, message
            container.finished = True
            return
        state.last_termination = {
            "exitCode": code,
            "reason": reason,
            "startedAt": state.started_at,
            "finishedAt": state.finished_at,
            "containerID": state.container_id,
        }
        if message:
            state.last_termination["message"] = message
        backoff = restart_backoff(state.restart_count)
        state.restart_count += 1
        state.state, state.reason = "waiting", "CrashLoopBackOff"
        state.message = f"back-off {backoff:.1f}s restarting failed container {state.name}"
        container.restart_at = now + backoff

    def _idle_until_stopped(self) -> None:
        """Nothing left to run: wait for the stop, acknowledging reboots (nothing to kill)."""
        while not self._stop.is_set():
            self._handle_reboots()
            self._stop.wait(_TICK)

    def _handle_reboots(self) -> None:
        """What a node reboot does to this pod: each running container is gone (the kubelet reports
        it terminated with reason Unknown, exit code 255); restartable ones start again once the node
        is up (restartCount + 1), under restartPolicy Never they stay terminated and the pod fails."""
        with self._lock:
            requests, self._reboot_requests = self._reboot_requests, []
        if not requests:
            return
        policy = str(spec_of(self.pod).get("restartPolicy") or "Always")
        now = time.monotonic()
        for container in self._containers:
            if container.finished:
                continue
            if container.process is None:
                container.restart_at = now  # a back-off restart starts afresh after the boot
                continue
            container.process.stop(0.0)
            self._container_exited(container, 255, policy, now, reason="Unknown")
            if not container.finished:
                container.restart_at = now
                container.state.reason = "ContainerCreating"
                container.state.message = ""
        for done in requests:
            done.set()

    def _probe(self, container: _Container, now: float) -> None:
        probes, process = container.probes, container.process
        if probes is None or process is None:
            return
        for kind in probes.due(now):
            probed_at = time.monotonic()
            ok, message = run_probe(
                container.spec[kind.field], container.spec, self.runtime.address, self._exec_runner(container)
            )
            verdict = probes.record(kind, ok, message, probed_at)
            log.debug(
                "pod %s container %s %s probe: %s", name_of(self.pod), container.state.name, kind, message
            )
            if verdict.counted_failure:
                self._event(
                    container.state.name, "Warning", "Unhealthy", f"{kind.label} probe failed: {message}"
                )
            if verdict.kill:
                self._kill_unhealthy(container, process, kind, message)
                return
        container.state.started, container.state.ready = probes.started, probes.ready

    def _kill_unhealthy(
        self, container: _Container, process: ContainerProcess, kind: ProbeKind, message: str
    ) -> None:
        """What the kubelet does when a startup or liveness probe reaches its failureThreshold."""
        name = container.state.name
        log.warning(
            "pod %s/%s container %s failed its %s probe %d times (last: %s); killing it",
            namespace_of(self.pod),
            name_of(self.pod),
            name,
            kind,
            container.timings[kind].failure_threshold,
            message,
        )
        self._event(
            container.state.name,
            "Normal",
            "Killing",
            f"Container {name} failed {kind} probe, will be restarted",
        )
        container.state.ready = False
        process.stop(self._grace())

    def _event(self, container: str, type: EventType, reason: str, message: str) -> None:
        pod = self.pod
        about = ObjectRef(
            kind="Pod",
            name=name_of(pod),
            namespace=namespace_of(pod),
            uid=self.uid,
            field_path=f"spec.containers{{{container}}}" if container else "",
        )
        self._events.record(about, reason, message, type)

    def _exec_runner(self, container: _Container) -> Callable[[list[str], float], int]:
        engine, process = self.runtime.engine, container.process
        if engine is not None and isinstance(process, RuncContainer):
            runc_container = process.id
            return lambda command, timeout: engine.exec(runc_container, command, timeout)

        def run(command: list[str], timeout: float) -> int:
            script = self.runtime.scripts_dir / Path(command[0]).name
            argv = [str(script) if script.is_file() else command[0]]
            argv += [rewrite_path(a, container.mounts) for a in command[1:]]
            argv = container_argv(container.identity, argv)
            done = subprocess.run(argv, env=container.env, capture_output=True, timeout=timeout, check=False)
            return done.returncode

        return run

    # -- reporting -------------------------------------------------------------------------------
    def _final_phase(self) -> str:
        codes = [c.state.exit_code for c in self._containers]
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"

    def _report(self, phase: str) -> None:
        status = pod_status(
            phase,
            [c.state for c in self._containers],
            self.runtime.address,
            self._start_time,
            utc_now(),
            qos_class=qos_class_of(self.pod),
        )
        self._patch(status)

    def _patch(self, status: Obj) -> None:
        if self._last_status is not None and comparable(self._last_status) == comparable(status):
            return
        refused = self._refused_status
        if (
            refused is not None
            and comparable(refused) == comparable(status)
            and time.monotonic() < self._retry_refused_at
        ):
            return  # refused just now: retried at the kubelet status manager's pace, not every tick
        try:
            self.rest.replace_status(PODS, self.pod, status)
            self._last_status, self._refused_status, self._refused_message = status, None, ""
        except Exception as error:
            if not is_status(error, 404, 422):
                log.warning("pod %s: status update failed (%s)", name_of(self.pod), error)
            elif self._pod_gone():
                log.info(
                    "pod %s/%s (uid %s) is gone or replaced; stopping its containers",
                    namespace_of(self.pod),
                    name_of(self.pod),
                    self.uid,
                )
                self._stop.set()
            else:
                self._status_refused(status, error)

    def _pod_gone(self) -> bool:
        """Whether this worker's pod no longer exists: deleted (404), or replaced by a pod of the same
        name (another uid; the status write's uid test is what failed then)."""
        try:
            current = self.rest.get(PODS, name_of(self.pod), namespace_of(self.pod))
        except Exception as error:
            return is_status(error, 404)
        return str(meta(current).get("uid", "")) != self.uid

    def _status_refused(self, status: Obj, error: Exception) -> None:
        """The pod is still there but the server refused the status (422 Invalid): a bug on our side
        a user must see, so it is logged and posted as a Warning Event; the containers keep running."""
        self._refused_status = status
        self._retry_refused_at = time.monotonic() + _STATUS_RETRY
        message = status_error_message(error)
        if message == self._refused_message:
            return  # reported once per distinct refusal, as the kubelet's own log would repeat it
        self._refused_message = message
        pod = f"{namespace_of(self.pod)}/{name_of(self.pod)}"
        log.warning("pod %s: status update refused: %s", pod, message)
        self._event("", "Warning", "FailedStatusUpdate", f"could not write the pod's status: {message}")

    def _grace(self) -> float:
        pod = self.pod
        grace = meta(pod).get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec_of(pod).get("terminationGracePeriodSeconds", 30)
        return min(float(grace or 0), self.runtime.max_grace_seconds)

    def _shutdown(self) -> None:
        grace = self._grace()
        for container in self._containers:
            if container.process is not None:
                container.process.stop(grace)
                container.process = None
        if self._allocated and self._devices is not None:
            self._devices.release(name_of(self.pod), namespace_of(self.pod))
        if self._delete_pod:
            try:
                self.rest.delete(
                    PODS, name_of(self.pod), namespace_of(self.pod), grace_period_seconds=0, uid=self.uid
                )
            except Exception as error:
                if not is_status(error, 404, 409):
                    log.warning("pod %s: final delete failed (%s)", name_of(self.pod), error)


def status_error_message(error: Exception) -> str:
    """The API server's own message for a refused write (its Status body), else the error text."""
    body = getattr(error, "body", None)
    try:
        return str(json.loads(body)["message"]) if body else str(error)
    except (ValueError, KeyError, TypeError):
        return str(error)


def _own_env_names(container: Mapping[str, Any]) -> set[str]:
    """Env names the pod itself sets: only those may name container paths to rewrite."""
    return {str(e.get("name")) for e in container.get("env") or []}

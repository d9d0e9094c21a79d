"""One Pod on a `process`-mode node: its containers as local processes, from start to deletion.

A worker thread owns the pod: it resolves argv/env/volumes once, starts containers, restarts them per
`restartPolicy` with a short crash-loop backoff, runs readiness/liveness probes, refreshes configMap
volumes when the ConfigMap changes, and patches the pod's status whenever what a user would see
changes. On deletion it sends SIGTERM, waits the (capped) grace period, SIGKILLs, and removes the Pod.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuop_sim.crilog import instance_log, pod_dir_name
from gpuop_sim.workloads.kubeapi import PODS, KubeRest, is_status
from gpuop_sim.workloads.objects import Obj, meta, name_of, namespace_of, spec_of
from gpuop_sim.workloads.simkubelet.devices import DeviceAllocator, admit_devices
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
from gpuop_sim.workloads.simkubelet.process import ContainerProcess
from gpuop_sim.workloads.simkubelet.status import ContainerState, comparable, pod_status
from gpuop_sim.workloads.simkubelet.volumes import refresh_pod_volumes

log = logging.getLogger(__name__)

_TICK = 0.1
_MAX_BACKOFF = 5.0


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# Waiting reasons after which the kubelet gives the pod up instead of retrying.
_TERMINAL_REASONS = ("ErrImagePull", "UnexpectedAdmissionError")


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


@dataclass
class _Container:
    spec: Mapping[str, Any]
    argv: list[str]
    env: dict[str, str]
    mounts: list[tuple[str, Path]]
    state: ContainerState
    log_dir: Path  # one CRI log file per instance, named by its restart count (crilog)
    process: ContainerProcess | None = None
    restart_at: float = 0.0
    next_readiness: float = 0.0
    next_liveness: float = 0.0
    readiness_failures: int = 0
    liveness_failures: int = 0
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
    ) -> None:
        self.runtime = runtime
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
        self._start_time = utc_now()
        self._volume_versions: dict[str, str] = {}
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

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def pod(self) -> Obj:
        with self._lock:
            return self._pod

    # -- main loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._prepare_until_ready()
            while not self._stop.is_set():
                self._tick()
                if all(c.finished for c in self._containers):
                    break
                self._stop.wait(_TICK)
            if not self._stop.is_set():
                self._report(self._final_phase())
                self._stop.wait()
        except Exception:
            log.exception(
                "pod %s/%s: simulated kubelet worker failed", namespace_of(self.pod), name_of(self.pod)
            )
        finally:
            self._shutdown()
            self.finished.set()

    def _prepare_until_ready(self) -> None:
        """Resolve the containers; config errors are retried, an unknown image fails the pod."""
        while not self._stop.is_set():
            try:
                self._prepare()
                return
            except ContainerConfigError as error:
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
                            reason=error.reason,
                            message=error.message,
                        )
                    )
                    self._stop.wait()
                    return
                self._patch(pod_status("Pending", states, self.runtime.address, self._start_time, utc_now()))
                self._stop.wait(1.0)

    def _prepare(self) -> None:
        pod = self.pod
        ctx = PodContext(self.runtime.name, self.runtime.address, self.runtime.kubeconfig, self.runtime.env)
        configmaps, secrets = self._lookup("configmaps"), self._lookup("secrets")
        volumes = volume_dirs(pod, self.runtime.root, self.pod_dir)
        self._refresh_volumes(force=True)
        specs = list(spec_of(pod).get("containers") or [])
        # Everything that can fail and be retried comes before device admission, which must not repeat.
        resolved = []
        for spec in specs:
            mounts = container_mounts(spec, volumes)
            command = resolve_argv(spec, self.runtime.scripts_dir, self.runtime.image_commands)
            env = build_env(spec, pod, ctx, configmaps, secrets)
            resolved.append((spec, mounts, command, env))
        granted = admit_devices(self._devices, self.runtime.root, (namespace_of(pod), name_of(pod)), specs)
        self._allocated = granted is not None
        containers = []
        for spec, volume_mounts, command, env in resolved:
            name = str(spec.get("name") or "")
            grant = (granted or {}).get(name)
            mounts = volume_mounts
            if grant is not None:
                env.update(grant.env)
                mounts = sorted([*mounts, *grant.mounts], key=lambda m: len(m[0]), reverse=True)
            containers.append(
                _Container(
                    spec=spec,
                    argv=[*command.program, *(rewrite_path(a, mounts) for a in command.args)],
                    env={
                        k: rewrite_path(v, mounts) if k in _own_env_names(spec) else v for k, v in env.items()
                    },
                    mounts=mounts,
                    state=ContainerState(name, str(spec.get("image") or "")),
                    log_dir=self.pod_dir / "logs" / name,
                )
            )
        self._containers = containers

    def _refresh_volumes(self, *, force: bool = False) -> None:
        dirs = volume_dirs(self.pod, self.runtime.root, self.pod_dir)
        refresh_pod_volumes(self.pod, dirs, self._lookup, self._volume_versions, force=force)

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
                if now >= container.restart_at:
                    self._start_container(container)
                continue
            code = container.process.exit_code()
            if code is None:
                self._probe(container, now)
                continue
            self._container_exited(container, code, policy, now)
        self._report("Running")

    def _start_container(self, container: _Container) -> None:
        log_path = instance_log(container.log_dir, container.state.restart_count)
        process = ContainerProcess(container.argv, container.env, self.pod_dir / "cwd", log_path)
        try:
            process.start()
        except OSError as error:
            container.state.state, container.state.reason = "waiting", "RunContainerError"
            container.state.message = str(error)
            container.restart_at = time.monotonic() + _MAX_BACKOFF
            return
        container.process = process
        state = container.state
        state.state, state.reason, state.message = "running", "", ""
        state.started_at = utc_now()
        state.container_id = f"sim://{process.pid}"
        has_readiness = bool(container.spec.get("readinessProbe"))
        state.ready = not has_readiness
        for probe_name, attr in (("readinessProbe", "next_readiness"), ("livenessProbe", "next_liveness")):
            delay = min(float((container.spec.get(probe_name) or {}).get("initialDelaySeconds") or 0), 1.0)
            setattr(container, attr, time.monotonic() + delay)

    def _container_exited(self, container: _Container, code: int, policy: str, now: float) -> None:
        state = container.state
        container.process = None
        state.ready = False
        state.exit_code = code
        state.finished_at = utc_now()
        reason = "Completed" if code == 0 else "Error"
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        if not restart:
            state.state, state.reason, state.message = "terminated", reason, f"exited with code {code}"
            container.finished = True
            return
        state.last_termination = {
            "exitCode": code,
            "reason": reason,
            "startedAt": state.started_at,
            "finishedAt": state.finished_at,
            "containerID": state.container_id,
        }
        backoff = min(0.5 * (2**state.restart_count), _MAX_BACKOFF)
        state.restart_count += 1
        state.state, state.reason = "waiting", "CrashLoopBackOff"
        state.message = f"back-off {backoff:.1f}s restarting failed container {state.name}"
        container.restart_at = now + backoff

    def _probe(self, container: _Container, now: float) -> None:
        readiness = container.spec.get("readinessProbe")
        if readiness and now >= container.next_readiness:
            ok, message = run_probe(
                readiness, container.spec, self.runtime.address, self._exec_runner(container)
            )
            container.next_readiness = now + _period(readiness)
            container.readiness_failures = 0 if ok else container.readiness_failures + 1
            if ok:
                container.state.ready = True
            elif container.readiness_failures >= int(readiness.get("failureThreshold") or 3):
                container.state.ready = False
            log.debug("pod %s readiness: %s", name_of(self.pod), message)
        liveness = container.spec.get("livenessProbe")
        if liveness and now >= container.next_liveness and container.process is not None:
            ok, message = run_probe(
                liveness, container.spec, self.runtime.address, self._exec_runner(container)
            )
            container.next_liveness = now + _period(liveness)
            container.liveness_failures = 0 if ok else container.liveness_failures + 1
            if container.liveness_failures >= int(liveness.get("failureThreshold") or 3):
                log.info(
                    "pod %s container %s failed liveness (%s); restarting",
                    name_of(self.pod),
                    container.state.name,
                    message,
                )
                container.liveness_failures = 0
                container.process.stop(self._grace())

    def _exec_runner(self, container: _Container) -> Callable[[list[str], float], int]:
        def run(command: list[str], timeout: float) -> int:
            script = self.runtime.scripts_dir / Path(command[0]).name
            argv = [str(script) if script.is_file() else command[0]]
            argv += [rewrite_path(a, container.mounts) for a in command[1:]]
            done = subprocess.run(argv, env=container.env, capture_output=True, timeout=timeout, check=False)
            return done.returncode

        return run

    # -- reporting -------------------------------------------------------------------------------
    def _final_phase(self) -> str:
        codes = [c.state.exit_code for c in self._containers]
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"

    def _report(self, phase: str) -> None:
        status = pod_status(
            phase, [c.state for c in self._containers], self.runtime.address, self._start_time, utc_now()
        )
        self._patch(status)

    def _patch(self, status: Obj) -> None:
        if self._last_status is not None and comparable(self._last_status) == comparable(status):
            return
        try:
            self.rest.replace_status(PODS, self.pod, status)
            self._last_status = status
        except Exception as error:
            if is_status(error, 404, 422):
                # Gone, or replaced by a pod of the same name: this worker has nothing left to run.
                self._stop.set()
            else:
                log.warning("pod %s: status update failed (%s)", name_of(self.pod), error)

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


def _own_env_names(container: Mapping[str, Any]) -> set[str]:
    """Env names the pod itself sets: only those may name container paths to rewrite."""
    return {str(e.get("name")) for e in container.get("env") or []}


def _period(probe: Mapping[str, Any]) -> float:
    # Probe periods are capped so the simulated cluster reacts within a second.
    return min(max(float(probe.get("periodSeconds") or 10), 0.2), 1.0)

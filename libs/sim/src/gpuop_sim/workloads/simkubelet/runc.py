"""One container run by runc from its image, with the same start/poll/stop face as a local process.

The bundle (under the pod's dir) holds config.json (`ocispec.runtime_spec`) and `rootfs`: an overlay
whose lower layer is the image's root from local storage and whose upper layer is this instance's
own, so a container writes where it may without touching the image or another container. `runc run`
stays in the foreground: it passes its stdout/stderr pipes to the container (the reader threads of
`ContainerProcess` turn them into the CRI log), and exits with the container's exit status
(128 + the signal when one killed it). Stop is containerd's: SIGTERM to the container's init through
`runc kill`, the grace period, then SIGKILL to every process of the container. When runc itself fails
to start the process (its JSON log names the error), the exit is the CRI's `StartError` (code 128).

Needs root (namespaces, overlay and bind mounts); `SimCluster(pods="container")` refuses otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuop_sim.workloads.objects import Obj, name_of
from gpuop_sim.workloads.simkubelet.containermode import ContainerPlan, ContainerRun
from gpuop_sim.workloads.simkubelet.imagestore import LocalImages
from gpuop_sim.workloads.simkubelet.ocispec import RuntimeInputs, runtime_spec
from gpuop_sim.workloads.simkubelet.process import ContainerProcess

RUNC = shutil.which("runc") or "/usr/sbin/runc"
# linux/capability.h, by number: a privileged container gets those of them the node itself has.
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)  # fmt: skip
START_ERROR_CODE = 128


def capabilities_in(mask: int) -> frozenset[str]:
    """Capability names set in a /proc/<pid>/status capability mask."""
    return frozenset(name for bit, name in enumerate(CAPABILITIES) if mask >> bit & 1)


def node_capabilities(status: Path = Path("/proc/self/status")) -> frozenset[str]:
    """The bounding set of this simulator, i.e. of the node: sandboxed machines drop some (often
    SYS_RESOURCE), and runc cannot grant a container a capability its parent lacks."""
    for line in status.read_text().splitlines():
        if line.startswith("CapBnd:"):
            return capabilities_in(int(line.split()[1], 16))
    return frozenset()


def start_failure(runc_log: Path) -> str | None:
    """runc's own error when it could not start the container process (its JSON log), else None."""
    try:
        lines = runc_log.read_text().splitlines()
    except OSError:
        return None
    errors = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") in ("error", "fatal"):
            errors.append(str(entry.get("msg") or ""))
    return "; ".join(errors) or None


class RuncEngine:
    """A node's runc state dir and image store; makes its containers."""

    def __init__(self, state_root: Path, images: LocalImages | None = None) -> None:
        self.root = state_root
        self.images = images or LocalImages()
        self.capabilities = node_capabilities()

    def base_command(self) -> list[str]:
        return [RUNC, "--root", str(self.root)]

    def container(
        self, container_id: str, bundle: Path, config: dict[str, Any], lower: Path, log_path: Path
    ) -> RuncContainer:
        return RuncContainer(self, container_id, bundle=bundle, config=config, lower=lower, log_path=log_path)

    def prepare(
        self, pod: Obj, container: Mapping[str, Any], plan: ContainerPlan, run: ContainerRun
    ) -> RuncContainer:
        """The runc container for one run of `container` of `pod` (started by its `start()`)."""
        for mount in plan.mounts:
            # containerd makes a missing bind source (a hostPath without a type) a directory.
            if not mount.source.exists() and not mount.source.is_symlink():
                mount.source.mkdir(parents=True, exist_ok=True)
        inputs = RuntimeInputs(
            args=plan.args,
            env=run.env,
            working_dir=plan.working_dir,
            identity=run.identity,
            mounts=plan.mounts,
            rootfs=run.bundle / "rootfs",
            hostname=name_of(pod),
            node_capabilities=self.capabilities,
        )
        config = runtime_spec(pod, container, inputs)
        lower = self.images.rootfs(plan.image)
        return self.container(run.container_id, run.bundle, config, lower, run.log_path)

    def exec(self, container_id: str, argv: list[str], timeout: float) -> int:
        """An exec probe: `argv` in the running container, as its own process (user, env, caps)."""
        done = subprocess.run(
            [*self.base_command(), "exec", container_id, *argv],
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        return done.returncode

    def close(self) -> None:
        self.images.close()


class RuncContainer(ContainerProcess):
    def __init__(
        self,
        engine: RuncEngine,
        container_id: str,
        *,
        bundle: Path,
        config: dict[str, Any],
        lower: Path,
        log_path: Path,
    ) -> None:
        self.engine = engine
        self.id = container_id
        self.bundle = bundle
        self.config = config
        self.lower = lower
        self.runc_log = bundle / "runc.log"
        self._cleaned = False
        self._host_pid = not any(ns.get("type") == "pid" for ns in config["linux"]["namespaces"])
        argv = [
            *engine.base_command(),
            "--log", str(self.runc_log), "--log-format", "json",
            "run", "--bundle", str(bundle), container_id,
        ]  # fmt: skip
        super().__init__(
            argv, {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}, bundle, log_path
        )

    @property
    def container_id(self) -> str:
        return f"runc://{self.id}"

    @property
    def rootfs(self) -> Path:
        return Path(self.config["root"]["path"])

    def start(self) -> None:
        self._prepare_bundle()
        try:
            super().start()
        except OSError:
            self._cleanup()
            raise

    def _prepare_bundle(self) -> None:
        # A container of that id left by an earlier run of this state dir would refuse the start.
        subprocess.run(
            [*self.engine.base_command(), "delete", "--force", self.id], capture_output=True, check=False
        )
        shutil.rmtree(self.bundle, ignore_errors=True)
        upper, work = self.bundle / "upper", self.bundle / "work"
        for path in (upper, work, self.rootfs):
            path.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={self.lower},upperdir={upper},workdir={work}"
        done = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o", options, str(self.rootfs)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise OSError(f"cannot mount the container's root file system: {done.stderr.strip()}")
        (self.bundle / "config.json").write_text(json.dumps(self.config, indent=1))

    def start_failure(self) -> str | None:
        return start_failure(self.runc_log)

    def exit_code(self) -> int | None:
        code = super().exit_code()
        if code is not None:
            self._cleanup()
        return code

    def stop(self, grace_seconds: float) -> int | None:
        code = super().stop(grace_seconds)
        self._cleanup()
        return code

    def _signal(self, sig: signal.Signals) -> None:
        # The container's processes are runc's children's children: runc kill reaches them; a
        # SIGKILL goes to every process of the container (a hostPID one has no namespace to end).
        every = ["--all"] if sig == signal.SIGKILL or self._host_pid else []
        subprocess.run(
            [*self.engine.base_command(), "kill", *every, self.id, sig.name.removeprefix("SIG")],
            capture_output=True,
            check=False,
            timeout=30,
        )

    def _cleanup(self) -> None:
        if self._cleaned:
            return
        self._cleaned = True
        subprocess.run(
            [*self.engine.base_command(), "delete", "--force", self.id], capture_output=True, check=False
        )
        subprocess.run(["umount", "--lazy", str(self.rootfs)], capture_output=True, check=False)
        for layer in ("upper", "work"):
            shutil.rmtree(self.bundle / layer, ignore_errors=True)

"""The images a `container`-mode node can run: those in local container storage, as podman sees them.

A node pulls what its pods name; the simulator has no registry, so an image is one built into this
machine's container storage (`make images`) or it is not there at all. The kubelet's pull step is
`resolve()`: podman's own answer to `image inspect` decides, and a missing image is the kubelet's
`ErrImagePull` carrying podman's message (`ErrImageNeverPull` under `imagePullPolicy: Never`).
The image's config (Env, Entrypoint, Cmd, User, WorkingDir) comes from the same answer; its root
file system from `podman image mount` (vfs: the image's flattened directory), mounted once per
image and used read-only as the lower layer of each container's overlay (`runc.py`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuop_sim.workloads.simkubelet.imagepull import invalid_reference
from gpuop_sim.workloads.simkubelet.podspec import ContainerConfigError

PODMAN = shutil.which("podman") or "/usr/bin/podman"
# The store `make images` builds into (tools/images.py uses vfs: no overlay mounts of its own).
DEFAULT_STORAGE = ("--storage-driver", "vfs")
STORE_WAIT = 60


@dataclass(frozen=True)
class ImageConfig:
    """What the runtime takes from an image's config (the OCI image spec's `config` object)."""

    reference: str
    image_id: str
    env: tuple[tuple[str, str], ...] = ()
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    working_dir: str = ""

    @property
    def env_map(self) -> dict[str, str]:
        return dict(self.env)


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value or ())


def parse_image_config(reference: str, inspected: Mapping[str, Any]) -> ImageConfig:
    """One element of `podman image inspect`'s JSON array -> ImageConfig."""
    config = inspected.get("Config") or {}
    env = []
    for entry in config.get("Env") or []:
        name, _, value = str(entry).partition("=")
        env.append((name, value))
    return ImageConfig(
        reference=reference,
        image_id=str(inspected.get("Id") or ""),
        env=tuple(env),
        entrypoint=_strings(config.get("Entrypoint")),
        cmd=_strings(config.get("Cmd")),
        user=str(config.get("User") or ""),
        working_dir=str(config.get("WorkingDir") or ""),
    )


def pull_error(image: str, policy: str, podman_error: str) -> ContainerConfigError:
    """The kubelet's answer for an image that is not on the node and cannot be pulled."""
    if policy == "Never":
        return ContainerConfigError(
            "ErrImageNeverPull", f'Container image "{image}" is not present with pull policy of Never'
        )
    detail = podman_error.strip().removeprefix("Error: ") or "image not known"
    return ContainerConfigError("ErrImagePull", f'Failed to pull image "{image}": {detail}')


class LocalImages:
    """Local container storage through podman: inspect (the pull) and mount (the rootfs) per image."""

    def __init__(self, podman: Sequence[str] = (PODMAN, *DEFAULT_STORAGE)) -> None:
        self._podman = list(podman)
        self._lock = threading.Lock()
        self._mounted: dict[str, Path] = {}  # image id -> its flattened root

    def resolve(self, image: str, pull_policy: str = "IfNotPresent") -> ImageConfig:
        """The image's config, or the kubelet's ErrImagePull/ErrImageNeverPull when it is not here."""
        malformed = invalid_reference(image)  # refused before any pull, as in process mode
        if malformed:
            raise ContainerConfigError("InvalidImageName", malformed)
        done = self._podman_run("image", "inspect", "--format", "json", image)
        if done.returncode != 0:
            raise pull_error(image, pull_policy, done.stderr)
        found = json.loads(done.stdout or "[]")
        if not found:
            raise pull_error(image, pull_policy, "")
        return parse_image_config(image, found[0])

    def rootfs(self, config: ImageConfig) -> Path:
        """The image's root directory (mounted by podman once; read-only to every container)."""
        with self._lock:
            if config.image_id not in self._mounted:
                done = self._podman_run("image", "mount", config.image_id)
                if done.returncode != 0:
                    raise ContainerConfigError(
                        "CreateContainerError",
                        f"failed to mount image {config.reference}: {done.stderr.strip()}",
                    )
                self._mounted[config.image_id] = Path(done.stdout.strip())
            return self._mounted[config.image_id]

    def _podman_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """podman's answer; a store another tool holds locked (a build committing) is a wait, as a
        kubelet waits on its image service: ContainerCreating, retried, never a failed pull."""
        try:
            return subprocess.run(
                [*self._podman, *args], capture_output=True, text=True, check=False, timeout=STORE_WAIT
            )
        except subprocess.TimeoutExpired as error:
            raise ContainerConfigError(
                "ContainerCreating",
                f"podman {' '.join(args[:2])}: no answer within {STORE_WAIT}s (the image store is locked?)",
            ) from error

    def close(self) -> None:
        """Release every image mount this node took."""
        with self._lock:
            mounted, self._mounted = list(self._mounted), {}
        for image_id in mounted:
            subprocess.run(
                [*self._podman, "image", "unmount", image_id], capture_output=True, check=False, timeout=60
            )

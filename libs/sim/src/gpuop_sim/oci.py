"""Real OCI tools as test judges: podman with runc, a throwaway image store, CDI devices on a private view.

No Docker engine or registry is reachable on CI's machine; Debian's daemonless tools are. `Podman`
keeps each test's images and containers in its own vfs store (no overlay mounts of its own, no
daemon, nothing left in /var/lib/containers) and runs containers with runc.

`CdiHost` gives podman the host a CDI spec describes without touching the real one: podman reads
specs only from `/etc/cdi` and `/var/run/cdi` (4.3 has no `--cdi-spec-dir`) and stats each device
node's host path, so the command runs in a private mount namespace where `/etc` and `/dev` are
overlays whose upper layers hold the test's spec files and its `mknod`-made device nodes. The
resolution, the refusal of a bad spec and the nodes runc makes in the container are podman's own.

Needs root (namespaces, mknod, runc); `ensure_tools` installs podman, runc and busybox through apt.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuop_sim import apt_tools

TOOLS = {"podman": "podman", "runc": "runc", "busybox": "busybox-static", "unshare": "util-linux"}
# Podman asks runc for high nofile/nproc limits by default; raising a limit needs CAP_SYS_RESOURCE,
# which sandboxed CI machines drop. Limits below any hard limit work everywhere.
_LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
BUSYBOX_APPLETS = ("sh", "env", "find", "stat", "cat", "ls")


def ensure_tools() -> list[str]:
    return apt_tools.ensure_tools(TOOLS)


@dataclass(frozen=True)
class CdiHost:
    """Spec files and device nodes a podman command sees as the host's, in a private mount namespace."""

    workdir: Path

    @property
    def etc(self) -> Path:
        return self.workdir / "etc-upper"

    @property
    def dev(self) -> Path:
        return self.workdir / "dev-upper"

    def add_spec(self, file_name: str, spec: Mapping[str, Any]) -> None:
        (self.etc / "cdi").mkdir(parents=True, exist_ok=True)
        (self.etc / "cdi" / file_name).write_text(json.dumps(spec))

    def add_char_device(self, path: str, major: int, minor: int) -> None:
        """A character device node at the absolute `path` (`/dev/...`), made with mknod."""
        relative = Path(path).relative_to("/dev")
        node = self.dev / relative
        node.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(node, 0o666 | 0o020000, os.makedev(major, minor))

    def wrap(self, command: Sequence[str]) -> list[str]:
        """`command` run where /etc and /dev carry this host's layers on top of the real ones."""
        self.etc.mkdir(parents=True, exist_ok=True)
        self.dev.mkdir(parents=True, exist_ok=True)
        mounts = []
        for target, upper in (("/etc", self.etc), ("/dev", self.dev)):
            work = self.workdir / f"work{target.replace('/', '-')}"
            work.mkdir(exist_ok=True)
            options = f"lowerdir={target},upperdir={upper},workdir={work}"
            mounts.append(f"mount -t overlay overlay -o {shlex.quote(options)} {target}")
        script = " && ".join([*mounts, 'exec "$@"'])
        return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script, "sh", *command]


@dataclass(frozen=True)
class Podman:
    """podman with runc over a store of its own under `store`."""

    store: Path

    def command(self, *args: str) -> list[str]:
        # Its temp files beside its store, not in TMPDIR: `make test`'s is under /dev/shm, which
        # CdiHost's overlay over /dev hides from the command.
        (self.store / "tmp").mkdir(parents=True, exist_ok=True)
        return [
            "env", f"TMPDIR={self.store / 'tmp'}",
            "podman",
            "--root", str(self.store / "root"),
            "--runroot", str(self.store / "run"),
            "--storage-driver", "vfs",
            "--runtime", "runc",
            "--cgroup-manager", "cgroupfs",
            "--events-backend", "none",
            *args,
        ]  # fmt: skip

    def run_command(self, image: str, argv: Sequence[str], *, devices: Sequence[str] = ()) -> list[str]:
        device_args = [arg for device in devices for arg in ("--device", device)]
        return self.command("run", "--rm", "--network", "none", *_LIMITS, *device_args, image, *argv)

    def import_busybox(self, workdir: Path, reference: str = "localhost/gpuop-busybox:test") -> str:
        """A one-binary image (Debian's static busybox and a few applet links), imported offline."""
        root = workdir / "busybox-root"
        (root / "bin").mkdir(parents=True, exist_ok=True)
        busybox = Path("/bin/busybox")
        (root / "bin/busybox").write_bytes(busybox.read_bytes())
        (root / "bin/busybox").chmod(0o755)
        for applet in BUSYBOX_APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        archive = workdir / "busybox-root.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(root, arcname=".")
        run_checked(self.command("import", str(archive), reference))
        return reference


def run_checked(command: Sequence[str]) -> str:
    """stdout of the command; its stderr in the error when it fails."""
    done = subprocess.run(list(command), capture_output=True, text=True, check=False, timeout=240)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(command)} failed ({done.returncode}): {done.stderr[-3000:]}")
    return done.stdout


@dataclass(frozen=True)
class ContainerView:
    """What a container got from its CDI devices: the device nodes beyond a plain container's, and env."""

    devices: dict[str, tuple[int, int]]  # path -> (major, minor)
    env: dict[str, str]


@dataclass(frozen=True)
class CdiJudge:
    """Runs a busybox container with CDI devices on `host` and reports what it saw."""

    podman: Podman
    image: str
    host: CdiHost

    def _run(self, argv: Sequence[str], devices: Sequence[str]) -> str:
        return run_checked(self.host.wrap(self.podman.run_command(self.image, argv, devices=devices)))

    def _char_devices(self, devices: Sequence[str]) -> dict[str, tuple[int, int]]:
        listing = self._run(
            ["find", "/dev", "-type", "c", "-exec", "stat", "-c", "%n %t %T", "{}", "+"], devices
        )
        found = {}
        for line in listing.splitlines():
            path, major, minor = line.rsplit(" ", 2)
            found[path] = (int(major, 16), int(minor, 16))
        return found

    def container_view(self, devices: Sequence[str]) -> ContainerView:
        plain = self._char_devices(())
        added = {path: numbers for path, numbers in self._char_devices(devices).items() if path not in plain}
        output = self._run(["env"], devices)
        env = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
        return ContainerView(devices=added, env=env)

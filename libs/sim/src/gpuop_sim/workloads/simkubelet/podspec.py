"""Pure translation of a Pod's containers into local processes: argv, environment, mounted paths.

A simulated node runs a container as a console script installed next to the current Python, found
from the image's last path element (`ghcr.io/gpuop/gpuop-device-plugin:0.1.0` -> `gpuop-device-plugin`).
Volumes become host directories and container paths inside args/env are rewritten to them, so an
agent started with `--host-root=/host` sees the simulated node's root.
"""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuop_sim.workloads.objects import Obj, annotations_of, labels_of, meta, spec_of, status_of
from gpuop_sim.workloads.simkubelet.imagepull import invalid_reference

# containerd's default PATH for a container whose image sets none, after the simulated image's bin.
IMAGE_PATH = f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ContainerConfigError(ValueError):
    """The container cannot be started; `reason` is the kubelet-style waiting reason."""

    def __init__(self, reason: str, message: str, container: str = "") -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.container = container  # the container it is about, once known


def image_script_name(image: str) -> str:
    """`registry:5000/org/name:tag@sha256:...` -> `name`."""
    last = image.rsplit("/", 1)[-1]
    return last.split("@", 1)[0].split(":", 1)[0]


def image_without_tag(image: str) -> str:
    head, _, last = image.rpartition("/")
    last = last.split("@", 1)[0].split(":", 1)[0]
    return f"{head}/{last}" if head else last


@dataclass(frozen=True)
class ResolvedCommand:
    """`program` runs on this host as is; `args` come from the pod and may name container paths."""

    program: list[str]
    args: list[str]


def resolve_argv(
    container: Mapping[str, Any],
    scripts_dir: Path,
    image_commands: Mapping[str, list[str]] | None = None,
) -> ResolvedCommand:
    """The local command for a container; ContainerConfigError("InvalidImageName") for a reference
    that does not parse (refused before any pull), ("ErrImagePull") for an image that maps to nothing."""
    image = str(container.get("image") or "")
    malformed = invalid_reference(image)
    if malformed:
        raise ContainerConfigError("InvalidImageName", malformed)
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    overrides = image_commands or {}
    for candidate in (image, image_without_tag(image), image_script_name(image)):
        if candidate in overrides:
            return ResolvedCommand(list(overrides[candidate]), [*command[1:], *args])
    if command:
        script = scripts_dir / Path(command[0]).name
        if script.is_file():
            return ResolvedCommand([str(script)], [*command[1:], *args])
    script = scripts_dir / image_script_name(image)
    if image and script.is_file():
        if command:
            raise ContainerConfigError(
                "RunContainerError",
                f"command {command[0]!r} of image {image!r} is not a console script in {scripts_dir}",
            )
        return ResolvedCommand([str(script)], args)
    raise ContainerConfigError(
        "ErrImagePull",
        f'Failed to pull image "{image}": no console script "{image_script_name(image)}" in {scripts_dir}',
    )


@dataclass(frozen=True)
class PodContext:
    """Node-side facts the downward API and injected variables need."""

    node_name: str
    address: str
    kubeconfig: Path
    node_env: Mapping[str, str]


_FIELD_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref_value(pod: Obj, field_path: str, ctx: PodContext) -> str:
    simple = {
        "metadata.name": meta(pod).get("name"),
        "metadata.namespace": meta(pod).get("namespace"),
        "metadata.uid": meta(pod).get("uid"),
        "spec.nodeName": spec_of(pod).get("nodeName") or ctx.node_name,
        "spec.serviceAccountName": spec_of(pod).get("serviceAccountName"),
        "status.podIP": status_of(pod).get("podIP") or ctx.address,
        "status.hostIP": status_of(pod).get("hostIP") or ctx.address,
    }
    if field_path in simple:
        return str(simple[field_path] or "")
    match = _FIELD_PATH.match(field_path)
    if match:
        source = labels_of(pod) if match.group(1) == "labels" else annotations_of(pod)
        return source.get(match.group(2), "")
    raise ContainerConfigError("CreateContainerConfigError", f"unsupported fieldRef fieldPath {field_path!r}")


def _key_ref(ref: Mapping[str, Any], kind: str, objects: Mapping[str, Obj], namespace: str) -> str | None:
    name = str(ref.get("name") or "")
    key = str(ref.get("key") or "")
    data = _data_of(objects.get(f"{namespace}/{name}"), kind)
    if data is None or key not in data:
        if ref.get("optional"):
            return None
        what = f"{kind.lower()} {name!r}" if data is None else f"key {key!r} in {kind.lower()} {name!r}"
        raise ContainerConfigError("CreateContainerConfigError", f"{what} not found")
    return data[key]


def _data_of(obj: Obj | None, kind: str) -> dict[str, str] | None:
    """ConfigMap data (plus binaryData) or decoded Secret data."""
    if obj is None:
        return None
    if kind == "Secret":
        decoded = {
            k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()
        }
        decoded.update({k: str(v) for k, v in (obj.get("stringData") or {}).items()})
        return decoded
    data = {k: str(v) for k, v in (obj.get("data") or {}).items()}
    for k, v in (obj.get("binaryData") or {}).items():
        data[k] = base64.b64decode(v).decode(errors="replace")
    return data


def build_env(
    container: Mapping[str, Any],
    pod: Obj,
    ctx: PodContext,
    configmaps: Mapping[str, Obj],
    secrets: Mapping[str, Obj],
    *,
    home: str = "/root",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Container env: node env, then envFrom, then env entries, then the sim's injected variables.

    Later entries win, so the injected NODE_NAME/GPUOP_* values always describe the simulated node.
    `home` is the HOME the runtime gives the container's user. `base`, when given, replaces what a
    process-mode container starts from (PATH, HOME, the node env): a real image's Env.
    """
    namespace = str(meta(pod).get("namespace") or "default")
    # What the image and the runtime give every container before the pod's own env: a PATH (the
    # image's, here the interpreter's bin dir where the console scripts live, then the runtime's
    # default) and HOME. Tools a container runs (a shell, ansible's `mkdir`) are found through it.
    env: dict[str, str] = {"PATH": IMAGE_PATH, "HOME": home, **ctx.node_env} if base is None else dict(base)
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for field_name, kind, objects in (
            ("configMapRef", "ConfigMap", configmaps),
            ("secretRef", "Secret", secrets),
        ):
            ref = source.get(field_name)
            if not ref:
                continue
            data = _data_of(objects.get(f"{namespace}/{ref.get('name')}"), kind)
            if data is None and not ref.get("optional"):
                raise ContainerConfigError(
                    "CreateContainerConfigError", f"{kind.lower()} {ref.get('name')!r} not found"
                )
            env.update({f"{prefix}{k}": v for k, v in (data or {}).items()})
    for entry in container.get("env") or []:
        name = str(entry.get("name") or "")
        if "value" in entry or "valueFrom" not in entry:
            env[name] = str(entry.get("value") or "")
            continue
        value_from = entry.get("valueFrom") or {}
        value: str | None
        if "fieldRef" in value_from:
            value = field_ref_value(pod, str(value_from["fieldRef"].get("fieldPath") or ""), ctx)
        elif "configMapKeyRef" in value_from:
            value = _key_ref(value_from["configMapKeyRef"], "ConfigMap", configmaps, namespace)
        elif "secretKeyRef" in value_from:
            value = _key_ref(value_from["secretKeyRef"], "Secret", secrets, namespace)
        elif "resourceFieldRef" in value_from:
            value = "0"
        else:
            raise ContainerConfigError("CreateContainerConfigError", f"env {name!r}: unsupported valueFrom")
        if value is not None:
            env[name] = value
    env.update(
        {
            "NODE_NAME": ctx.node_name,
            "GPUOP_NODE_NAME": ctx.node_name,
            "GPUOP_KUBECONFIG": str(ctx.kubeconfig),
            "KUBECONFIG": str(ctx.kubeconfig),
            "GPUOP_BIND_ADDRESS": ctx.address,
        }
    )
    return env


def volume_dirs(pod: Obj, node_root: Path, pod_dir: Path) -> dict[str, Path]:
    """Host directory backing each pod volume."""
    dirs: dict[str, Path] = {}
    for volume in spec_of(pod).get("volumes") or []:
        name = str(volume.get("name") or "")
        host_path = (volume.get("hostPath") or {}).get("path")
        if host_path is not None:
            dirs[name] = node_root / str(host_path).lstrip("/")
        else:
            dirs[name] = pod_dir / "volumes" / name
    return dirs


def container_mounts(container: Mapping[str, Any], volumes: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """(mountPath, host path) for each volumeMount, longest mountPath first for prefix rewriting."""
    mounts = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(str(mount.get("name") or ""))
        if volume is None:
            raise ContainerConfigError(
                "CreateContainerConfigError", f"volumeMount {mount.get('name')!r} names no pod volume"
            )
        sub_path = str(mount.get("subPath") or "")
        mounts.append((str(mount.get("mountPath") or "").rstrip("/") or "/", volume / sub_path))
    return sorted(mounts, key=lambda m: len(m[0]), reverse=True)


def rewrite_path(value: str, mounts: list[tuple[str, Path]]) -> str:
    """Map a container path (or `--flag=path`) onto the host dir of the mount that holds it."""
    if value.startswith("-") and "=" in value:
        flag, _, rest = value.partition("=")
        return f"{flag}={rewrite_path(rest, mounts)}"
    for mount_path, host in mounts:
        if mount_path == "/":
            # A mount at / would capture every path; only the exact path maps.
            if value == "/":
                return str(host)
            continue
        if value == mount_path:
            return str(host)
        if value.startswith(mount_path + "/"):
            return str(host) + value[len(mount_path) :]
    return value

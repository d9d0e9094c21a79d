"""Materialise configMap, secret, downwardAPI and projected volumes the way the kubelet lays them out.

Each volume dir holds a timestamped data dir, a `..data` symlink to it and one symlink per key into
`..data`. An update writes a fresh data dir and renames a new `..data` link over the old one, which is
atomic: a reader sees the old or the new set of files, never a mix. Agents that watch their config
file for changes get the same events they get on a real node.
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuop_sim.workloads.objects import Obj, meta, namespace_of, spec_of
from gpuop_sim.workloads.simkubelet.podspec import ContainerConfigError

DATA_LINK = "..data"


def _files_for(volume: Mapping[str, Any], source: Mapping[str, str]) -> dict[str, bytes] | None:
    """Relative path -> content for one configMap/secret source; None when it is missing."""
    items = volume.get("items")
    if not items:
        return {key: value.encode() for key, value in source.items()}
    files = {}
    for item in items:
        key = str(item.get("key") or "")
        if key in source:
            files[str(item.get("path") or key)] = source[key].encode()
    return files


def configmap_files(volume: Mapping[str, Any], configmap: Obj | None) -> dict[str, bytes] | None:
    if configmap is None:
        return None
    source = {k: str(v) for k, v in (configmap.get("data") or {}).items()}
    for key, value in (configmap.get("binaryData") or {}).items():
        source[key] = base64.b64decode(value).decode(errors="replace")
    return _files_for(volume, source)


def secret_files(volume: Mapping[str, Any], secret: Obj | None) -> dict[str, bytes] | None:
    if secret is None:
        return None
    source = {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.get("data") or {}).items()}
    return _files_for(volume, source)


def write_atomic_dir(target: Path, files: Mapping[str, bytes]) -> bool:
    """Publish `files` under `target` with the `..data` swap; False when the content is unchanged."""
    target.mkdir(parents=True, exist_ok=True)
    link = target / DATA_LINK
    if link.is_symlink() and _read_dir(link) == dict(files):
        return False
    stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    data_dir = target / stamp
    for rel, content in files.items():
        path = data_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    data_dir.mkdir(exist_ok=True)
    old = os.readlink(link) if link.is_symlink() else None
    tmp = target / "..data_tmp"
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(stamp)
    tmp.replace(link)
    for rel in {r.split("/", 1)[0] for r in files}:
        entry = target / rel
        if not entry.is_symlink():
            if entry.exists():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            entry.symlink_to(f"{DATA_LINK}/{rel}")
    for entry in target.iterdir():
        # Keys that disappeared lose their top-level link.
        if entry.is_symlink() and entry.name not in (DATA_LINK, *(r.split("/", 1)[0] for r in files)):
            entry.unlink()
    if old and old != stamp:
        shutil.rmtree(target / old, ignore_errors=True)
    return True


def _read_dir(root: Path) -> dict[str, bytes]:
    out = {}
    base = root.resolve()
    for path in base.rglob("*"):
        if path.is_file():
            out[str(path.relative_to(base))] = path.read_bytes()
    return out


def _field_value(pod: Obj, path: str) -> str | None:
    """A downward-API `fieldRef.fieldPath` of the pod's metadata; None when the kubelet refuses it."""
    metadata = meta(pod)
    simple = {"metadata.name": "name", "metadata.namespace": "namespace", "metadata.uid": "uid"}
    if path in simple:
        return str(metadata.get(simple[path], ""))
    for kind in ("annotations", "labels"):
        mapping = metadata.get(kind) or {}
        if path == f"metadata.{kind}":
            # The whole map, one `key="value"` line per entry, sorted, as the kubelet writes it.
            return "\n".join(f'{key}="{value}"' for key, value in sorted(mapping.items()))
        prefix = f"metadata.{kind}['"
        if path.startswith(prefix) and path.endswith("']"):
            return str(mapping.get(path[len(prefix) : -2], ""))
    return None


def downward_api_files(pod: Obj, source: Mapping[str, Any]) -> dict[str, bytes]:
    """Files of a downwardAPI volume (metadata fields; resourceFieldRef is not modelled)."""
    files = {}
    for item in source.get("items") or []:
        field_path = str((item.get("fieldRef") or {}).get("fieldPath", ""))
        value = _field_value(pod, field_path)
        if value is None:
            raise ContainerConfigError(
                "CreateContainerConfigError",
                f"downwardAPI volume item {item.get('path')!r}: unsupported fieldPath {field_path!r}",
            )
        files[str(item.get("path", ""))] = value.encode()
    return files


# (pod, serviceAccountToken source) -> a token for the pod's ServiceAccount (the kubelet's TokenRequest).
TokenSource = Callable[[Obj, Mapping[str, Any]], str]


def projected_files(
    pod: Obj,
    projected: Mapping[str, Any],
    lookup: Callable[[str], Mapping[str, Obj]],
    token_for: TokenSource,
) -> dict[str, bytes]:
    """Every source of a projected volume in one directory, as the kubelet merges them: the
    ServiceAccount token, configMaps (kube-root-ca.crt's ca.crt for the API access volume), secrets
    and downward-API fields. A missing non-optional configMap or secret fails the mount."""
    namespace = namespace_of(pod)
    files: dict[str, bytes] = {}
    for source in projected.get("sources") or []:
        if "serviceAccountToken" in source:
            token_source = source["serviceAccountToken"]
            files[str(token_source.get("path") or "token")] = token_for(pod, token_source).encode()
        elif "configMap" in source or "secret" in source:
            kind = "configmaps" if "configMap" in source else "secrets"
            ref = source.get("configMap") or source.get("secret") or {}
            obj = lookup(kind).get(f"{namespace}/{ref.get('name')}")
            found = configmap_files(ref, obj) if kind == "configmaps" else secret_files(ref, obj)
            if found is None and not ref.get("optional"):
                raise ContainerConfigError(
                    "CreateContainerConfigError", f'{kind[:-1]} "{ref.get("name")}" not found'
                )
            files.update(found or {})
        elif "downwardAPI" in source:
            files.update(downward_api_files(pod, source["downwardAPI"]))
    return files


def refresh_pod_volumes(
    pod: Obj,
    dirs: Mapping[str, Path],
    lookup: Callable[[str], Mapping[str, Obj]],
    versions: dict[str, str],
    *,
    force: bool,
    token_for: TokenSource,
) -> None:
    """(Re)write the pod's configMap/secret volumes whose source changed since `versions` recorded it.

    `lookup("configmaps"|"secrets")` maps "ns/name" to the object; `dirs` maps volume name to its
    host dir. A missing, non-optional source is a CreateContainerConfigError, as on a kubelet.
    """
    namespace = namespace_of(pod)
    for volume in spec_of(pod).get("volumes") or []:
        name = str(volume.get("name") or "")
        target = dirs[name]
        if "hostPath" in volume:
            continue
        if "configMap" in volume or "secret" in volume:
            kind = "configmaps" if "configMap" in volume else "secrets"
            source = volume.get("configMap") or volume.get("secret") or {}
            source_name = source.get("name") or source.get("secretName")
            obj = lookup(kind).get(f"{namespace}/{source_name}")
            version = str(meta(obj).get("resourceVersion")) if obj else ""
            if not force and versions.get(name) == version:
                continue
            files = configmap_files(source, obj) if kind == "configmaps" else secret_files(source, obj)
            if files is None and not source.get("optional"):
                raise ContainerConfigError(
                    "CreateContainerConfigError", f'{kind[:-1]} "{source_name}" not found for volume {name!r}'
                )
            write_atomic_dir(target, files or {})
            versions[name] = version
        elif "downwardAPI" in volume:
            # Refreshed when the pod's metadata changes, as the kubelet does for labels/annotations.
            version = str(hash(repr(sorted((meta(pod).get("annotations") or {}).items()))))
            version += str(hash(repr(sorted((meta(pod).get("labels") or {}).items()))))
            if force or versions.get(name) != version:
                write_atomic_dir(target, downward_api_files(pod, volume["downwardAPI"]))
                versions[name] = version
        elif "projected" in volume:
            # Once per pod start here; a kubelet refreshes the token at 80 % of its lifetime (1 h).
            if force:
                try:
                    files = projected_files(pod, volume["projected"], lookup, token_for)
                except ContainerConfigError as error:
                    # The kubelet's FailedMount: the pod waits in ContainerCreating and retries.
                    raise ContainerConfigError(
                        "ContainerCreating", f'MountVolume.SetUp failed for volume "{name}" : {error.message}'
                    ) from error
                write_atomic_dir(target, files)
        else:
            target.mkdir(parents=True, exist_ok=True)
            if "emptyDir" in volume:
                # The kubelet makes an emptyDir 0777: any container user may write to it.
                target.chmod(0o777)

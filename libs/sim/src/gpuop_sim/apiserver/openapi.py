"""OpenAPI discovery: `/openapi/v3` (index + one document per group-version) and `/openapi/v2`.

kubectl (`apply` validation, `explain`) and helm (`install` validation) read these. Built-in
documents are the real kube-apiserver 1.36's own, recorded from a real server and shipped inside
this package (`data/kube-apiserver-1.36-openapi.tar.xz`, made by `tools/vendor_openapi.py`): loaded,
never retyped, and there in a clone or an installed wheel alike. A CRD's document is built the way the
real server publishes it, from the recorded DeviceConfig example: its paths and list schema
re-labelled for the CRD's group, version and names, the version's structural schema with
`metadata` pointing at ObjectMeta, and `x-kubernetes-group-version-kind`.

When the archive can't be read (a broken install), every /openapi request answers 503 naming the
cause, logged once, and `load_error()` tells the demo why helm and kubectl validation will fail.

The index and every document carry a content hash (`?hash=`), as the real server's do, so a
client's cache notices a CRD change. `/openapi/v2` is served as JSON (the built-in document plus
CRD definitions); its protobuf form is not, and a client asking only for that gets a 406.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import logging
import lzma
import re
import tarfile
from functools import cache
from pathlib import Path
from typing import Any

from gpuop_sim.apiserver.resources import ResourceRegistry, ResourceType

log = logging.getLogger(__name__)
JsonObj = dict[str, Any]
# The recorded CRD document's names, replaced by each CRD's own.
_EXAMPLE = {"group": "gpuop.dev", "version": "v1alpha1", "plural": "deviceconfigs", "kind": "DeviceConfig"}
EXAMPLE_FILE = "crd-example_apis_gpuop.dev_v1alpha1.json"
ARCHIVE = "kube-apiserver-1.36-openapi.tar.xz"


class OpenApiUnavailableError(RuntimeError):
    """The recorded OpenAPI documents could not be loaded from the package."""


def archive_path() -> Path:
    """The packaged archive: a plain file beside this module, in a clone and an installed wheel alike."""
    return Path(__file__).with_name("data") / ARCHIVE


def read_archive(packed: bytes) -> dict[str, bytes]:
    """Member name (`v2.json`, `v3/api_v1.json`) -> bytes."""
    try:
        with tarfile.open(fileobj=io.BytesIO(packed), mode="r:xz") as tar:
            out: dict[str, bytes] = {}
            for member in tar.getmembers():
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    out[member.name] = extracted.read()
            return out
    except (tarfile.TarError, lzma.LZMAError, EOFError) as error:
        raise OpenApiUnavailableError(f"not a readable tar.xz archive ({error})") from error


@cache
def _recorded() -> dict[str, bytes]:
    path = archive_path()
    try:
        members = read_archive(path.read_bytes())
    except (OSError, OpenApiUnavailableError) as error:
        detail = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise OpenApiUnavailableError(
            f"the recorded OpenAPI documents can't be loaded from {path}: {detail}; "
            "reinstall gpuop-sim (`make install` in a clone)"
        ) from error
    missing = [name for name in ("v2.json", f"v3/{EXAMPLE_FILE}", "v3/api_v1.json") if name not in members]
    if missing:
        lacks = ", ".join(missing)
        raise OpenApiUnavailableError(f"{path} lacks {lacks}: rebuild it with tools/vendor_openapi.py")
    return members


@cache
def load_error() -> str | None:
    """Why the documents can't be served (logged here, once per process), or None when they can."""
    try:
        _recorded()
    except OpenApiUnavailableError as error:
        log.error("OpenAPI unavailable: %s; /openapi answers 503, so helm and kubectl validation fail", error)
        return str(error)
    return None


@cache
def _builtin_documents() -> dict[str, bytes]:
    """`api/v1`, `apis/apps/v1`, ... -> the recorded document bytes."""
    out: dict[str, bytes] = {}
    for name, body in _recorded().items():
        if name.startswith("v3/") and name != f"v3/{EXAMPLE_FILE}":
            out["/".join(name.removeprefix("v3/").removesuffix(".json").split("_"))] = body
    return dict(sorted(out.items()))


@cache
def _example() -> JsonObj:
    loaded: JsonObj = json.loads(_recorded()[f"v3/{EXAMPLE_FILE}"])
    return loaded


@cache
def builtin_v2() -> JsonObj:
    loaded: JsonObj = json.loads(_recorded()["v2.json"])
    return loaded


@cache
def content_hash(body: bytes) -> str:
    return hashlib.sha512(body).hexdigest().upper()


def gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


# ---------------------------------------------------------------- names the real server derives
def _camel_group(group: str) -> str:
    """`gpuop.dev` -> `gpuopDev` (operation tags), `celrange.crdval.gpuop.dev` -> `celrangeCrdvalGpuopDev`."""
    words = [w for w in re.split(r"[.\-]", group) if w]
    return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:]) if words else ""


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def schema_name(group: str, version: str, kind: str) -> str:
    """`gpuop.dev`, `v1alpha1`, `DeviceConfig` -> `dev.gpuop.v1alpha1.DeviceConfig`."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _relabel(text: str, rt: ResourceType) -> str:
    ex = _EXAMPLE
    pairs = (
        (schema_name(ex["group"], ex["version"], ex["kind"]), schema_name(rt.group, rt.version, rt.kind)),
        (f"/apis/{ex['group']}/{ex['version']}/", f"/apis/{rt.group}/{rt.version}/"),
        (f"{_camel_group(ex['group'])}_{ex['version']}", f"{_camel_group(rt.group)}_{rt.version}"),
        (
            _upper(_camel_group(ex["group"])) + _upper(ex["version"]),
            _upper(_camel_group(rt.group)) + _upper(rt.version),
        ),
        (f'"group": "{ex["group"]}"', f'"group": "{rt.group}"'),
        (f'"version": "{ex["version"]}"', f'"version": "{rt.version}"'),
        (f"/{ex['plural']}", f"/{rt.plural}"),
        (f"List of {ex['plural']}.", f"List of {rt.plural}."),
        (ex["kind"], rt.kind),
    )
    for old, new in pairs:
        text = text.replace(old, new)
    return text


# ---------------------------------------------------------------- CRD documents
def _crd_paths(rt: ResourceType) -> JsonObj:
    example_paths = _example()["paths"]
    ex = _EXAMPLE
    base = f"/apis/{ex['group']}/{ex['version']}"
    wanted = {
        f"{base}/{ex['plural']}": "all-namespaces",
        f"{base}/namespaces/{{namespace}}/{ex['plural']}": "collection",
        f"{base}/namespaces/{{namespace}}/{ex['plural']}/{{name}}": "item",
        f"{base}/namespaces/{{namespace}}/{ex['plural']}/{{name}}/status": "status",
    }
    has_status = any(sub.name == "status" for sub in rt.subresources)
    paths: JsonObj = {}
    for path, role in wanted.items():
        if role == "status" and not has_status:
            continue
        if role == "all-namespaces" and not rt.namespaced:
            continue
        item = copy.deepcopy(example_paths[path])
        served_path = path
        if not rt.namespaced:
            served_path = path.replace("/namespaces/{namespace}", "")
            item = _without_namespace(item)
        paths[_relabel(served_path, rt)] = json.loads(_relabel(json.dumps(item), rt))
    return paths


def _without_namespace(item: Any) -> Any:
    """A namespaced path item as its cluster-scoped form: no namespace parameter, no `Namespaced`."""
    if isinstance(item, dict):
        out = {k: _without_namespace(v) for k, v in item.items()}
        if isinstance(out.get("operationId"), str):
            out["operationId"] = out["operationId"].replace("Namespaced", "")
        if isinstance(out.get("parameters"), list):
            out["parameters"] = [p for p in out["parameters"] if p.get("name") != "namespace"]
        return out
    if isinstance(item, list):
        return [_without_namespace(v) for v in item]
    return item


def _crd_schemas(resources: list[ResourceType]) -> JsonObj:
    example = _example()["components"]["schemas"]
    ex_name = schema_name(_EXAMPLE["group"], _EXAMPLE["version"], _EXAMPLE["kind"])
    meta_types = {k: v for k, v in example.items() if k.startswith("io.k8s.")}
    schemas: JsonObj = dict(copy.deepcopy(meta_types))
    for rt in resources:
        assert rt.custom is not None
        name = schema_name(rt.group, rt.version, rt.kind)
        schema = copy.deepcopy(rt.custom.schema)
        props = schema.setdefault("properties", {})
        for field in ("apiVersion", "kind", "metadata"):
            props[field] = copy.deepcopy(example[ex_name]["properties"][field])
        schema["properties"] = dict(sorted(props.items()))
        gvk = [{"group": rt.group, "kind": rt.kind, "version": rt.version}]
        schema["x-kubernetes-group-version-kind"] = gvk
        selectable = [{"fieldPath": path} for path in rt.custom.selectable_fields]
        if selectable:
            schema["x-kubernetes-selectable-fields"] = selectable
        schemas[name] = schema
        listing = json.loads(_relabel(json.dumps(example[f"{ex_name}List"]), rt))
        if selectable:
            listing["x-kubernetes-selectable-fields"] = selectable
        else:
            listing.pop("x-kubernetes-selectable-fields", None)
        schemas[f"{name}List"] = listing
    return dict(sorted(schemas.items()))


def crd_document(resources: list[ResourceType]) -> JsonObj:
    """The /openapi/v3 document of one CRD group-version (all its resources)."""
    paths: JsonObj = {}
    for rt in resources:
        paths.update(_crd_paths(rt))
    return {
        "openapi": _example()["openapi"],
        "info": _example()["info"],
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": _crd_schemas(resources)},
    }


# ---------------------------------------------------------------- serving
class OpenApi:
    """What /openapi/v3 and /openapi/v2 serve for the registry's current group-versions."""

    def __init__(self, registry: ResourceRegistry) -> None:
        self.registry = registry
        self._v2: tuple[str, bytes] | None = None  # (CRD signature, serialized document)

    def _custom_by_gv(self) -> dict[str, list[ResourceType]]:
        out: dict[str, list[ResourceType]] = {}
        for rt in self.registry.all():
            if rt.custom is not None:
                out.setdefault(gv_path(rt.group, rt.version), []).append(rt)
        return out

    def documents(self) -> dict[str, bytes]:
        """Every served group-version path -> its document bytes."""
        served = {
            gv_path(group, version) for group, versions in self.registry.groups() for version in versions
        }
        served.add("api/v1")
        builtin = _builtin_documents()
        docs = {path: body for path, body in builtin.items() if path in served}
        for path, resources in self._custom_by_gv().items():
            docs[path] = json.dumps(crd_document(resources), separators=(",", ":")).encode()
        return dict(sorted(docs.items()))

    def index(self) -> JsonObj:
        return {
            "paths": {
                path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={content_hash(body)}"}
                for path, body in self.documents().items()
            }
        }

    def document(self, path: str) -> bytes | None:
        return self.documents().get(path.strip("/"))

    def v2_bytes(self) -> bytes:
        """v2() serialized, rebuilt only when the set of CRD schemas changed (it is 2 MB)."""
        signature = json.dumps(
            [[rt.group, rt.version, rt.kind, rt.custom.schema] for rt in self.registry.all() if rt.custom],
            sort_keys=True,
        )
        if self._v2 is None or self._v2[0] != signature:
            self._v2 = (signature, json.dumps(self.v2(), separators=(",", ":")).encode())
        return self._v2[1]

    def v2(self) -> JsonObj:
        """The recorded v2 document plus each CRD kind's definition (what validation reads)."""
        doc = copy.deepcopy(builtin_v2())
        definitions = doc.setdefault("definitions", {})
        for resources in self._custom_by_gv().values():
            for rt in resources:
                assert rt.custom is not None
                schema = copy.deepcopy(rt.custom.schema)
                props = schema.setdefault("properties", {})
                props["metadata"] = {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
                props.setdefault("apiVersion", {"type": "string"})
                props.setdefault("kind", {"type": "string"})
                schema["x-kubernetes-group-version-kind"] = [
                    {"group": rt.group, "kind": rt.kind, "version": rt.version}
                ]
                definitions[schema_name(rt.group, rt.version, rt.kind)] = schema
        return doc


# ---------------------------------------------------------------- unknown fields of built-in kinds
@cache
def _builtin_components(gv: str) -> JsonObj:
    if load_error() is not None:
        return {}  # no recorded schema: unknown fields of built-in kinds go unchecked (logged once)
    body = _builtin_documents().get(gv)
    if body is None:
        return {}
    schemas: JsonObj = json.loads(body).get("components", {}).get("schemas", {})
    return schemas


@cache
def _kind_schema_names(gv: str) -> dict[tuple[str, str, str], str]:
    names: dict[tuple[str, str, str], str] = {}
    for name, schema in _builtin_components(gv).items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            names[(gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))] = name
    return names


def _resolve(schema: JsonObj, components: JsonObj) -> JsonObj:
    """Follow `$ref` and single-entry `allOf` (how the documents wrap a referenced type)."""
    for _ in range(8):
        if "$ref" in schema:
            schema = components.get(schema["$ref"].rsplit("/", 1)[-1], {})
        elif len(schema.get("allOf") or []) == 1 and "properties" not in schema:
            schema = schema["allOf"][0]
        else:
            return schema
    return schema


def builtin_unknown_fields(group: str, version: str, kind: str, obj: JsonObj) -> list[str] | None:
    """Remove fields a built-in kind's recorded schema does not declare, at any depth; return their
    paths (`spec.template.spec.containers[0].bogus`), or None when the kind has no recorded schema.

    As the real server's decoder: a free-form object (`type: object` with neither properties nor
    additionalProperties: FieldsV1, RawExtension) and `x-kubernetes-preserve-unknown-fields` keep
    anything.
    """
    gv = gv_path(group, version)
    name = _kind_schema_names(gv).get((group, version, kind))
    if name is None:
        return None
    components = _builtin_components(gv)
    unknown: list[str] = []
    _walk_unknown(obj, components[name], components, "", unknown)
    return unknown


def _walk_unknown(value: Any, schema: JsonObj, components: JsonObj, path: str, unknown: list[str]) -> None:
    schema = _resolve(schema, components)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and not isinstance(extra, dict):
            return  # free-form object
        for key in list(value):
            child = f"{path}.{key}" if path else key
            if props is not None and key in props:
                _walk_unknown(value[key], props[key], components, child, unknown)
            elif isinstance(extra, dict):
                _walk_unknown(value[key], extra, components, child, unknown)
            elif props is not None:
                del value[key]
                unknown.append(child)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _walk_unknown(item, schema["items"], components, f"{path}[{index}]", unknown)

"""Per-request object checks: kind/apiVersion, unknown fields (fieldValidation), validation."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

from gpuop_sim.apiserver import admission, crd, dra, errors, kinds, openapi, pods, quantity, validation
from gpuop_sim.apiserver.base import WriteOptions
from gpuop_sim.apiserver.errors import ApiError, cause
from gpuop_sim.apiserver.resources import ResourceType

JsonObj = dict[str, Any]


def check_unknown(rt: ResourceType, obj: JsonObj, opts: WriteOptions, *, on_create: bool) -> None:
    """Unknown fields: pruned (CRs) or ignored (built-ins), warned or rejected per fieldValidation."""
    before = (
        json.dumps(obj, sort_keys=True, separators=(",", ":"))
        if not on_create and opts.field_validation == "Strict"
        else ""
    )
    if rt.custom is not None:
        unknown = crd.prune(obj, rt.custom.schema)
    else:
        found = openapi.builtin_unknown_fields(rt.group, rt.version, rt.kind, obj)
        if found is None:  # no recorded schema for this kind: check the top level only
            allowed = kinds.top_level_fields(rt.kind)
            found = [k for k in obj if k not in allowed]
            for key in found:
                obj.pop(key, None)
        unknown = found
    if not unknown or opts.field_validation == "Ignore":
        return
    if opts.field_validation == "Strict":
        detail = ", ".join(f'unknown field "{u}"' for u in unknown)
        if on_create:
            raise errors.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                f"{rt.kind}: strict decoding error: {detail}"
            )
        # The update path quotes the whole patched object, as the real server does.
        msg = f"Invalid value: {validation.quote(before)}: strict decoding error: {detail}"
        raise ApiError(
            422,
            "Invalid",
            f' "" is invalid: patch: {msg}',
            {"causes": [cause("FieldValueInvalid", msg, "patch")]},
        )
    opts.warnings += [f'unknown field "{u}"' for u in unknown]


_META_TYPES: dict[str, tuple[type, str]] = {
    "name": (str, "string"),
    "generateName": (str, "string"),
    "namespace": (str, "string"),
    "uid": (str, "string"),
    "resourceVersion": (str, "string"),
    "labels": (dict, "map[string]string"),
    "annotations": (dict, "map[string]string"),
    "finalizers": (list, "[]string"),
    "ownerReferences": (list, "[]v1.OwnerReference"),
}


def _json_type(value: Any) -> str:
    for typ, name in (
        (bool, "bool"),
        (int, "number"),
        (float, "number"),
        (str, "string"),
        (list, "array"),
        (dict, "object"),
    ):
        if isinstance(value, typ):
            return name
    return "null"


def cannot_handle(rt: ResourceType, detail: str) -> ApiError:
    """The 400 a real server gives for a body that does not decode into the kind's Go type."""
    return errors.bad_request(
        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {detail}'
    )


F = TypeVar("F", bound=Callable[..., Any])


def decode_guard(method: F) -> F:
    """Turn a wrongly-typed field met while defaulting or validating into a 400, never a 500.

    The real server rejects such bodies while decoding them into Go structs; the simulator keeps
    JSON, so the mismatch surfaces when admission code touches the field."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
            rt = next((a for a in args if isinstance(a, ResourceType)), None)
            if rt is None:
                raise
            if isinstance(exc, quantity.QuantityError):
                raise cannot_handle(rt, str(exc)) from exc
            raise cannot_handle(rt, f"a field has the wrong type ({type(exc).__name__}: {exc})") from exc

    return cast(F, wrapper)


def check_kind(rt: ResourceType, obj: Any) -> JsonObj:
    if not isinstance(obj, dict):
        raise errors.bad_request(f"the object provided is unrecognized (must be of type {rt.kind})")
    kind = obj.get("kind")
    if kind and kind != rt.kind:
        raise errors.bad_request(
            f'{kind} in version "{rt.version}" cannot be handled as a {rt.kind}: converting '
            f"({rt.version}.{kind}) to ({rt.group or 'core'}.{rt.kind}): unknown conversion"
        )
    obj["kind"] = rt.kind
    obj["apiVersion"] = rt.api_version
    meta = obj.get("metadata")
    if meta is None:
        obj["metadata"] = {}
    elif not isinstance(meta, dict):
        raise cannot_handle(
            rt,
            f"json: cannot unmarshal {_json_type(meta)} into Go struct field .metadata of type v1.ObjectMeta",
        )
    else:
        for field, (want, go_type) in _META_TYPES.items():
            value = meta.get(field)
            refs_ok = (
                field != "ownerReferences"
                or not isinstance(value, list)
                or all(isinstance(r, dict) for r in value)
            )
            if value is not None and (not isinstance(value, want) or not refs_ok):
                raise cannot_handle(
                    rt,
                    f"json: cannot unmarshal {_json_type(value)} into Go struct field "
                    f"ObjectMeta.metadata.{field} of type {go_type}",
                )
    for mtime in kinds.MICROTIME_FIELDS.get(rt.kind, ()):
        cur: Any = obj
        for part in mtime:
            cur = cur.get(part) if isinstance(cur, dict) else None
        if rt.group == "" and rt.kind == "Event":
            continue  # core Events accept any RFC 3339 eventTime
        problem = admission.microtime_error(cur)
        if problem:
            raise cannot_handle(rt, problem)
    return obj


def validate_object(
    rt: ResourceType, obj: JsonObj, *, update: bool, first: list[JsonObj] | None = None
) -> None:
    """`first`: causes found by admission-time checks, reported ahead of the object's own."""
    meta = obj["metadata"]
    causes = list(first or []) + validation.validate_metadata(obj, rt.kind)
    if rt.custom is not None:
        causes += crd.validate_cr(obj, rt.custom.schema)
    causes += kind_validation(rt, obj)
    if causes:
        if update and rt.kind == "Node":
            # The real Node update path reports metadata causes four times (pinned by a transcript).
            causes = [c for c in causes for _ in range(4 if c["field"] == "metadata.labels" else 1)]
        # events.k8s.io Events are validated as core Events (the message names no group).
        raise errors.invalid(rt, meta.get("name", ""), causes, group=rt.group != "events.k8s.io")


def kind_validation(rt: ResourceType, obj: JsonObj) -> list[JsonObj]:
    if rt.kind == "Pod":
        return pods.validate_pod_spec(obj.get("spec") or {})
    if rt.kind == "Node":
        return admission.validate_node(obj)
    if rt.kind == "Event" and rt.group == "":
        return admission.validate_core_event(obj)
    if rt.kind == "Event" and rt.group == "events.k8s.io":
        return admission.validate_events_v1(obj)
    if rt.kind in ("DaemonSet", "Deployment", "ReplicaSet", "StatefulSet", "Job"):
        return pods.validate_pod_spec(
            ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}, "spec.template.spec"
        )
    if rt.kind == "CustomResourceDefinition":
        return crd.validate_crd(obj)
    if rt.group == "resource.k8s.io":
        return dra.validate(rt.kind, obj)
    return []

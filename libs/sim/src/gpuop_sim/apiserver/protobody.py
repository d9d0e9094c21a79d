"""Kubernetes protobuf bodies (`application/vnd.kubernetes.protobuf`) for the kinds clients insist on.

The wire form is the 4-byte magic `k8s\\0` followed by a `runtime.Unknown` whose `raw` is the
encoded object and whose `typeMeta` names it. helm's release storage (Secrets, or ConfigMaps with
HELM_DRIVER=configmap), `kubectl create namespace` and typed deletes (DeleteOptions) send it;
everything else arrives as JSON. The messages are ours (protos/k8s_wire.proto, `make protos`).

`decode` turns a body into the JSON object the rest of the server handles; `encode` does the
reverse for a client that accepts only protobuf. A body of any other kind, or one carrying fields
we do not declare, is refused with a 415 naming the kind: dropping data silently would hide bugs.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from google.protobuf import message as pb_message
from google.protobuf import unknown_fields
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from gpuop_sim.apiserver import errors
from gpuop_sim.apiserver._generated import k8s_wire_pb2 as wire

JsonObj = dict[str, Any]
MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"

# (apiVersion, kind) -> message class. DeleteOptions come as v1 or meta.k8s.io/v1.
MESSAGES: dict[tuple[str, str], type[pb_message.Message]] = {
    ("v1", "Secret"): wire.Secret,
    ("v1", "SecretList"): wire.SecretList,
    ("v1", "ConfigMap"): wire.ConfigMap,
    ("v1", "ConfigMapList"): wire.ConfigMapList,
    ("v1", "Namespace"): wire.Namespace,
    ("v1", "NamespaceList"): wire.NamespaceList,
    ("v1", "Status"): wire.Status,
    ("v1", "DeleteOptions"): wire.DeleteOptions,
    ("meta.k8s.io/v1", "DeleteOptions"): wire.DeleteOptions,
}
_TIME = wire.Time.DESCRIPTOR.full_name
_FIELDS_V1 = wire.FieldsV1.DESCRIPTOR.full_name


class ProtobufBodyError(ValueError):
    """A protobuf body we cannot turn into JSON faithfully; the message says why."""


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";", maxsplit=1)[0].strip().lower() == MEDIA_TYPE


def accepts_only_protobuf(accept: str) -> bool:
    """True when the Accept header names protobuf and nothing JSON can answer (JSON wins otherwise)."""
    types = [part.split(";", maxsplit=1)[0].strip().lower() for part in accept.split(",") if part.strip()]
    json_ok = any(t in ("application/json", "*/*", "application/*") for t in types)
    return MEDIA_TYPE in types and not json_ok


def _message_type(descriptor: FieldDescriptor) -> Descriptor:
    message_type = descriptor.message_type
    assert message_type is not None, descriptor.full_name
    return message_type


def _is_map(descriptor: FieldDescriptor) -> bool:
    return descriptor.type == FieldDescriptor.TYPE_MESSAGE and bool(
        _message_type(descriptor).GetOptions().map_entry
    )


# ---------------------------------------------------------------- decoding
def decode(raw: bytes) -> JsonObj:
    """The JSON object of an enveloped protobuf body (apiVersion and kind included)."""
    if not raw.startswith(MAGIC):
        raise ProtobufBodyError("the body does not start with the Kubernetes protobuf magic k8s\\0")
    envelope = wire.Unknown()
    try:
        envelope.ParseFromString(raw[len(MAGIC) :])
    except pb_message.DecodeError as exc:
        raise ProtobufBodyError(f"the protobuf envelope does not parse: {exc}") from exc
    api_version, kind = envelope.typeMeta.apiVersion, envelope.typeMeta.kind
    cls = MESSAGES.get((api_version, kind))
    if cls is None:
        raise ProtobufBodyError(f"{kind or 'an object'} ({api_version or 'no apiVersion'}) as protobuf")
    if envelope.contentEncoding:
        raise ProtobufBodyError(f"{kind} with content encoding {envelope.contentEncoding!r}")
    message = cls()
    try:
        message.ParseFromString(envelope.raw)
    except pb_message.DecodeError as exc:
        raise ProtobufBodyError(f"the {kind} inside the envelope does not parse: {exc}") from exc
    unknown = _unknown_field_paths(message, kind)
    if unknown:
        raise ProtobufBodyError(f"{kind} with fields this server does not decode ({', '.join(unknown)})")
    return {"apiVersion": api_version, "kind": kind, **to_json(message)}


def _unknown_field_paths(message: pb_message.Message, path: str) -> list[str]:
    unknown = unknown_fields.UnknownFieldSet(message)
    found = [f"{path} field {unknown[i].field_number}" for i in range(len(unknown))]
    for descriptor, value in message.ListFields():
        if descriptor.type != FieldDescriptor.TYPE_MESSAGE or _is_map(descriptor):
            continue
        children = value if descriptor.is_repeated else [value]
        for index, child in enumerate(children):
            suffix = f"[{index}]" if descriptor.is_repeated else ""
            found += _unknown_field_paths(child, f"{path}.{descriptor.name}{suffix}")
    return found


def to_json(message: pb_message.Message) -> JsonObj:
    """A message as the Kubernetes JSON form: Time as RFC 3339, bytes as base64, FieldsV1 as JSON."""
    out: JsonObj = {}
    for descriptor, value in message.ListFields():
        out[descriptor.name] = _value_to_json(descriptor, value)
    return out


def _value_to_json(descriptor: FieldDescriptor, value: Any) -> Any:
    if _is_map(descriptor):
        value_field = _message_type(descriptor).fields_by_name["value"]
        return {key: _scalar_to_json(value_field, item) for key, item in value.items()}
    if descriptor.is_repeated:
        return [_scalar_to_json(descriptor, item) for item in value]
    return _scalar_to_json(descriptor, value)


def _scalar_to_json(descriptor: FieldDescriptor, value: Any) -> Any:
    if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
        name = _message_type(descriptor).full_name
        if name == _TIME:
            return _rfc3339(value.seconds, value.nanos)
        if name == _FIELDS_V1:
            return json.loads(value.Raw or b"{}")
        return to_json(value)
    if descriptor.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def _rfc3339(seconds: int, nanos: int) -> str:
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{nanos:09d}".rstrip("0") + "Z" if nanos else stamp + "Z"


# ---------------------------------------------------------------- encoding
def encode(obj: JsonObj) -> bytes:
    """The enveloped protobuf form of a JSON object of one of MESSAGES' kinds."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    cls = MESSAGES.get((api_version, kind))
    if cls is None:
        raise ProtobufBodyError(f"{kind or 'an object'} ({api_version or 'no apiVersion'}) as protobuf")
    message = cls()
    from_json({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}, message)
    envelope = wire.Unknown(
        typeMeta=wire.TypeMeta(apiVersion=api_version, kind=kind), raw=message.SerializeToString()
    )
    return MAGIC + envelope.SerializeToString()


def from_json(obj: JsonObj, message: pb_message.Message) -> None:
    """Fill `message` from the Kubernetes JSON form; a field the message lacks is an error."""
    fields: dict[str, FieldDescriptor] = dict(message.DESCRIPTOR.fields_by_name)  # type: ignore[arg-type]
    for key, value in obj.items():
        if value is None:
            continue
        descriptor = fields.get(key)
        if descriptor is None:
            raise ProtobufBodyError(f"{message.DESCRIPTOR.name} has no field {key!r} in protobuf")
        target = getattr(message, key)
        if _is_map(descriptor):
            value_field = _message_type(descriptor).fields_by_name["value"]
            for map_key, item in value.items():
                if value_field.type == FieldDescriptor.TYPE_BYTES:
                    target[map_key] = base64.b64decode(item)
                else:
                    target[map_key] = item
        elif descriptor.is_repeated:
            for item in value:
                if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
                    _message_from_json(item, target.add())
                else:
                    target.append(item)
        elif descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            _message_from_json(value, target)
        elif descriptor.type == FieldDescriptor.TYPE_BYTES:
            setattr(message, key, base64.b64decode(value))
        else:
            setattr(message, key, value)


def _message_from_json(value: Any, target: pb_message.Message) -> None:
    target.SetInParent()  # present even when every field keeps its default (the epoch, {})
    name = target.DESCRIPTOR.full_name
    if name == _TIME:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        target.seconds = int(moment.timestamp())  # type: ignore[attr-defined]
        target.nanos = moment.microsecond * 1000  # type: ignore[attr-defined]
    elif name == _FIELDS_V1:
        target.Raw = json.dumps(value, separators=(",", ":")).encode()  # type: ignore[attr-defined]
    else:
        from_json(value, target)


def unsupported(exc: ProtobufBodyError) -> errors.ApiError:
    """The 415 a body we cannot decode gets: it names what was sent and what to do instead."""
    return errors.unsupported_media(
        f"the simulated API server decodes protobuf bodies only for Secret, ConfigMap, Namespace and "
        f"DeleteOptions; it got {exc}. Send JSON instead (kubectl apply -f <manifest> does)"
    )

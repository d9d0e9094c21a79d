"""Kubernetes `Status` error shapes, as kube-apiserver 1.36 writes them.

Every handler raises `ApiError`; the HTTP layer turns it into a JSON `Status` body. The helper
constructors keep the messages identical to the real server's (the golden transcripts pin them).
"""

from __future__ import annotations

from typing import Any, Protocol

JsonObj = dict[str, Any]


class ApiError(Exception):
    """An API failure that becomes a `kind: Status` answer with HTTP status `code`."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: JsonObj | None = None,
        *,
        metadata: JsonObj | None = None,
        text: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.metadata = metadata or {}
        # Some answers (unknown API paths) are plain text, not a Status.
        self.text = text

    def status(self) -> JsonObj:
        body: JsonObj = {"kind": "Status", "apiVersion": "v1", "metadata": dict(self.metadata)}
        body["status"] = "Failure"
        if self.message:
            body["message"] = self.message
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(qualified: ResourceRef, name: str | None, *, kind: str | None = None) -> JsonObj:
    d: JsonObj = {}
    if name:
        d["name"] = name
    if qualified.group:
        d["group"] = qualified.group
    d["kind"] = kind if kind is not None else qualified.plural
    return d


class ResourceRef(Protocol):
    """What an error message needs to name a resource; `ResourceType` satisfies it."""

    @property
    def group(self) -> str: ...
    @property
    def plural(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def qualified_plural(self) -> str: ...
    @property
    def qualified_kind(self) -> str: ...


def not_found(ref: ResourceRef, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{ref.qualified_plural} "{name}" not found', _details(ref, name))


def already_exists(ref: ResourceRef, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{ref.qualified_plural} "{name}" already exists', _details(ref, name)
    )


def conflict(ref: ResourceRef, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {ref.qualified_plural} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        _details(ref, name),
    )


def precondition_rv_conflict(ref: ResourceRef, name: str, wanted: str, actual: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {ref.kind} "{name}": the ResourceVersion in the precondition '
        f"({wanted}) does not match the ResourceVersion in record "
        f"({actual}). The object might have been modified",
        {"name": name, **({"group": ref.group} if ref.group else {}), "kind": ref.kind},
    )


def precondition_uid_conflict(ref: ResourceRef, name: str, wanted: str, actual: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {ref.kind} "{name}": Precondition failed: UID in precondition: '
        f"{wanted}, UID in object meta: {actual}",
        {"name": name, **({"group": ref.group} if ref.group else {}), "kind": ref.kind},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def cause(reason: str, message: str, field: str) -> JsonObj:
    return {"reason": reason, "message": message, "field": field}


def _summary(causes: list[JsonObj]) -> str:
    # Go's aggregate error drops repeated messages; the causes list keeps them.
    parts = list(dict.fromkeys(f"{c['field']}: {c['message']}" for c in causes))
    return parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"


def invalid(
    ref: ResourceRef, name: str, causes: list[JsonObj], *, by_plural: bool = False, group: bool = True
) -> ApiError:
    """422 Invalid; the message lists `field: message` per cause, bracketed when there are several.

    Most answers name the Kind (`DeviceConfig.gpuop.dev`); a few (a CR update without a
    resourceVersion) name the resource (`deviceconfigs.gpuop.dev`)."""
    if by_plural:
        label, kind = ref.qualified_plural, ref.plural
    else:
        label, kind = (ref.qualified_kind if group else ref.kind), ref.kind
    details: JsonObj = {}
    if name:
        details["name"] = name
    if ref.group and group:
        details["group"] = ref.group
    details["kind"] = kind
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{label} "{name}" is invalid: {_summary(causes)}', details)


def invalid_options(kind: str, causes: list[JsonObj]) -> ApiError:
    """422 on request options (DeleteOptions, ListOptions, CreateOptions, PatchOptions)."""
    return ApiError(
        422,
        "Invalid",
        f'{kind}.meta.k8s.io "" is invalid: {_summary(causes)}',
        {"group": "meta.k8s.io", "kind": kind, "causes": causes},
    )


def forbidden(ref: ResourceRef, name: str, why: str, causes: list[JsonObj] | None = None) -> ApiError:
    details = _details(ref, name)
    if causes:
        details["causes"] = causes
    return ApiError(403, "Forbidden", f'{ref.qualified_plural} "{name}" is forbidden: {why}', details)


def unsupported_media(message: str, details: JsonObj | None = None) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message, details)


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def page_not_found() -> ApiError:
    return ApiError(404, "NotFound", "404 page not found", text="404 page not found\n")


def expired(message: str, *, metadata: JsonObj | None = None) -> ApiError:
    return ApiError(410, "Expired", message, metadata=metadata)


def internal(message: str) -> ApiError:
    """500 InternalError as the real server words it: the cause carries the bare message."""
    return ApiError(
        500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
    )

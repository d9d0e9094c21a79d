"""LIST: selectors, resourceVersion semantics (Exact/NotOlderThan), limit/continue pagination."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from gpuop_sim.apiserver import errors
from gpuop_sim.apiserver.base import CoreBase, _ns_of
from gpuop_sim.apiserver.errors import cause
from gpuop_sim.apiserver.resources import ResourceType
from gpuop_sim.apiserver.selectors import (
    FIELD_LABEL_CONVERSIONS,
    FIELD_SELECTORS,
    SelectorError,
    make_predicate,
    parse_field_selector,
    parse_label_selector,
)
from gpuop_sim.apiserver.store import Stored, TooOldError

JsonObj = dict[str, Any]


class ListingMixin(CoreBase):
    def list_items(
        self, rt: ResourceType, ns: str | None, query: dict[str, str]
    ) -> tuple[list[Stored], JsonObj]:
        """Selected objects and the list metadata (resourceVersion, continue, remainingItemCount)."""
        predicate = self.selector(rt, query)
        rv_param = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        if match and not rv_param:
            raise errors.invalid_options(
                "ListOptions",
                [
                    cause(
                        "FieldValueForbidden",
                        "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                        "resourceVersionMatch",
                    )
                ],
            )
        token = query.get("continue", "")
        start_after: tuple[str, str] | None = None
        list_rv = self.store.rv
        items: list[Stored]
        try:
            if token:
                list_rv, start_after = _decode_continue(token)
                items = self.store.snapshot(rt.key, list_rv, ns)
            elif match == "Exact":
                list_rv = int(rv_param)
                items = self.store.snapshot(rt.key, list_rv, ns)
            else:
                items = self.store.items(rt.key, ns)
        except TooOldError as exc:
            if token:
                raise errors.expired(
                    "The provided continue parameter is too old to display a "
                    "consistent list result. You can start a "
                    "new list without the continue parameter, or use the "
                    "continue token in this response to retrieve "
                    "the remainder of the results. Continuing with the "
                    "provided token results in an inconsistent list "
                    "- objects that were created, modified, or deleted between "
                    "the time the first chunk was returned "
                    "and now may show up in the list.",
                    metadata={"continue": _encode_continue(self.store.rv, start_after or ("", ""))},
                ) from exc
            raise errors.expired("The resourceVersion for the provided list is too old.") from exc
        except ValueError as exc:
            raise errors.bad_request(f"invalid resource version or continue token: {exc}") from exc
        if start_after is not None:
            items = [s for s in items if (_ns_of(s.obj), s.obj["metadata"]["name"]) > start_after]
        if predicate is not None:
            items = [s for s in items if predicate(s.obj)]
        meta: JsonObj = {"resourceVersion": str(list_rv)}
        limit = int(query.get("limit") or 0)
        if limit > 0 and len(items) > limit:
            last = items[limit - 1].obj
            meta["continue"] = _encode_continue(list_rv, (_ns_of(last), last["metadata"]["name"]))
            if predicate is None:
                meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return items, meta

    def selector(self, rt: ResourceType, query: dict[str, str]) -> Callable[[JsonObj], bool] | None:
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            supported = rt.custom.selectable_fields if rt.custom else FIELD_SELECTORS.get(rt.key, ())
            fields = parse_field_selector(
                query.get("fieldSelector", ""),
                supported,
                custom=rt.custom is not None,
                conversion=FIELD_LABEL_CONVERSIONS.get(rt.key) if rt.custom is None else None,
            )
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from exc
        return make_predicate(labels, fields)


def list_body(rt: ResourceType, items: list[JsonObj], meta: JsonObj) -> JsonObj:
    drop = rt.custom is None
    out = [{k: v for k, v in i.items() if not (drop and k in ("kind", "apiVersion"))} for i in items]
    return {"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta, "items": out}


def _encode_continue(rv: int, start: tuple[str, str]) -> str:
    raw = json.dumps(
        {"v": "meta.k8s.io/v1", "rv": rv, "start": f"{start[0]}/{start[1]}"}, separators=(",", ":")
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    padded = token + "=" * (-len(token) % 4)
    data = json.loads(base64.urlsafe_b64decode(padded.encode()))
    ns, _, name = str(data["start"]).partition("/")
    return int(data["rv"]), (ns, name)

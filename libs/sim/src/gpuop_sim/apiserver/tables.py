"""`as=Table` answers (what `kubectl get` asks for): printer columns for CRs, Name/Age otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuop_sim.apiserver.crd import column_value
from gpuop_sim.apiserver.printers import PRINTERS, WITHOUT_AGE, age
from gpuop_sim.apiserver.resources import ResourceType

JsonObj = dict[str, Any]

NAME_COLUMN: JsonObj = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace. Is "
    "required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. Name is "
    "primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "priority": 0,
}
AGE_COLUMN: JsonObj = {
    "name": "Age",
    "type": "date",
    "format": "",
    "description": "CreationTimestamp is a timestamp representing "
    "the server time when this object was created.",
    "priority": 0,
}


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _partial(obj: JsonObj) -> JsonObj:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}


def table(rt: ResourceType, objects: list[JsonObj], list_meta: JsonObj) -> JsonObj:
    columns: list[JsonObj] = [NAME_COLUMN]
    cells: list[Callable[[JsonObj], Any]] = []
    if rt.custom is not None and rt.custom.printer_columns:
        for col in rt.custom.printer_columns:
            columns.append(
                {
                    "name": col["name"],
                    "type": col.get("type", "string"),
                    "format": col.get("format", ""),
                    "description": col.get("description")
                    or f"Custom resource definition column (in JSONPath format): {col['jsonPath']}",
                    "priority": col.get("priority", 0),
                }
            )
            cells.append(_json_path_cell(col["jsonPath"], col.get("type", "string")))
    else:
        printer = list(PRINTERS.get(rt.kind, [])) if rt.custom is None else []
        if not any(fn is None for _, _, fn in printer) and rt.kind not in WITHOUT_AGE:
            printer.append(("Age", "date", None))
        for name, typ, fn in printer:
            if fn is None:
                columns.append(AGE_COLUMN)
                cells.append(_json_path_cell(".metadata.creationTimestamp", "date"))
            else:
                columns.append({"name": name, "type": typ, "format": "", "description": name, "priority": 0})
                cells.append(fn)
    rows = [
        {"cells": [obj["metadata"]["name"], *(cell(obj) for cell in cells)], "object": _partial(obj)}
        for obj in objects
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    }


def _json_path_cell(path: str, typ: str) -> Callable[[JsonObj], Any]:
    def cell(obj: JsonObj) -> Any:
        value = column_value(obj, path)
        return age(value) if typ == "date" and isinstance(value, str) else value

    return cell

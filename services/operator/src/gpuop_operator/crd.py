"""The gpuop.dev/v1alpha1 DeviceConfig CustomResourceDefinition, built from the shared config models.

The spec schema comes from `gpuop_common.config` (the same pydantic models the agents load), so the
CRD, the operator's validation and the agents can never disagree about a field. The status schema
belongs to the operator and is written here.
"""

from __future__ import annotations

from typing import Any

from gpuop_common.config import device_config_openapi_schema

GROUP = "gpuop.dev"
VERSION = "v1alpha1"
KIND = "DeviceConfig"
PLURAL = "deviceconfigs"
CRD_NAME = f"{PLURAL}.{GROUP}"
SHORT_NAMES = ["gpudc"]

JsonObj = dict[str, Any]


def _counts_schema() -> JsonObj:
    return {
        "type": "object",
        "description": "Nodes that should run the operand and nodes where its pod is Ready.",
        "properties": {
            "desired": {"type": "integer", "format": "int32", "description": "Nodes selected for it."},
            "ready": {"type": "integer", "format": "int32", "description": "Nodes with its pod Ready."},
        },
    }


def _condition_schema() -> JsonObj:
    return {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            "type": {"type": "string", "description": "Ready, Progressing or Degraded."},
            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
            "reason": {"type": "string", "description": "CamelCase reason of the last transition."},
            "message": {"type": "string", "description": "Human-readable detail, naming the field."},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "lastTransitionTime": {"type": "string", "format": "date-time"},
        },
    }


def status_schema() -> JsonObj:
    """Schema of `DeviceConfig.status` as the operator writes it."""
    return {
        "type": "object",
        "description": "Observed state, written by the operator.",
        "properties": {
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "metadata.generation the status describes.",
            },
            "conditions": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": _condition_schema(),
            },
            "selectedNodes": {"type": "integer", "format": "int32", "description": "Nodes selected."},
            "readyNodes": {"type": "integer", "format": "int32", "description": "Nodes fully rolled out."},
            "operands": {
                "type": "object",
                "description": "Per operand (spec section name): desired and ready node counts.",
                "additionalProperties": _counts_schema(),
            },
            "stages": {
                "type": "object",
                "description": "Number of selected nodes in each lifecycle stage.",
                "additionalProperties": {"type": "integer", "format": "int32"},
            },
            "nodes": {
                "type": "object",
                "description": "Lifecycle stage of each selected node.",
                "additionalProperties": {"type": "string"},
            },
            "driver": {
                "type": "object",
                "description": "Driver lifecycle (spec.driver.enable): wanted version, state per node.",
                "properties": {
                    "version": {"type": "string", "description": "Driver version wanted on every node."},
                    "summary": {"type": "string", "description": "Nodes at that version of those selected."},
                    "states": {
                        "type": "object",
                        "description": "Number of nodes in each driver state.",
                        "additionalProperties": {"type": "integer", "format": "int32"},
                    },
                    "nodes": {
                        "type": "object",
                        "description": "Per node: driver state, installed version, why when stuck.",
                        "additionalProperties": {
                            "type": "object",
                            "properties": {
                                "state": {"type": "string"},
                                "version": {"type": "string"},
                                "message": {"type": "string"},
                            },
                        },
                    },
                },
            },
            "remediation": {
                "type": "object",
                "description": "Node remediation (spec.remediation.enable): state and recent runs per node.",
                "properties": {
                    "states": {
                        "type": "object",
                        "description": "Number of nodes in each remediation state.",
                        "additionalProperties": {"type": "integer", "format": "int32"},
                    },
                    "nodes": {
                        "type": "object",
                        "description": "Per node in or after a run: state, why, last runs.",
                        "additionalProperties": {
                            "type": "object",
                            "properties": {
                                "state": {"type": "string"},
                                "message": {"type": "string"},
                                "history": {
                                    "type": "array",
                                    "description": "Finished runs, oldest first.",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "start": {"type": "integer", "format": "int64"},
                                            "end": {"type": "integer", "format": "int64"},
                                            "trigger": {"type": "string"},
                                            "steps": {"type": "array", "items": {"type": "string"}},
                                            "result": {"type": "string"},
                                            "message": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    }


def _printer_columns() -> list[JsonObj]:
    return [
        {"name": "Vendor", "type": "string", "jsonPath": ".spec.vendor"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.selectedNodes"},
        {"name": "Ready-Nodes", "type": "integer", "jsonPath": ".status.readyNodes"},
        {"name": "Driver", "type": "string", "jsonPath": ".status.driver.summary", "priority": 0},
        {
            "name": "Reason",
            "type": "string",
            "priority": 1,
            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def device_config_crd() -> JsonObj:
    """The whole CRD object, as applied by the chart and by `gpuop-operator --apply-crd`."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "gpuop"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": "deviceconfig",
                "kind": KIND,
                "listKind": f"{KIND}List",
                "shortNames": list(SHORT_NAMES),
                "categories": ["gpuop"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _printer_columns(),
                    "schema": {"openAPIV3Schema": device_config_openapi_schema(status=status_schema())},
                }
            ],
        },
    }

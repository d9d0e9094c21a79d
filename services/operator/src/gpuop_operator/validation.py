"""DeviceConfig validation: a raw custom resource in, a parsed spec or named problems out (pure).

Every problem names the field at fault (`spec.devicePlugin.migStrategy: ...`) and carries the
condition reason the status will show. A DeviceConfig with any problem changes nothing on nodes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuop_common.config import OPERAND_SECTIONS, DeviceConfigSpec, LabelSelector
from gpuop_common.nodemeta import GPU_PARTITION_COMPUTE_LABEL as PARTITION_COMPUTE_LABEL
from pydantic import ValidationError

from gpuop_operator.model import (
    OPERATOR_SECTIONS,
    SUPPORTED_SERVICES,
    NodeInfo,
)
from gpuop_operator.selector import matches

INVALID_SPEC = "InvalidSpec"
UNSUPPORTED = "Unsupported"
CONFLICT = "Conflict"
INVALID_FOR_VENDOR = "InvalidForVendor"

_MESSAGE_LIMIT = 20  # problems listed in one condition message; the rest are counted
# `timeSlicing.resources[0].replicas: ...`: a model validator's message that starts with a field path.
_FIELD_PREFIX = re.compile(r"^([a-z][A-Za-z0-9]*(\[[0-9]+\])?(\.[a-z][A-Za-z0-9]*(\[[0-9]+\])?)*): ")


@dataclass(frozen=True)
class Problem:
    reason: str
    message: str  # starts with the field path


@dataclass(frozen=True)
class DeviceConfigRef:
    namespace: str
    name: str
    created: str = ""  # metadata.creationTimestamp: the older of two conflicting DeviceConfigs wins

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> DeviceConfigRef:
        meta = obj.get("metadata") or {}
        return cls(
            str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("creationTimestamp", ""))
        )


@dataclass(frozen=True)
class Validation:
    spec: DeviceConfigSpec | None
    problems: tuple[Problem, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.spec is not None and not self.problems

    def summary(self) -> tuple[str, str]:
        """(reason, message) for the Ready condition: the first problem's reason, every message."""
        if not self.problems:
            return ("", "")
        shown = [p.message for p in self.problems[:_MESSAGE_LIMIT]]
        if len(self.problems) > _MESSAGE_LIMIT:
            shown.append(f"... and {len(self.problems) - _MESSAGE_LIMIT} more")
        return (self.problems[0].reason, "; ".join(shown))


def _error_path(loc: Sequence[int | str]) -> str:
    parts = ["spec"]
    for item in loc:
        if isinstance(item, int):
            parts[-1] += f"[{item}]"
        else:
            parts.append(str(item))
    return ".".join(parts)


def describe_errors(exc: ValidationError) -> list[str]:
    """One line per pydantic error, `spec.<path>: <message>`.

    Cross-field rules raise from a model validator with an empty location and a message that
    already starts with the field path; those get only the `spec.` prefix."""
    lines = []
    for error in exc.errors(include_url=False):
        message = str(error.get("msg", "invalid"))
        message = message.removeprefix("Value error, ")
        loc = tuple(error.get("loc", ()))
        if loc and (sub := _FIELD_PREFIX.match(message)):
            # A nested model's rule names its own field first: join the two into one path.
            lines.append(f"{_error_path(loc)}.{sub.group(1)}: {message[sub.end() :]}")
        elif loc:
            lines.append(f"{_error_path(loc)}: {message}")
        else:
            lines.append(f"spec.{message}")
    return lines


def parse_spec(raw: object) -> tuple[DeviceConfigSpec | None, list[Problem]]:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        return None, [Problem(INVALID_SPEC, f"spec: must be an object, got {type(raw).__name__}")]
    try:
        return DeviceConfigSpec.model_validate(dict(raw)), []
    except ValidationError as exc:
        return None, [Problem(INVALID_SPEC, line) for line in describe_errors(exc)]


def unsupported_sections(spec: DeviceConfigSpec) -> list[Problem]:
    problems = []
    for service, key in OPERAND_SECTIONS.items():
        section = spec.section(service)
        available = service in SUPPORTED_SERVICES or service in OPERATOR_SECTIONS
        if getattr(section, "enable", False) and not available:
            problems.append(
                Problem(
                    UNSUPPORTED,
                    f"spec.{key}.enable: the {service} operand is not available in this gpuop release",
                )
            )
    if spec.driver.enable and spec.driver.driver_type != "container":
        # The playbooks install the host driver; MxGPU VF and PF passthrough set-ups are not built.
        problems.append(
            Problem(
                UNSUPPORTED,
                f"spec.driver.driverType: {spec.driver.driver_type!r} is not supported by the driver "
                "playbooks of this gpuop release (only 'container', the host driver)",
            )
        )
    return problems


def selected_nodes(selector: LabelSelector, nodes: Iterable[NodeInfo]) -> list[NodeInfo]:
    return [node for node in nodes if matches(selector, node.labels)]


def vendor_problems(
    raw_spec: Mapping[str, Any], spec: DeviceConfigSpec, nodes: Sequence[NodeInfo]
) -> list[Problem]:
    """Settings that do not fit the GPUs of the selected nodes.

    The vendor rules live in DeviceConfigSpec; re-validating the same spec with the vendor each
    node really has reuses them instead of restating them here."""
    problems = []
    seen: set[str] = set()
    for node in nodes:
        vendors = node.vendors()
        if spec.vendor != "auto" and vendors and spec.vendor not in vendors:
            problems.append(
                Problem(
                    INVALID_FOR_VENDOR,
                    f"spec.vendor: {spec.vendor} but node {node.name} has {', '.join(sorted(vendors))} GPUs",
                )
            )
            continue
        if spec.vendor != "auto" or len(vendors) != 1:
            continue
        (vendor,) = vendors
        if vendor in seen:
            continue
        seen.add(vendor)
        try:
            DeviceConfigSpec.model_validate({**raw_spec, "vendor": vendor})
        except ValidationError as exc:
            for line in describe_errors(exc):
                problems.append(Problem(INVALID_FOR_VENDOR, f"{line} (node {node.name} has {vendor} GPUs)"))
    return problems


def mps_problems(spec: DeviceConfigSpec, nodes: Sequence[NodeInfo]) -> list[Problem]:
    """`devicePlugin.sharing.mps` on nodes whose every GPU has MIG enabled (the labeller's partition
    label): MPS shares whole GPUs only, so such a node would advertise no replica at all. A node
    with some whole GPUs is accepted (the plugin shares those and logs why the others are not);
    a node the labeller has not described yet is checked once it has."""
    if spec.device_plugin.sharing.mps is None or not spec.device_plugin.enable:
        return []
    return [
        Problem(
            INVALID_FOR_VENDOR,
            f"spec.devicePlugin.sharing.mps: node {node.name} has MIG enabled on every GPU "
            f"({PARTITION_COMPUTE_LABEL}=mig); MPS shares whole GPUs only (time-slice MIG devices with "
            "sharing.timeSlicing, or disable MIG with a configManager profile)",
        )
        for node in nodes
        if "nvidia" in node.vendors() and node.labels.get(PARTITION_COMPUTE_LABEL) == "mig"
    ]


def conflict_problems(
    me: DeviceConfigRef, mine: Sequence[NodeInfo], others: Mapping[DeviceConfigRef, LabelSelector]
) -> list[Problem]:
    """Nodes also selected by an older DeviceConfig (ties broken by namespace/name): the older keeps them."""
    problems = []
    for other, selector in sorted(others.items(), key=lambda item: (item[0].created, item[0].key)):
        if other.key == me.key or (other.created, other.key) > (me.created, me.key):
            continue
        shared = [node.name for node in mine if matches(selector, node.labels)]
        if shared:
            listed = ", ".join(shared[:5]) + (f" and {len(shared) - 5} more" if len(shared) > 5 else "")
            problems.append(
                Problem(
                    CONFLICT, f"spec.selector: node(s) {listed} also selected by DeviceConfig {other.key}"
                )
            )
    return problems


def validate(
    obj: Mapping[str, Any],
    nodes: Sequence[NodeInfo],
    others: Mapping[DeviceConfigRef, LabelSelector] | None = None,
) -> Validation:
    """Validate one DeviceConfig against the cluster's nodes and the other DeviceConfigs' selectors."""
    raw = obj.get("spec")
    spec, problems = parse_spec(raw)
    if spec is None:
        return Validation(None, tuple(problems))
    assert isinstance(raw, Mapping) or raw is None
    mine = selected_nodes(spec.selector, nodes)
    problems += unsupported_sections(spec)
    problems += vendor_problems(dict(raw or {}), spec, mine)
    problems += mps_problems(spec, mine)
    problems += conflict_problems(DeviceConfigRef.of(obj), mine, others or {})
    return Validation(spec, tuple(problems))


def selector_of(obj: Mapping[str, Any]) -> LabelSelector | None:
    """The selector of a DeviceConfig whose spec parses (others cannot claim nodes)."""
    spec, _ = parse_spec(obj.get("spec"))
    return spec.selector if spec is not None else None

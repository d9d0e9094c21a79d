"""Shared building blocks of the config models: the strict camelCase base model and common fields.

Every model forbids unknown fields (a typo must fail loudly, not be ignored), accepts both camelCase
(the CRD/ConfigMap spelling) and snake_case names, and serialises as camelCase.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ConfigModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
    )

    def to_wire(self) -> dict[str, object]:
        """The camelCase JSON-ready form used in ConfigMaps and the DeviceConfig spec."""
        return self.model_dump(mode="json", by_alias=True)


# An image reference (`registry/repo[:tag|@digest]`); empty means "the chart's default image".
ImageRef = Annotated[
    str,
    Field(
        pattern=r"^$|^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$",
        max_length=512,
    ),
]

ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]

# Go-style durations as the Prometheus operator and Kubernetes write them (`30s`, `1m30s`, `500ms`).
Duration = Annotated[str, Field(pattern=r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$", max_length=32)]

# A Kubernetes label key (optional DNS prefix + name) and value.
LabelKey = Annotated[
    str,
    Field(
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
        max_length=317,
    ),
]
LabelValue = Annotated[
    str, Field(pattern=r"^$|^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$", max_length=63)
]

AbsolutePath = Annotated[str, Field(pattern=r"^/.*$", max_length=4096)]

# A GPU model: words of its name (`MI300X`, `H100 80GB HBM3`, matched whole-word, any case) or its
# PCI device id (`0x74a1`); see gpuop_common.gpu.matching.model_matches.
GpuModel = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][-A-Za-z0-9 ._]*$")]

# A PCI address as sysfs spells it: domain:bus:device.function, e.g. 0000:03:00.0.
PciAddress = Annotated[str, Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")]


class ImageSettings(ConfigModel):
    """Image of an operand's container; empty fields mean the chart's defaults."""

    image: ImageRef = Field("", description="Container image reference; empty uses the chart default.")
    image_pull_policy: ImagePullPolicy = Field("IfNotPresent", description="Kubernetes image pull policy.")

"""Which GPUs a user's model name means (pure); shared by partition profiles and sharing configs."""

from __future__ import annotations

import re

from gpuop_common.gpu.models import GpuDevice


def model_matches(model: str, gpu: GpuDevice) -> bool:
    """Whether `model` names this GPU: its PCI device id (`0x74a1`), or words of its model or FRU
    product name, whole and in any case (`MI300X` matches "AMD Instinct MI300X", `MI300` does not)."""
    wanted = model.strip().lower()
    if re.fullmatch(r"0x[0-9a-f]{1,4}", wanted):
        return int(wanted, 16) == gpu.pci.device_id
    pattern = re.compile(rf"(?<![a-z0-9]){re.escape(wanted)}(?![a-z0-9])")
    return any(pattern.search(name.lower()) for name in (gpu.model, gpu.product_name or "") if name)

"""DRA device names of the gpuop driver (`gpu.gpuop.dev`), for the driver that publishes them and the
metrics exporter that maps a claim's device back to its GPU (pure).

Names are DNS labels (ResourceSlice rule) built from the GPU's PCI address, so they name the same
hardware across restarts and when another GPU vanishes (indices shift then): `gpu-<dddd>-<bb>-<dd>-<f>`,
`...-part-<n>` (AMD partition n), `...-mig-<gi>-<ci>` (NVIDIA MIG device by GPU/compute instance),
and `<name>-ts-<n>` for replica n of a time-sliced device (gpuop_common.kubelet.assignments, next
to the device plugin's `<id>::<n>`, as both are read back from the pod-resources API).
"""

from __future__ import annotations

import re

from gpuop_common.gpu.models import GpuDevice, MigDevice


def gpu_name(gpu: GpuDevice) -> str:
    """`gpu-0000-43-00-0` for PCI address 0000:43:00.0."""
    return "gpu-" + re.sub(r"[^0-9a-z]", "-", gpu.pci_address.lower())


def partition_name(gpu: GpuDevice, index: int) -> str:
    return f"{gpu_name(gpu)}-part-{index}"


def mig_name(gpu: GpuDevice, mig: MigDevice) -> str:
    suffix = (
        f"{mig.gpu_instance_id}-{mig.compute_instance_id}"
        if mig.gpu_instance_id is not None and mig.compute_instance_id is not None
        else str(mig.index)
    )
    return f"{gpu_name(gpu)}-mig-{suffix}"

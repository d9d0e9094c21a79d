"""Ansible module: the GPUs a `gpu-reset` run acts on, and after the reset, which of them are still bad.

`mode: targets` checks the named PCI addresses (or, none named, lists every GPU of the vendor under
`sys/bus/pci/devices`) and returns `ras`, each AMD target's uncorrectable RAS counts before the reset.
`mode: check` looks at each target after its reset:
- AMD, from the host's sysfs: the PCI function is there, a DRM render node is bound to it, a KFD
  topology node has that render minor, and no `ras/<block>_err_count` counted a new uncorrectable
  error since `ras_baseline` (the counts `targets` returned). amdgpu keeps its RAS counters across a
  GPU reset (only a driver reload or a boot clears them), so the fault that led to the reset is
  still counted: only errors on top of it say the memory is still bad, as the node labeller also
  reads the counters as deltas from a baseline.
- NVIDIA, from `nvidia-smi --query-gpu=pci.bus_id,reset_status.reset_required --format=csv,noheader`
  (its stdout passed as `nvidia_query`): the GPU is listed, and not with a reset still required.
`problems` maps each GPU still bad to why; the playbook reports `reboot_required` from it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from gpuop_common.gpu.amd_drm import AMD_VENDOR_ID
from gpuop_common.gpu.detect import NVIDIA_VENDOR_ID, pci_gpu_addresses

DOCUMENTATION = r"""
module: gpuop_gpu_reset_check
short_description: Resolve the GPUs to reset, and check them after the reset
options:
  host_root: {description: where the host's / is mounted, type: path, required: true}
  vendor: {description: GPU vendor, type: str, choices: [amd, nvidia], required: true}
  gpus: {description: PCI addresses (empty - every GPU of the vendor), type: list, elements: str, default: []}
  mode: {description: targets or check, type: str, choices: [targets, check], default: targets}
  nvidia_query: {description: nvidia-smi query output (mode check, NVIDIA), type: str, default: ""}
  ras_baseline:
    description: "mode check, AMD: the `ras` that targets returned (PCI address -> block -> ue)"
    type: dict
    default: {}
"""

PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
KFD_NODES = Path("sys/class/kfd/kfd/topology/nodes")
VENDOR_IDS = {"amd": AMD_VENDOR_ID, "nvidia": NVIDIA_VENDOR_ID}


def targets(root: Path, vendor: str, gpus: list[str]) -> tuple[list[str], list[str]]:
    """(PCI addresses to reset, errors): named ones must be PCI addresses (lower case, with domain)."""
    if not gpus:
        return pci_gpu_addresses(root, VENDOR_IDS[vendor]), []
    errors = [
        f"gpu_pci_addresses: {gpu!r} is not a PCI address like 0000:03:00.0"
        for gpu in gpus
        if not PCI_ADDRESS.match(gpu)
    ]
    return sorted(dict.fromkeys(gpus)), errors


def _render_minors(root: Path, pci: str) -> set[int]:
    device = root / "sys/bus/pci/devices" / pci
    target = device.resolve()
    drm = root / "sys/class/drm"
    minors: set[int] = set()
    for entry in sorted(drm.glob("renderD*")) if drm.is_dir() else []:
        link = entry / "device"
        if link.exists() and link.resolve() == target and entry.name[7:].isdigit():
            minors.add(int(entry.name[7:]))
    return minors


def _kfd_minors(root: Path) -> set[int]:
    found: set[int] = set()
    nodes = root / KFD_NODES
    for props in sorted(nodes.glob("*/properties")) if nodes.is_dir() else []:
        try:
            text = props.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "drm_render_minor" and value.strip().isdigit():
                found.add(int(value))
    return found


def ras_counts(device: Path) -> dict[str, int | str]:
    """Uncorrectable errors per RAS block (`ras/<block>_err_count`), or why a count is unreadable."""
    counts: dict[str, int | str] = {}
    for counter in sorted(device.glob("ras/*_err_count")):
        block = counter.name.removesuffix("_err_count")
        try:
            fields = dict(line.split(":", 1) for line in counter.read_text().splitlines() if ":" in line)
        except OSError as exc:
            counts[block] = f"{counter.name} unreadable: {exc.strerror}"
            continue
        ue = fields.get("ue", "0").strip()
        counts[block] = int(ue) if ue.isdigit() else f"{counter.name}: unparsable ue {ue!r}"
    return counts


def _ras_problems(device: Path, baseline: dict[str, Any]) -> list[str]:
    problems = []
    for block, count in ras_counts(device).items():
        if isinstance(count, str):
            problems.append(count)
            continue
        before = baseline.get(block, 0)
        new = count - (before if isinstance(before, int) else 0)
        if new > 0:
            problems.append(f"RAS block {block}: {new} new uncorrectable error(s) since before the reset")
    return problems


def amd_baseline(root: Path, gpus: list[str]) -> dict[str, dict[str, int]]:
    """The targets' readable RAS counts, taken before the reset."""
    devices = root / "sys/bus/pci/devices"
    return {
        pci: {block: n for block, n in ras_counts(devices / pci).items() if isinstance(n, int)}
        for pci in gpus
    }


def amd_problems(
    root: Path, gpus: list[str], baseline: dict[str, dict[str, Any]] | None = None
) -> dict[str, str]:
    kfd = _kfd_minors(root)
    problems: dict[str, str] = {}
    for pci in gpus:
        device = root / "sys/bus/pci/devices" / pci
        if not device.exists():
            problems[pci] = "not on the PCI bus"
            continue
        minors = _render_minors(root, pci)
        found: list[str] = []
        if not minors:
            found.append("no DRM render node")
        elif not minors & kfd:
            found.append("no KFD node")
        found.extend(_ras_problems(device, (baseline or {}).get(pci) or {}))
        if found:
            problems[pci] = "; ".join(found)
    return problems


def _kernel_pci(bus_id: str) -> str:
    """nvidia-smi's `00000000:18:00.0` -> `0000:18:00.0`."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def nvidia_problems(query: str, gpus: list[str]) -> dict[str, str]:
    listed: dict[str, str] = {}
    for line in query.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if parts[0]:
            # Only the bus id: a driver without reset_status fields (the playbook's fallback query).
            listed[_kernel_pci(parts[0])] = parts[1] if len(parts) > 1 else "No"
    problems: dict[str, str] = {}
    for pci in gpus:
        state = listed.get(pci)
        if state is None:
            problems[pci] = "not visible to nvidia-smi after the reset"
        elif state.lower() not in ("no", "[n/a]", "n/a"):
            problems[pci] = f"nvidia-smi still reports reset_status.reset_required {state}"
    return problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host_root": {"type": "path", "required": True},
            "vendor": {"type": "str", "choices": ["amd", "nvidia"], "required": True},
            "gpus": {"type": "list", "elements": "str", "default": []},
            "mode": {"type": "str", "choices": ["targets", "check"], "default": "targets"},
            "nvidia_query": {"type": "str", "default": ""},
            "ras_baseline": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params: dict[str, Any] = module.params
    root = Path(params["host_root"])
    gpus, errors = targets(root, params["vendor"], [str(g) for g in params["gpus"]])
    if errors:
        module.fail_json(msg="; ".join(errors))
        return
    if not gpus:
        module.fail_json(msg=f"no {params['vendor']} GPU under {root}/sys/bus/pci/devices to reset")
        return
    if params["mode"] == "targets":
        ras = amd_baseline(root, gpus) if params["vendor"] == "amd" else {}
        module.exit_json(
            changed=False, gpus=gpus, ras=ras, msg=f"{len(gpus)} GPU(s) to reset: {', '.join(gpus)}"
        )
        return
    if params["vendor"] == "amd":
        problems = amd_problems(root, gpus, params["ras_baseline"])
    else:
        problems = nvidia_problems(params["nvidia_query"], gpus)
    message = (
        "; ".join(f"{pci}: {why}" for pci, why in problems.items())
        if problems
        else f"{len(gpus)} GPU(s) healthy after the reset"
    )
    module.exit_json(changed=False, gpus=gpus, problems=problems, msg=message)


if __name__ == "__main__":
    main()

"""AMD PCI device ids, marketing names and ISA names (facts from amdgpu-sysfs.md section 8).

Marketing names are the bracketed product of the pci.ids 2026.08.22 entry with an `AMD ` prefix, which
is what libdrm's amdgpu.ids prints for these boards; unknown ids fall back to the raw id.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AmdProduct:
    marketing_name: str
    gfx_target_version: int | None
    xcc_count: int | None = None  # XCCs of the whole GPU (CPX partition count, amdgpu-sysfs.md 3.1)


_PRODUCTS: dict[int, AmdProduct] = {
    0x6860: AmdProduct("AMD Radeon Instinct MI25", 90000),
    0x740F: AmdProduct("AMD Instinct MI210", 90010),
    0x740C: AmdProduct("AMD Instinct MI250X/MI250", 90010),
    0x7408: AmdProduct("AMD Instinct MI250X", 90010),
    0x74A1: AmdProduct("AMD Instinct MI300X", 90402, 8),
    0x74A0: AmdProduct("AMD Instinct MI300A", 90402, 6),
    0x74A2: AmdProduct("AMD Instinct MI308X", 90402, 4),
    0x74A5: AmdProduct("AMD Instinct MI325X", 90402),
    0x74A9: AmdProduct("AMD Instinct MI300X HF", 90402),
    0x74B5: AmdProduct("AMD Instinct MI300X VF", 90402),
    0x74B9: AmdProduct("AMD Instinct MI325X VF", 90402),
    0x75A0: AmdProduct("AMD Instinct MI350X", 90500),
    0x75A3: AmdProduct("AMD Instinct MI355X", 90500),
    0x7448: AmdProduct("AMD Radeon Pro W7900", 110000),
    0x744A: AmdProduct("AMD Radeon Pro W7900 Dual Slot", 110000),
    0x744B: AmdProduct("AMD Radeon Pro W7900D", 110000),
    0x744C: AmdProduct("AMD Radeon RX 7900 XT/XTX/GRE/7900M", 110000),
}


def product_for(device_id: int) -> AmdProduct | None:
    return _PRODUCTS.get(device_id)


def marketing_name(device_id: int) -> str:
    product = _PRODUCTS.get(device_id)
    return product.marketing_name if product else f"AMD GPU 0x{device_id:04x}"


def gfx_name(gfx_target_version: int) -> str:
    """90010 -> gfx90a, 90402 -> gfx942, 110000 -> gfx1100 (stepping printed as hex)."""
    major = gfx_target_version // 10000
    minor = (gfx_target_version // 100) % 100
    stepping = gfx_target_version % 100
    return f"gfx{major}{minor}{stepping:x}"


def family_name(gfx_target_version: int) -> str:
    """libdrm family label for the node labeller.

    GFX9 dGPUs (Vega, MI100-MI300) are `AI`, GFX10 `NV`; from GFX11 libdrm names families by GC IP
    version, which for the dGPUs listed here equals the gfx target (GC 11.0.0 = gfx1100). APU
    families (RV, YC, ...) cannot be told apart from sysfs alone and are not produced.
    """
    major = gfx_target_version // 10000
    minor = (gfx_target_version // 100) % 100
    stepping = gfx_target_version % 100
    if major == 9:
        return "AI"
    if major == 10:
        return "NV"
    return f"GC_{major}_{minor}_{stepping}"

"""Where tests and developer tools find the project's `shared/` folder. Never the product's.

`shared/` (design notes, golden transcripts of a real kube-apiserver, hardware captures) sits beside
the checkout for developers and in CI's clone only; a user's clone or an installed wheel has none.
So nothing the product, the simulator, the demo or `make bench` runs may read it: data they need
ships inside their package (see tools/vendor_openapi.py). Tests and tools import this module;
`tests/test_workspace_layout.py` fails when product code names it or GPUOP_SHARED_DIR.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """`shared/` beside the checkout; GPUOP_SHARED_DIR overrides it."""
    override = os.environ.get("GPUOP_SHARED_DIR")
    return Path(override) if override else ROOT.parent / "shared"

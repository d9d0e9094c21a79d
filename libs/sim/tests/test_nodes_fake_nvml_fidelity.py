"""The fake NVML keeps nvidia-ml-py's names, parameters and constants, so code tested on it runs on pynvml."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import gpuop_common.gpu as gpu_pkg
import pynvml
import pytest
from gpuop_sim.nodes import fake_nvml
from gpuop_sim.nodes.fake_nvml import FakeNvml

FAKE_FUNCTIONS = sorted(n for n in dir(FakeNvml) if n.startswith("nvml"))
BACKEND_SOURCES = [
    Path(gpu_pkg.__file__).with_name(n)
    for n in ("nvidia.py", "nvidia_inventory.py", "nvidia_mig.py", "nvml_calls.py")
]


def _params(fn):
    return [p for p in inspect.signature(fn).parameters if p != "self"]


@pytest.mark.parametrize("name", FAKE_FUNCTIONS)
def test_fake_function_signature_matches_pynvml(name):
    real = getattr(pynvml, name, None)
    assert real is not None, f"pynvml has no {name}"
    assert _params(getattr(FakeNvml, name)) == _params(real)


def test_every_nvml_name_the_backend_uses_exists_in_pynvml_and_the_fake():
    used: set[str] = set()
    for source in BACKEND_SOURCES:
        used |= set(re.findall(r"\b(nvml[A-Z]\w+|NVML_[A-Z0-9_]+)\b", source.read_text()))
    # Not NVML names: the backend's env constant, and words from comments / struct field names.
    used -= {"NVML_MODULE_ENV", "nvmlClocksEventReason", "nvmlFieldValue_t", "nvmlReturn"}
    used -= {"NVML_COMPUTE_INSTANCE_PROFILE_"}  # NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE in a comment
    missing_real = sorted(n for n in used if not hasattr(pynvml, n))
    missing_fake = sorted(n for n in used if not hasattr(FakeNvml(), n))
    assert missing_real == [] and missing_fake == []


def test_constants_have_the_pynvml_values():
    names = [n for n in vars(fake_nvml) if n.startswith(("NVML_", "nvmlEventType", "nvmlClocksEventReason"))]
    assert len(names) > 40
    for name in names:
        if name == "NVML_P2P_CAPS_INDEX_NVLINK":
            continue
        assert getattr(fake_nvml, name) == getattr(pynvml, name), name
    assert fake_nvml.NVML_P2P_CAPS_INDEX_NVLINK == pynvml.NVML_P2P_CAPS_INDEX_NVLINK


def test_error_class_names_match():
    fake = {n for n in vars(fake_nvml) if n.startswith("NVMLError_")}
    assert fake <= {n for n in vars(pynvml) if n.startswith("NVMLError_")}
    assert {"NVMLError_LibraryNotFound", "NVMLError_NotSupported", "NVMLError_GpuIsLost"} <= fake

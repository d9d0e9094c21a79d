"""The committed stubs in gpuop_common/kubelet/_generated/ match what `make protos` would write."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

GEN_PROTOS = Path(__file__).resolve().parents[3] / "tools" / "gen_protos.py"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuop_tools_gen_protos", GEN_PROTOS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen_protos() -> ModuleType:
    return _load_generator()


def test_committed_stubs_are_current(gen_protos: ModuleType) -> None:
    stale = gen_protos.stale_files()
    assert stale == [], f"stale generated kubelet stubs {stale}: run `make protos` and commit the result"


@pytest.mark.parametrize(
    ("proto", "field", "changed"),
    [
        ("deviceplugin_v1beta1", "bool read_only = 3;", "bool read_only = 4;"),
        (
            "dra_health_v1alpha1",
            "int64 health_check_timeout_seconds = 4;",
            "int32 health_check_timeout_seconds = 4;",
        ),
    ],
)
def test_a_changed_proto_is_reported_stale(
    gen_protos: ModuleType, tmp_path: Path, proto: str, field: str, changed: str
) -> None:
    protos = tmp_path / "protos"
    shutil.copytree(gen_protos.PROTO_DIR, protos)
    source = protos / f"{proto}.proto"
    text = source.read_text()
    assert field in text
    source.write_text(text.replace(field, changed))

    stale = gen_protos.stale_files(gen_protos.GENERATED_DIR, protos)

    assert f"{proto}_pb2.py" in stale


def test_generated_grpc_modules_import_their_messages_relatively(gen_protos: ModuleType) -> None:
    for path in sorted(gen_protos.GENERATED_DIR.glob("*_pb2_grpc.py*")):
        text = path.read_text()
        assert "\nimport " + path.name.split("_pb2_grpc")[0] + "_pb2" not in text, path.name
        assert "from . import " in text, path.name


def test_generation_is_deterministic(gen_protos: ModuleType, tmp_path: Path) -> None:
    first = {p.name: p.read_bytes() for p in gen_protos.generate(tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in gen_protos.generate(tmp_path / "b")}
    assert first == second
    assert not any(str(tmp_path).encode() in content for content in first.values())

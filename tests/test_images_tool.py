"""tools/images.py decides whether an image needs rebuilding from its build inputs; no images here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import images


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in {
        "pyproject.toml": "[project]\n",
        "uv.lock": "version = 1\n",
        "tools/slim_venv.py": "print()\n",
        "libs/common/src/gpuop_common/__init__.py": "",
        "services/agent/Dockerfile": "FROM x\n",
        "services/agent/src/gpuop_agent/main.py": "",
        "services/other/src/gpuop_other/main.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(images, "REPO", tmp_path)
    return tmp_path


def inputs() -> str:
    return images.build_inputs("agent", ("base:1",), ("VERSION=1", "REVISION=abc"))


@pytest.mark.parametrize(
    "changed",
    [
        "uv.lock",
        "tools/slim_venv.py",
        "libs/common/src/gpuop_common/__init__.py",
        "services/agent/Dockerfile",
    ],
)
def test_a_change_to_a_copied_file_changes_the_inputs(repo: Path, changed: str) -> None:
    before = inputs()
    (repo / changed).write_text((repo / changed).read_text() + "# edited\n")
    assert inputs() != before


def test_ignored_and_other_services_files_do_not(repo: Path) -> None:
    before = inputs()
    (repo / "libs/common/src/gpuop_common/__pycache__").mkdir()
    (repo / "libs/common/src/gpuop_common/__pycache__/x.pyc").write_bytes(b"\0")
    (repo / "services/other/src/gpuop_other/main.py").write_text("changed = True\n")
    (repo / "README.md").write_text("not in the context\n")
    assert inputs() == before


def test_build_arguments_count(repo: Path) -> None:
    """A new commit (REVISION) means a rebuild: the image's revision label must name it."""
    assert inputs() != images.build_inputs("agent", ("base:1",), ("VERSION=1", "REVISION=def"))
    assert inputs() != images.build_inputs("agent", ("base:2",), ("VERSION=1", "REVISION=abc"))

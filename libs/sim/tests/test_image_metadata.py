"""The simulated kubelet's image-metadata table matches the service Dockerfiles and names every image a
chart deploys; `make image-metadata` regenerates it."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from gpuop_sim.workloads.simkubelet._image_metadata import IMAGE_USERS

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpuop_tools_gen_image_metadata", REPO / "tools/gen_image_metadata.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_committed_table_is_current(gen: ModuleType) -> None:
    assert gen.is_current(), "stale image-metadata table: run `make image-metadata` and commit the result"


def test_a_changed_user_line_makes_the_table_stale(gen: ModuleType, tmp_path: Path) -> None:
    services = tmp_path / "services"
    shutil.copytree(REPO / "services", services, ignore=shutil.ignore_patterns("src", "tests", "*.toml"))
    dockerfile = services / "operator" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("USER 65532:65532", "USER 1000:1000"))

    assert not gen.is_current(services_dir=services)
    assert gen.table(services)["gpuop-operator"] == "1000:1000"


def test_the_last_user_line_counts_and_none_is_root(gen: ModuleType) -> None:
    two_stages = 'FROM a AS build\nUSER 10\nFROM b\nUSER 65532:65532\nENTRYPOINT ["/app/bin/x"]\n'
    assert gen.image_user(two_stages) == ("x", "65532:65532")
    assert gen.image_user('FROM b\nENTRYPOINT ["/app/bin/y", "--flag"]\n') == ("y", "")


def test_a_named_user_is_refused(gen: ModuleType) -> None:
    # Process mode has no image /etc/passwd to look a name up in.
    with pytest.raises(gen.DockerfileError, match="numeric"):
        gen.image_user('FROM b\nUSER nonroot\nENTRYPOINT ["/app/bin/x"]\n')


def _repositories(values: Any) -> Iterator[str]:
    if isinstance(values, dict):
        for key, value in values.items():
            if key == "repository" and isinstance(value, str):
                yield value
            else:
                yield from _repositories(value)
    elif isinstance(values, list):
        for item in values:
            yield from _repositories(item)


def test_every_chart_image_is_in_the_table() -> None:
    images = {
        repository.rsplit("/", 1)[-1]
        for values in sorted(REPO.glob("charts/*/values.yaml"))
        for repository in _repositories(yaml.safe_load(values.read_text()))
    }
    assert images, "no image.repository found in charts/*/values.yaml"
    assert images <= set(IMAGE_USERS), f"images without a Dockerfile entry: {images - set(IMAGE_USERS)}"

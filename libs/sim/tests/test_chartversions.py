"""VERSION is the one release version: every Chart.yaml, image tag and service package agrees."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from gpuop_sim import chartversions
from gpuop_sim.binaries import repo_root
from gpuop_sim.helm import ChartError

ROOT = repo_root()

UMBRELLA = """\
apiVersion: v2
name: top
# the release version; tools/charts.py versions writes it
version: 0.1.0
appVersion: "0.1.0"
dependencies:
  - name: svc
    version: 0.1.0
    repository: file://../svc
    condition: svc.enabled
  - name: nfd
    version: 0.17.3  # upstream chart: its own version
    repository: https://kubernetes-sigs.github.io/node-feature-discovery/charts
  - version: 0.1.0
    name: lib
    repository: ""
"""


def test_the_repository_agrees_with_its_version_file() -> None:
    assert chartversions.stale_fields(ROOT) == []


def test_version_file_is_read_and_a_bad_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "VERSION").write_text("1.4.0-rc.1\n")
    assert chartversions.read_version(tmp_path) == "1.4.0-rc.1"
    (tmp_path / "VERSION").write_text("v1.4\n")
    with pytest.raises(ChartError, match=r"VERSION: 'v1.4' is not a SemVer"):
        chartversions.read_version(tmp_path)
    with pytest.raises(ChartError, match="VERSION"):
        chartversions.read_version(tmp_path / "missing")


def test_chart_yaml_gets_the_version_for_itself_and_local_dependencies_only() -> None:
    text = chartversions.versioned_chart_yaml(UMBRELLA, "0.2.0")
    meta = yaml.safe_load(text)
    assert (meta["version"], meta["appVersion"]) == ("0.2.0", "0.2.0")
    assert [d["version"] for d in meta["dependencies"]] == ["0.2.0", "0.17.3", "0.2.0"]
    assert "# the release version; tools/charts.py versions writes it\n" in text
    assert "condition: svc.enabled" in text
    assert chartversions.versioned_chart_yaml(text, "0.2.0") == text


def test_a_chart_yaml_layout_it_cannot_rewrite_is_an_error_naming_the_file() -> None:
    flow = (
        'apiVersion: v2\nname: x\nversion: 0.1.0\nappVersion: "0.1.0"\n'
        'dependencies: [{name: a, version: 0.1.0, repository: ""}]\n'
    )
    with pytest.raises(ChartError, match=r"x/Chart.yaml: could not set the version: .*dependency a"):
        chartversions.versioned_chart_yaml(flow, "0.2.0", where="x/Chart.yaml")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The repo's charts, VERSION and service pyprojects, copied so a test may change them."""
    shutil.copytree(ROOT / "charts", tmp_path / "charts", symlinks=True)
    shutil.copy(ROOT / "VERSION", tmp_path / "VERSION")
    for pyproject in chartversions.service_pyprojects(ROOT):
        target = tmp_path / pyproject.relative_to(ROOT)
        target.parent.mkdir(parents=True)
        shutil.copy(pyproject, target)
    return tmp_path


def test_a_bumped_version_file_makes_every_field_stale_until_written(tree: Path) -> None:
    old = chartversions.read_version(tree)
    (tree / "VERSION").write_text("9.8.7\n")
    stale = chartversions.stale_fields(tree)
    assert f"charts/device-plugin/Chart.yaml: appVersion is '{old}', VERSION says '9.8.7'" in stale
    assert (
        f"charts/gpu-operator/Chart.yaml: dependency operator version is '{old}', VERSION says '9.8.7'"
        in stale
    )
    assert f"services/operator/pyproject.toml: version is '{old}', VERSION says '9.8.7'" in stale
    changed = chartversions.write_versions(tree)
    assert tree / "charts" / "gpu-operator" / "Chart.yaml" in changed
    assert chartversions.stale_fields(tree) == []
    assert chartversions.write_versions(tree) == []


def test_a_pinned_image_tag_is_stale(tree: Path) -> None:
    values = tree / "charts" / "crds" / "values.yaml"
    values.write_text(values.read_text().replace('tag: ""', 'tag: "0.0.1"', 1))
    assert chartversions.stale_fields(tree) == [
        "charts/crds/values.yaml: upgradeJob.image.tag is pinned to '0.0.1'; leave it empty so the "
        "image follows the chart's appVersion"
    ]

"""One release version for every chart, image tag and service package: the repo's `VERSION` file.

`tools/charts.py versions` writes it into each Chart.yaml (`version`, `appVersion` and the version
of every local dependency: file:// and in-tree ones are our own charts, released together) and into
each service's pyproject.toml (the software inside the image of that tag). Image tags are not
written: every `image.tag` in values.yaml stays empty, which gpuop-lib's `gpuop.image` renders as
the chart's appVersion. `stale_fields` lists whatever disagrees; `make charts`, `make package` and
the chart tests fail on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gpuop_sim.helm import ChartError, chart_meta, charts_in

VERSION_FILE = "VERSION"
# SemVer 2 as Helm requires for chart versions (no leading "v").
_SEMVER = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?")
_PYPROJECT_VERSION = re.compile(r'^version = "([^"]*)"$', re.MULTILINE)


def read_version(root: Path) -> str:
    path = root / VERSION_FILE
    try:
        version = path.read_text().strip()
    except OSError as error:
        raise ChartError(f"{path}: {error}") from error
    if not _SEMVER.fullmatch(version):
        raise ChartError(f"{path}: {version!r} is not a SemVer version like 1.2.3")
    return version


def _is_local(dep: dict[str, Any]) -> bool:
    repository = str(dep.get("repository") or "")
    return repository == "" or repository.startswith("file://")


def _top_level_line(line: str, version: str) -> str:
    if line.startswith("version:"):
        return f"version: {version}\n"
    if line.startswith("appVersion:"):
        return f'appVersion: "{version}"\n'
    return line


def versioned_chart_yaml(text: str, version: str, *, where: str = "Chart.yaml") -> str:
    """Chart.yaml text with version, appVersion and local dependency versions set; the rest untouched.

    Line-based so comments and layout survive; the result is parsed back and checked, so a layout
    this does not understand is an error naming the file rather than a half-written chart.
    """
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    in_deps = False
    item: list[str] = []

    def flush() -> None:
        local = any(re.match(r'\s*-?\s*repository:\s*(""|\'\'|file://)', line) for line in item)
        for line in item:
            match = re.match(r"(\s*-?\s*version:\s*)", line)
            out.append(f"{match.group(1)}{version}\n" if local and match else line)
        item.clear()

    for line in lines:
        top_level = bool(line.strip()) and not line[0].isspace() and not line.startswith(("-", "#"))
        if top_level:
            flush()
            in_deps = line.startswith("dependencies:")
            out.append(_top_level_line(line, version))
        elif in_deps:
            if re.match(r"\s*- ", line):
                flush()
            item.append(line)
        else:
            out.append(line)
    flush()
    result = "".join(out)
    problems = _chart_problems(yaml.safe_load(result) or {}, version, where)
    if problems:
        raise ChartError(f"{where}: could not set the version: {'; '.join(problems)}")
    return result


def _chart_problems(meta: dict[str, Any], version: str, where: str) -> list[str]:
    problems = [
        f"{where}: {key} is {meta.get(key)!r}, VERSION says {version!r}"
        for key in ("version", "appVersion")
        if str(meta.get(key)) != version
    ]
    for dep in meta.get("dependencies") or []:
        if _is_local(dep) and str(dep.get("version")) != version:
            problems.append(
                f"{where}: dependency {dep.get('name')} version is {dep.get('version')!r}, "
                f"VERSION says {version!r}"
            )
    return problems


def _image_tags(values: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, tag) of every image map (one with `repository` and `tag`) in a values tree."""
    if isinstance(values, dict):
        if "repository" in values and "tag" in values:
            yield f"{path}tag", values["tag"]
        for key, value in values.items():
            yield from _image_tags(value, f"{path}{key}.")
    elif isinstance(values, list):
        for index, value in enumerate(values):
            yield from _image_tags(value, f"{path}{index}.")


def service_pyprojects(root: Path) -> list[Path]:
    return sorted(root.glob("services/*/pyproject.toml"))


def stale_fields(root: Path) -> list[str]:
    """Every chart/package field that disagrees with VERSION, one line each naming its file."""
    version = read_version(root)
    problems: list[str] = []
    for chart in charts_in(root / "charts"):
        where = str((chart / "Chart.yaml").relative_to(root))
        problems += _chart_problems(chart_meta(chart), version, where)
        values_path = chart / "values.yaml"
        values = yaml.safe_load(values_path.read_text()) if values_path.is_file() else None
        for key, tag in _image_tags(values):
            if tag not in ("", None):
                problems.append(
                    f"{values_path.relative_to(root)}: {key} is pinned to {tag!r}; leave it empty "
                    "so the image follows the chart's appVersion"
                )
    for pyproject in service_pyprojects(root):
        found = _PYPROJECT_VERSION.search(pyproject.read_text())
        if found is None or found.group(1) != version:
            shown = found.group(1) if found else None
            problems.append(f"{pyproject.relative_to(root)}: version is {shown!r}, VERSION says {version!r}")
    return problems


def write_versions(root: Path) -> list[Path]:
    """Set every Chart.yaml and service pyproject.toml to VERSION; the files that changed."""
    version = read_version(root)
    changed: list[Path] = []
    for chart in charts_in(root / "charts"):
        path = chart / "Chart.yaml"
        text = path.read_text()
        new = versioned_chart_yaml(text, version, where=str(path))
        if new != text:
            path.write_text(new)
            changed.append(path)
    for path in service_pyprojects(root):
        text = path.read_text()
        new = _PYPROJECT_VERSION.sub(f'version = "{version}"', text, count=1)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed

"""Drive the real `helm` binary and validate what it renders, for chart tests and `make charts`.

Charts are checked the way a cluster would see them: `helm lint --strict`, `helm template` with a
given `--kube-version`, then every rendered object validated against the official OpenAPI schemas of
that Kubernetes version (kubernetes-validate, strict: unknown fields fail), and custom resources
against their CRD's schema (jsonschema). Helm's state dirs point into a temp dir so tests never read
or write the user's Helm config.

Dependencies are built with the plain `helm dependency build` a user runs on a fresh clone, so what
the demo, benchmarks and tests install is what a user gets. That only works because no file://
dependency has file:// dependencies of its own (helm packs such a folder as it is, without them):
service charts carry gpuop-lib in-tree as `charts/gpuop-lib` (a symlink, `repository: ""`), and
`dependency_build` refuses a chart that breaks the rule with a message saying so.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from gpuop_sim.binaries import MissingBinaryError, find_binary

Manifest = dict[str, Any]


class ChartError(RuntimeError):
    """helm failed, or a rendered object is invalid; the message names the chart and object."""


@dataclass(frozen=True)
class HelmResult:
    returncode: int
    stdout: str
    stderr: str


@contextmanager
def helm_home() -> Iterator[dict[str, str]]:
    """Environment with private HELM_*_HOME dirs, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="gpuop-helm-") as tmp:
        env = dict(os.environ)
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            env[var] = str(Path(tmp) / var.lower())
        yield env


def run_helm(args: Sequence[str], *, env: Mapping[str, str] | None = None) -> HelmResult:
    with helm_home() as private_env:
        done = subprocess.run(
            [str(find_binary("helm")), *args],
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else private_env,
            check=False,
        )
    return HelmResult(done.returncode, done.stdout, done.stderr)


def charts_in(charts_dir: Path) -> list[Path]:
    """Every chart folder under charts_dir (those holding a Chart.yaml)."""
    return sorted(p.parent for p in charts_dir.glob("*/Chart.yaml"))


def chart_meta(chart: Path) -> dict[str, Any]:
    """The chart's Chart.yaml as a dict; ChartError naming the file when it is missing or not a map."""
    path = chart / "Chart.yaml"
    try:
        meta = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ChartError(f"{path}: {error}") from error
    if not isinstance(meta, dict):
        raise ChartError(f"{path}: not a YAML mapping")
    return meta


def dependencies(chart: Path) -> list[dict[str, Any]]:
    deps = chart_meta(chart).get("dependencies") or []
    if not isinstance(deps, list) or not all(isinstance(d, dict) and d.get("name") for d in deps):
        raise ChartError(f"{chart / 'Chart.yaml'}: dependencies must be a list of maps with a name")
    return deps


def local_dependency_dir(chart: Path, dep: dict[str, Any]) -> Path | None:
    """Folder of a `file://` dependency (relative to the chart, as helm resolves it); None otherwise."""
    repository = str(dep.get("repository") or "")
    if not repository.startswith("file://"):
        return None
    return (chart / repository.removeprefix("file://")).resolve()


def nested_local_dependencies(chart: Path) -> list[str]:
    """One line per file:// dependency that has file:// dependencies itself.

    helm packs a file:// dependency's folder as it is and never resolves that folder's own
    file:// dependencies, so on a fresh clone (nested charts/ empty) they would be missing.
    """
    problems: list[str] = []
    for dep in dependencies(chart):
        folder = local_dependency_dir(chart, dep)
        if folder is None or not (folder / "Chart.yaml").is_file():
            continue
        nested = [d["name"] for d in dependencies(folder) if local_dependency_dir(folder, d) is not None]
        if nested:
            problems.append(
                f"{folder / 'Chart.yaml'}: file:// dependencies {nested} would be missing when "
                f"{chart.name} packs {folder.name}; keep them in-tree as {folder.name}/charts/<name> "
                'with repository: ""'
            )
    return problems


def stale_archives(chart: Path) -> list[Path]:
    """Archives in charts/ of dependencies that live in-tree (`repository: ""`, charts/<name>/).

    Builds from before gpuop-lib moved in-tree left `gpuop-lib-<version>.tgz` there; helm would load
    it beside the folder and pack the library twice.
    """
    in_tree = [d["name"] for d in dependencies(chart) if not d.get("repository")]
    archives = (chart / "charts").glob("*.tgz")
    return sorted(
        a for a in archives if any(re.fullmatch(rf"{re.escape(n)}-\d.*\.tgz", a.name) for n in in_tree)
    )


def dependency_build(chart: Path) -> None:
    """`helm dependency build` as the docs tell a user; ChartError with helm's message.

    Only when a Chart.lock left from an earlier build is out of sync (it is git-ignored, so a pull
    that changes versions leaves it behind) does it re-resolve with `helm dependency update`.
    """
    if not dependencies(chart):
        return
    problems = nested_local_dependencies(chart)
    if problems:
        raise ChartError("; ".join(problems))
    # The umbrella packs its file:// subcharts as they are, so clear their leftovers too: an old
    # gpuop-lib archive there could shadow the library's current templates.
    folders = [chart, *filter(None, (local_dependency_dir(chart, dep) for dep in dependencies(chart)))]
    for folder in folders:
        if (folder / "Chart.yaml").is_file():
            for archive in stale_archives(folder):
                archive.unlink()
    result = run_helm(["dependency", "build", str(chart)])
    if result.returncode != 0 and "out of sync" in result.stderr:
        result = run_helm(["dependency", "update", "--skip-refresh", str(chart)])
    if result.returncode != 0:
        raise ChartError(f"helm dependency build {chart}: {result.stderr.strip()}")


def package(chart: Path, destination: Path) -> Path:
    """Build the chart's dependencies, then `helm package` it into destination; the .tgz path."""
    dependency_build(chart)
    destination.mkdir(parents=True, exist_ok=True)
    result = run_helm(["package", str(chart), "--destination", str(destination)])
    if result.returncode != 0:
        raise ChartError(f"helm package {chart}: {result.stderr.strip()}")
    meta = chart_meta(chart)
    archive = destination / f"{meta['name']}-{meta['version']}.tgz"
    if not archive.is_file():
        raise ChartError(f"helm package {chart}: {archive} was not written ({result.stdout.strip()})")
    return archive


def show_chart(chart: Path) -> dict[str, Any]:
    """`helm show chart` (a folder or a packaged .tgz) parsed."""
    result = run_helm(["show", "chart", str(chart)])
    if result.returncode != 0:
        raise ChartError(f"helm show chart {chart}: {result.stderr.strip()}")
    shown = yaml.safe_load(result.stdout)
    if not isinstance(shown, dict):
        raise ChartError(f"helm show chart {chart}: not a YAML mapping: {result.stdout[:200]}")
    return shown


def lint(chart: Path, *, values: Sequence[str] = ()) -> HelmResult:
    args = ["lint", "--strict", str(chart)]
    for value in values:
        args += ["--set", value]
    return run_helm(args)


def template(
    chart: Path,
    *,
    release: str = "gpuop",
    namespace: str = "gpu-operator",
    kube_version: str = "1.35.0",
    values: Sequence[str] = (),
    values_files: Sequence[Path] = (),
    api_versions: Sequence[str] = (),
    include_crds: bool = True,
) -> list[Manifest]:
    """`helm template` and parse the output into objects; raises ChartError with helm's message."""
    args = ["template", release, str(chart), "--namespace", namespace, "--kube-version", kube_version]
    if include_crds:
        args.append("--include-crds")
    for value in values:
        args += ["--set", value]
    for path in values_files:
        args += ["--values", str(path)]
    for api in api_versions:
        args += ["--api-versions", api]
    result = run_helm(args)
    if result.returncode != 0:
        raise ChartError(f"helm template {chart}: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def crd_schemas(manifests: Sequence[Manifest]) -> dict[tuple[str, str], dict[str, Any]]:
    """{(apiVersion, kind): openAPIV3Schema} for every CRD among the manifests."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in manifests:
        if doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc["spec"]
        for version in spec["versions"]:
            api_version = f"{spec['group']}/{version['name']}"
            schemas[(api_version, spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return schemas


def validate_manifests(
    manifests: Sequence[Manifest],
    kube_version: str,
    *,
    extra_crd_schemas: Mapping[tuple[str, str], dict[str, Any]] | None = None,
) -> list[str]:
    """Problems found, one line each naming kind/name; an empty list means all valid."""
    schemas = {**crd_schemas(manifests), **(extra_crd_schemas or {})}
    problems: list[str] = []
    for doc in manifests:
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        key = (doc.get("apiVersion", ""), doc.get("kind", ""))
        if key in schemas:
            for error in jsonschema.Draft7Validator(schemas[key]).iter_errors(doc):
                problems.append(f"{where}: {'.'.join(map(str, error.absolute_path))}: {error.message}")
            continue
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(map(str, error.path))
            problems.append(f"{where}: {path}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{where}: no schema for {key[0]} {key[1]} in Kubernetes {kube_version}")
    return problems


def _kubectl(kubeconfig: Path, args: Sequence[str], stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(find_binary("kubectl")), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise ChartError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
    return done.stdout


_APPLY = ["apply", "--validate=false", "-f", "-"]


def kubectl_install(
    kubeconfig: Path,
    chart: Path,
    *,
    namespace: str,
    release: str = "gpuop",
    values: Sequence[str] = (),
) -> list[Manifest]:
    """Install a chart the way `helm install` would, with `helm template` and the real kubectl.

    helm install itself needs protobuf, which the simulator does not speak, so: render, apply the
    namespace, apply the CRDs and wait until they are Established (a CR in the same apply would
    find no REST mapping, exactly as against a real server), then apply every other non-hook object.
    Returns the installed objects.
    """
    dependency_build(chart)
    manifests = template(chart, release=release, namespace=namespace, values=values)
    install_time = [m for m in manifests if "helm.sh/hook" not in (m["metadata"].get("annotations") or {})]
    crds = [m for m in install_time if m["kind"] == "CustomResourceDefinition"]
    rest = [m for m in install_time if m["kind"] != "CustomResourceDefinition"]
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    _kubectl(kubeconfig, _APPLY, yaml.safe_dump(ns))
    kubectl_apply_crds(kubeconfig, crds)
    if rest:
        _kubectl(kubeconfig, ["-n", namespace, *_APPLY], yaml.safe_dump_all(rest))
    return install_time


def install(
    kubeconfig: Path,
    chart: Path,
    *,
    namespace: str,
    release: str = "gpuop",
    values: Sequence[str] = (),
    values_files: Sequence[Path] = (),
    wait: bool = False,
    timeout: str = "5m",
) -> str:
    """The real `helm install --create-namespace` (hooks, release history); returns helm's output.

    Builds the chart's dependencies first (a fresh clone has none). Raises ChartError with helm's
    message when the install fails.
    """
    dependency_build(chart)
    args = [
        "install",
        release,
        str(chart),
        "-n",
        namespace,
        "--create-namespace",
        "--kubeconfig",
        str(kubeconfig),
    ]
    args += [arg for path in values_files for arg in ("--values", str(path))]
    args += [arg for value in values for arg in ("--set", value)]
    if wait:
        args += ["--wait", "--timeout", timeout]
    result = run_helm(args)
    if result.returncode != 0:
        raise ChartError(f"helm install {release} {chart}: {result.stderr.strip()}")
    return result.stdout


def user_commands(kubeconfig: Path, chart: Path, *, namespace: str, release: str = "gpuop") -> list[str]:
    """The helm commands a user can paste next against the same cluster."""
    try:
        binary = str(find_binary("helm"))
    except MissingBinaryError:
        binary = "helm"
    base = f"{binary} --kubeconfig {kubeconfig} -n {namespace}"
    return [
        f"{base} status {release}",
        f"{base} upgrade {release} {chart} --reuse-values --set metrics-exporter.enabled=false",
        f"{base} rollback {release} 1",
        f"{base} uninstall {release}",
    ]


def kubectl_apply_crds(kubeconfig: Path, crds: Sequence[Manifest]) -> None:
    """Apply CRDs and wait until they are Established (until then their kinds have no REST mapping)."""
    if not crds:
        return
    _kubectl(kubeconfig, _APPLY, yaml.safe_dump_all(crds))
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    _kubectl(kubeconfig, ["wait", "--for=condition=Established", *names, "--timeout=60s"])


def first_of_kind(manifests: Sequence[Manifest], kind: str) -> Manifest:
    """The first rendered object of `kind`; a clear error naming what was rendered when absent."""
    for doc in manifests:
        if doc.get("kind") == kind:
            return doc
    raise ChartError(f"no {kind} rendered (got: {sorted({str(d.get('kind')) for d in manifests})})")


def presence_label_keys(pod_spec: Mapping[str, Any]) -> list[str]:
    """Label keys of a pod spec's required node-affinity terms (a standalone chart's GPU selection)."""
    required = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [term["matchExpressions"][0]["key"] for term in required["nodeSelectorTerms"]]

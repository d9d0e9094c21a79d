"""Charts as a fresh clone has them: only what git tracks, no built `charts/*/charts/*.tgz`, no locks.

Each test copies the tracked files (`git ls-files`, symlinks kept as links) into a temp dir and runs
what a user, the docs, `make package`, the demo or the operator benchmark runs there. Issue 9: these
only ever worked after `make charts` had filled the git-ignored folders.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_sim import helm
from gpuop_sim.binaries import find_binary
from gpuop_sim.chartversions import read_version
from gpuop_sim.workloads.kubeapi import DAEMONSETS, KubeRest

from bench import bench_operator

ROOT = Path(__file__).resolve().parents[1]
KUBE_VERSIONS = ("1.29.0", "1.35.0")
# What a doc page's `make package` runs (checked against the Makefile below).
PACKAGE_RECIPE = "python tools/charts.py package"
# Pages whose helm commands a user is told to run; a page with helm commands but not here fails.
DOC_PAGES = (
    "docs/charts.md",
    "docs/config-manager.md",
    "docs/device-plugin.md",
    "docs/dra-driver.md",
    "docs/gpu-operator-chart.md",
    "docs/metrics-exporter.md",
    "docs/node-labeller.md",
    "docs/test-runner.md",
)

pytestmark = pytest.mark.slow


def fresh_clone(dest: Path) -> Path:
    """Copy the tracked charts, docs, tools and version files of the working tree into dest."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--", "charts", "docs", "tools", "VERSION", "Makefile"]
        + [str(p.relative_to(ROOT)) for p in ROOT.glob("services/*/pyproject.toml")],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        source, target = ROOT / rel, dest / rel
        if not (source.is_symlink() or source.exists()):
            continue  # deleted in the working tree, not committed yet
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    built = [p for p in dest.glob("charts/*/charts/*") if not p.is_symlink()]
    assert built == [], f"a fresh clone has no built dependencies, got {built}"
    return dest


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    return fresh_clone(tmp_path / "clone")


def chart_names() -> list[str]:
    return [chart.name for chart in helm.charts_in(ROOT / "charts")]


def assert_valid(manifests: list[dict[str, Any]], kube_version: str, crds_from: Path | None = None) -> None:
    """Every object valid; custom resources also against the CRDs in crds_from (a `crds/` folder)."""
    assert manifests, "nothing rendered"
    crds = (
        [d for f in sorted(crds_from.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
        if crds_from
        else []
    )
    problems = helm.validate_manifests(manifests, kube_version, extra_crd_schemas=helm.crd_schemas(crds))
    assert problems == []


def images(manifests: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    for doc in manifests:
        template = (doc.get("spec") or {}).get("template") or {}
        pod = (doc.get("spec") or {}) if doc.get("kind") == "Pod" else template.get("spec") or {}
        found += [c["image"] for c in pod.get("containers", []) + pod.get("initContainers", [])]
    return found


@pytest.mark.parametrize("name", chart_names())
def test_every_chart_builds_lints_and_renders_alone_with_plain_helm(clone: Path, name: str) -> None:
    chart = clone / "charts" / name
    if helm.chart_meta(chart).get("dependencies"):
        built = helm.run_helm(["dependency", "build", str(chart)])
        assert built.returncode == 0, built.stderr
    linted = helm.lint(chart)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    if helm.chart_meta(chart).get("type") == "library":
        return
    version = read_version(clone)
    minimum = str(helm.chart_meta(chart).get("kubeVersion", ""))
    for kube_version in KUBE_VERSIONS:
        if not supports(minimum, kube_version):
            # A chart that needs a newer API (dra-driver: resource.k8s.io/v1) must say so, not half-render.
            with pytest.raises(helm.ChartError, match="requires kubeVersion"):
                helm.template(chart, kube_version=kube_version)
            continue
        manifests = helm.template(chart, kube_version=kube_version)
        assert_valid(manifests, kube_version)
        assert all(image.endswith(f":{version}") for image in images(manifests)), images(manifests)


def supports(constraint: str, kube_version: str) -> bool:
    """Whether a Chart.yaml `kubeVersion` of the form `>=X.Y.Z[-0]` (or none) admits this version."""
    if not constraint:
        return True
    assert constraint.startswith(">="), f"unsupported kubeVersion constraint {constraint!r}"

    def parts(version: str) -> tuple[int, ...]:
        return tuple(int(p) for p in version.split("-", maxsplit=1)[0].split("."))

    return parts(kube_version) >= parts(constraint[2:])


def doc_commands(page: Path) -> list[str]:
    """The `helm` and `make package` lines of a page's fenced shell blocks, continuations joined."""
    blocks: list[list[str]] = []
    fence: str | None = None  # the open block's info string (language), None outside a block
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            if fence in ("", "sh", "bash"):
                blocks.append([])
        elif fence in ("", "sh", "bash"):
            blocks[-1].append(line)
    commands: list[str] = []
    for block in blocks:
        for line in "\n".join(block).replace("\\\n", " ").splitlines():
            command = line.split(" #", 1)[0].strip()
            if command.startswith("helm ") or command == "make package":
                commands.append(command)
    return commands


def test_every_page_with_helm_commands_is_checked() -> None:
    pages = [str(p.relative_to(ROOT)) for p in [*ROOT.glob("docs/*.md"), ROOT / "README.md"]]
    with_helm = sorted(page for page in pages if doc_commands(ROOT / page))
    assert with_helm == sorted(DOC_PAGES)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^package:.*\n\t\$\(RUN\) {re.escape(PACKAGE_RECIPE)}$", makefile, re.MULTILINE)


@pytest.mark.parametrize("page", DOC_PAGES)
def test_doc_commands_work_in_order_on_a_fresh_clone(clone: Path, page: str) -> None:
    """Each command as written, through bash in the clone; `helm install` as `helm template`.

    Helm 3.17's `helm install --dry-run=client` still wants a reachable cluster (helm/helm#13144),
    so an install is rendered with the same arguments instead, and the objects validated.
    """
    env = dict(os.environ, PATH=f"{find_binary('helm').parent}:{os.environ['PATH']}")
    commands = doc_commands(clone / page)
    assert any(c.startswith(("helm install ", "helm template ")) for c in commands), commands
    with helm.helm_home() as helm_env:
        env.update({k: v for k, v in helm_env.items() if k.startswith("HELM_")})
        for command in commands:
            run = command
            if command == "make package":
                run = f"{shlex.quote(sys.executable)} {PACKAGE_RECIPE.removeprefix('python ')}"
            elif command.startswith("helm install "):
                run = command.replace("helm install ", "helm template ", 1).replace(" --create-namespace", "")
                run += " --include-crds --kube-version 1.35.0"
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", run],
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, f"{page}: `{command}` failed:\n{done.stderr}"
            if command.startswith(("helm install ", "helm template ")):
                # A plain `helm template` leaves crds/ out: check custom resources against the chart's CRD.
                rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
                assert_valid(rendered, "1.35.0", crds_from=clone / "charts" / "crds" / "crds")


def test_make_package_writes_every_chart_with_its_dependencies_inside(clone: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, *PACKAGE_RECIPE.split()[1:]],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    version = read_version(clone)
    # Moved away from the clone: a package must need nothing beside it.
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(clone / "dist", elsewhere)
    assert sorted(p.name for p in elsewhere.iterdir()) == sorted(f"{n}-{version}.tgz" for n in chart_names())
    for archive in sorted(elsewhere.iterdir()):
        shown = helm.show_chart(archive)
        assert (shown["version"], shown["appVersion"]) == (version, version)
        with tarfile.open(archive) as tar:
            members = tar.getnames()
            assert not [m.name for m in tar.getmembers() if m.issym() or m.islnk()]
        for dep in shown.get("dependencies") or []:
            in_tree = f"{shown['name']}/charts/{dep['name']}/Chart.yaml"
            packed = f"{shown['name']}/charts/{dep['name']}-{dep['version']}.tgz"
            assert in_tree in members or packed in members, (archive.name, dep["name"])
        linted = helm.lint(archive)
        assert linted.returncode == 0, linted.stdout + linted.stderr
        if shown.get("type") == "library":
            continue
        manifests = helm.template(archive, kube_version="1.35.0")
        assert_valid(manifests, "1.35.0")
        assert all(image.endswith(f":{version}") for image in images(manifests)), images(manifests)


def test_umbrella_package_holds_each_subchart_with_gpuop_lib(clone: Path, tmp_path: Path) -> None:
    archive = helm.package(clone / "charts" / "gpu-operator", tmp_path / "dist")
    version = read_version(clone)
    with tarfile.open(archive) as tar:
        members = tar.getnames()
    # helm package stores the subcharts it loaded unpacked, each with its own in-tree gpuop-lib.
    services = ("crds", "operator", "device-plugin", "node-labeller", "metrics-exporter", "test-runner")
    for service in (*services, "config-manager"):
        assert f"gpu-operator/charts/{service}/charts/gpuop-lib/templates/_names.tpl" in members
    assert helm.show_chart(archive)["version"] == version


def test_demo_installs_the_umbrella_from_a_fresh_clone(clone: Path) -> None:
    """`make demo` (`python -m gpuop_sim.demo $(DEMO_ARGS)`) with --duration, stub pods to stay cheap."""
    args = ["--amd-nodes", "1", "--nvidia-nodes", "1", "--pods", "stub", "--duration", "2", "--no-live"]
    done = subprocess.run(
        [sys.executable, "-m", "gpuop_sim.demo", *args, "--chart", str(clone / "charts" / "gpu-operator")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, COLUMNS="220"),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Cannot install" not in done.stdout, done.stdout
    assert "Installed gpu-operator into namespace gpu-operator" in done.stdout, done.stdout


def test_operator_benchmark_installs_the_operands_from_a_fresh_clone(clone: Path, sim_apiserver: Any) -> None:
    rest = KubeRest.from_kubeconfig(sim_apiserver.write_kubeconfig(clone / "kubeconfig"))
    try:
        bench_operator.install_operands(rest, clone / "charts" / "gpu-operator")
        daemonsets, _ = rest.list(DAEMONSETS, bench_operator.NAMESPACE)
    finally:
        rest.close()
    assert sorted(d["metadata"]["name"] for d in daemonsets) == [
        "gpuop-config-manager",
        "gpuop-device-plugin",
        "gpuop-device-plugin-mps",  # the MPS control daemon: on by default, on MPS nodes only
        "gpuop-dra-driver",  # the simulated server serves resource.k8s.io/v1
        "gpuop-metrics-exporter",
        "gpuop-node-labeller",
        "gpuop-test-runner",
    ]


def test_make_charts_passes_on_a_fresh_clone_and_fails_on_a_stale_version(clone: Path) -> None:
    def make_charts() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "tools/charts.py"],
            cwd=clone,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    done = make_charts()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok      charts/gpu-operator" in done.stdout
    version = read_version(clone)
    (clone / "VERSION").write_text("0.0.0-stale\n")
    done = make_charts()
    assert done.returncode == 1
    assert f"charts/operator/Chart.yaml: version is '{version}', VERSION says '0.0.0-stale'" in done.stderr
    assert "python tools/charts.py versions" in done.stderr


@pytest.mark.parametrize("name", [n for n in chart_names() if n != "gpuop-lib"])
def test_helm_install_client_dry_run_on_a_fresh_clone(clone: Path, name: str, sim_apiserver: Any) -> None:
    """`helm install --dry-run=client`, which Helm 3.17 only runs with a reachable cluster (helm#13144).

    Against the simulated API server, whose OpenAPI documents helm validates every object with, and
    the CRD applied first because a client dry run installs no CRDs, so it finds no kind for the
    DeviceConfigs, as it would on a real cluster. Unlike `helm template`, this renders NOTES.txt.
    """
    kubeconfig = sim_apiserver.write_kubeconfig(clone / "kubeconfig")
    crd = helm.template(clone / "charts" / "crds", include_crds=True)
    helm.kubectl_apply_crds(kubeconfig, [d for d in crd if d["kind"] == "CustomResourceDefinition"])
    chart = clone / "charts" / name
    if helm.chart_meta(chart).get("dependencies"):
        assert helm.run_helm(["dependency", "build", str(chart)]).returncode == 0
    args = ["install", "gpuop", str(chart), "-n", "gpu-operator", "--kubeconfig", str(kubeconfig)]
    done = helm.run_helm([*args, "--dry-run=client"])
    assert done.returncode == 0, done.stderr
    assert "STATUS: pending-install" in done.stdout
    if (chart / "templates" / "NOTES.txt").is_file():
        assert "\nNOTES:\n" in done.stdout

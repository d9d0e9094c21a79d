"""The monorepo keeps the shape the design card fixes (docs/development.md, docs/adding-a-service.md)."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from gpuop_sim.binaries import find_binary

ROOT = Path(__file__).resolve().parents[1]
SERVICES = sorted(p for p in (ROOT / "services").glob("*") if p.is_dir())
MEMBERS = sorted(p for p in (ROOT / "libs").glob("*") if p.is_dir()) + SERVICES


def load_toml(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text())


def test_workspace_root_is_virtual_with_one_lock() -> None:
    root = load_toml(ROOT / "pyproject.toml")
    tool = root["tool"]
    assert isinstance(tool, dict)
    assert tool["uv"]["package"] is False
    assert tool["uv"]["workspace"]["members"] == ["libs/*", "services/*"]
    assert (ROOT / "uv.lock").is_file()
    assert not list(ROOT.glob("*/*/uv.lock")), "members must share the root uv.lock"


def test_libs_are_common_sim_and_the_kubectl_plugin() -> None:
    # kubectl gpuop runs on an admin's machine: no image, no chart, so not a service (development.md).
    assert {p.name for p in (ROOT / "libs").iterdir() if p.is_dir()} == {"common", "sim", "kubectl"}


@pytest.mark.parametrize("member", MEMBERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_member_is_its_own_distribution(member: Path) -> None:
    project = load_toml(member / "pyproject.toml")["project"]
    assert isinstance(project, dict)
    assert project["name"] == f"gpuop-{member.name}"
    package = member / "src" / f"gpuop_{member.name.replace('-', '_')}"
    assert (package / "__init__.py").is_file()
    tests = list((member / "tests").glob("test_*.py"))
    assert tests, f"{member} has no tests"


@pytest.mark.parametrize("service", SERVICES, ids=lambda p: p.name)
def test_service_has_dockerfile_chart_contracts_and_tox_env(service: Path) -> None:
    dockerfile = (service / "Dockerfile").read_text()
    # Files taken from the build context (COPY --from=<stage> copies between stages, not from it).
    copied = [
        m.group(2)
        for m in re.finditer(r"^COPY\s+((?:--\S+\s+)*)(\S+)", dockerfile, flags=re.MULTILINE)
        if "--from=" not in m.group(1)
    ]
    # tools/slim_venv.py: the one build-stage step every image shares (it trims the venv).
    allowed = ("pyproject.toml", "uv.lock", "libs/", f"services/{service.name}/", "tools/slim_venv.py")
    assert all(src.startswith(allowed) for src in copied), f"{service.name} Dockerfile copies {copied}"
    assert (ROOT / "charts" / service.name / "Chart.yaml").is_file()
    package = f"gpuop_{service.name.replace('-', '_')}"
    linter = load_toml(ROOT / "pyproject.toml")["tool"]["importlinter"]  # type: ignore[index]
    assert package in linter["root_packages"]
    assert f"[testenv:{service.name}]" in (ROOT / "tox.ini").read_text()


def test_readme_gives_the_two_commands_and_ci_runs_the_test_one() -> None:
    """The README's test commands are exactly the ones CI runs, in the same order."""
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make demo\b", readme, flags=re.MULTILINE)
    documented = [
        line.split("#")[0].strip() for line in readme.splitlines() if re.match(r"make test(-\S+)?\b", line)
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    run = [line.strip() for line in ci.splitlines() if line.startswith("make ")]
    assert documented == run == ["make test", "make test-images"]


def test_makefile_has_every_documented_target() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in ("install", "test", "lint", "demo", "bench", "protos", "charts"):
        assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE), target


@pytest.mark.parametrize(("tool", "version"), [("helm", "v3.17."), ("kubectl", "v1.32.")])
def test_real_helm_and_kubectl_are_installed(tool: str, version: str) -> None:
    args = ["version", "--short"] if tool == "helm" else ["version", "--client"]
    out = subprocess.run([find_binary(tool), *args], capture_output=True, text=True, check=True).stdout
    assert version in out


# Where product code might read the developers' shared/ folder, which users never have (issue 27).
SHARED_READERS = re.compile(r"shared_dir|GPUOP_SHARED_DIR|\.\./shared\b|[\"'/]shared/")
PRODUCT_SOURCES = (
    *(str(src.relative_to(ROOT)) for src in sorted(ROOT.glob("libs/*/src"))),
    "services",
    "bench",
    "charts",
    "Makefile",
)


def test_nothing_the_product_the_simulator_the_demo_or_bench_runs_reads_shared() -> None:
    listed = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            *PRODUCT_SOURCES,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    sources = [
        rel
        for rel in listed
        if rel.endswith((".py", ".yml", ".yaml", ".tpl", ".json", "Makefile", "Dockerfile"))
        and "/tests/" not in f"/{rel}"
        and (ROOT / rel).is_file()
    ]
    assert len(sources) > 100, sources  # the listing itself worked
    readers = [
        f"{rel}:{number}: {line.strip()}"
        for rel in sources
        for number, line in enumerate((ROOT / rel).read_text(errors="replace").splitlines(), 1)
        if SHARED_READERS.search(line)
    ]
    assert readers == [], "ship the data in the package instead (tools/vendor_openapi.py):\n" + "\n".join(
        readers
    )

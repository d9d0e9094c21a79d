"""The recorded OpenAPI documents ship inside gpuop_sim (issue 27): current against shared/, only
what is served, a clear 503 and one log line when the package's archive is broken, and the demo
naming that cause instead of helm's "unable to respond with a content type"."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpuop_sim import demo
from gpuop_sim.apiserver import SimApiServer, openapi
from gpuop_sim.apiserver.resources import ResourceRegistry
from rich.console import Console

from tools.shared_fixtures import shared_dir

ROOT = Path(__file__).resolve().parents[3]
RECORDED = shared_dir() / "fixtures" / "kube-apiserver-1.36" / "openapi"


def _clear_caches() -> None:
    for loader in (
        openapi._recorded,
        openapi.load_error,
        openapi._builtin_documents,
        openapi._example,
        openapi.builtin_v2,
        openapi._builtin_components,
        openapi._kind_schema_names,
    ):
        loader.cache_clear()


@pytest.fixture
def broken_archive(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The package's archive replaced by request.param: 'missing' or 'corrupt' bytes."""
    path = tmp_path / openapi.ARCHIVE
    if request.param == "corrupt":
        path.write_bytes(b"this is not xz")
    monkeypatch.setattr(openapi, "archive_path", lambda: path)
    _clear_caches()
    yield path
    monkeypatch.undo()
    _clear_caches()


def test_packaged_archive_is_current_with_the_recorded_documents() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "vendor_openapi.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_package_holds_exactly_what_is_served() -> None:
    members = openapi.read_archive(openapi.archive_path().read_bytes())
    registry = ResourceRegistry()
    served = {openapi.gv_path(g, v) for g, versions in registry.groups() for v in versions} | {"api/v1"}
    v3 = {
        "/".join(n.removeprefix("v3/").removesuffix(".json").split("_"))
        for n in members
        if n.startswith("v3/")
    }
    recorded = {"/".join(p.stem.split("_")) for p in (RECORDED / "v3").glob("*.json")}
    example = "crd-example/apis/gpuop.dev/v1alpha1"
    assert v3 - {example} == served & recorded
    assert "apis/authentication.k8s.io/v1" in recorded - v3  # recorded but not served: left out
    assert members["v2.json"] == (RECORDED / "v2.json").read_bytes()
    # Every built-in group-version the server serves has its recorded document.
    assert set(openapi.OpenApi(registry).documents()) == served & recorded
    assert openapi.archive_path().stat().st_size < 400_000  # compressed: ~0.2 MB for 7 MB of JSON


@pytest.mark.parametrize("broken_archive", ["missing", "corrupt"], indirect=True)
def test_a_broken_archive_answers_503_naming_the_cause_logged_once(
    broken_archive: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger=openapi.__name__)
    with SimApiServer(controllers=False) as srv:
        for path in ("/openapi/v3", "/openapi/v3/apis/apps/v1", "/openapi/v2"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(srv.url + path, timeout=10)
            status = json.loads(refused.value.read())
            assert refused.value.code == 503
            assert status["reason"] == "ServiceUnavailable"
            assert str(broken_archive) in status["message"]
            assert "reinstall gpuop-sim" in status["message"]
        # The rest of the API still works: a create with strict field validation goes through.
        request = urllib.request.Request(
            srv.url + "/api/v1/namespaces?fieldValidation=Strict",
            data=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as created:
            assert created.status == 201
    said = [r for r in caplog.records if "OpenAPI unavailable" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]


@pytest.mark.parametrize("broken_archive", ["missing"], indirect=True)
def test_demo_names_the_cause_instead_of_installing(broken_archive: Path, tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: chart\nversion: 0.1.0\n")
    console = Console(width=400, record=True)
    installed = demo.install_operator_chart(None, chart, console)  # type: ignore[arg-type]
    assert installed is False
    said = console.export_text()
    assert "has no OpenAPI documents" in said
    assert str(broken_archive) in said

"""The DeviceConfig CRD: built from the models, kept current in charts/crds, served by an apiserver."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.config import DeviceConfigSpec, structural_problems
from gpuop_operator import crdgen
from gpuop_operator.crd import CRD_NAME, device_config_crd
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tools.shared_fixtures import shared_dir

REPO = Path(__file__).resolve().parents[3]
CHART_CRD = REPO / "charts" / "crds" / "crds" / f"{CRD_NAME}.yaml"


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    versions: list[dict[str, Any]] = crd["spec"]["versions"]
    assert len(versions) == 1
    return versions[0]


def test_generated_files_are_current_with_the_models() -> None:
    assert CHART_CRD.read_text() == crdgen.render_crd_yaml(), (
        "charts/crds is stale: run `python -m gpuop_operator.crdgen`"
    )
    assert crdgen.main(["--check", "--root", str(REPO)]) == 0


def test_check_mode_fails_on_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crdgen.main(["--root", str(tmp_path)]) == 0
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0
    crd = tmp_path / "charts" / "crds" / "crds" / f"{CRD_NAME}.yaml"
    crd.write_text(crd.read_text().replace("gpudc", "oldname"))
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 1
    assert "stale" in capsys.readouterr().err


def test_spec_schema_is_the_models_schema_and_structural() -> None:
    schema = _version(device_config_crd())["schema"]["openAPIV3Schema"]
    assert structural_problems(schema) == []
    spec = schema["properties"]["spec"]
    for section in ("driver", "devicePlugin", "nodeLabeller", "metricsExporter", "testRunner"):
        assert "enable" in spec["properties"][section]["properties"], section
    for section in ("configManager", "remediation", "selector", "vendor"):
        assert section in spec["properties"]
    assert spec["properties"]["vendor"]["enum"] == ["auto", "amd", "nvidia"]
    # Every model default is in the schema, so the apiserver fills the same defaults the agents use.
    assert spec["properties"]["devicePlugin"]["properties"]["enable"]["default"] is True
    assert DeviceConfigSpec().device_plugin.enable is True


def test_crd_follows_the_conventions_of_the_recorded_real_crd() -> None:
    # The fixture CRD was accepted by a real kube-apiserver 1.36; ours must use the same shapes for
    # what both have: status subresource, list-map conditions, an Age column, listKind.
    reference = json.loads(
        (shared_dir() / "fixtures" / "kube-apiserver-1.36" / "crd-deviceconfig.json").read_text()
    )
    ours, theirs = _version(device_config_crd()), _version(reference)
    assert ours["subresources"] == theirs["subresources"] == {"status": {}}
    conditions = ours["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    ref_conditions = theirs["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    for key in ("x-kubernetes-list-type", "x-kubernetes-list-map-keys"):
        assert conditions[key] == ref_conditions[key]
    assert conditions["items"]["required"] == ref_conditions["items"]["required"]
    assert ours["additionalPrinterColumns"][-1] == theirs["additionalPrinterColumns"][-1]
    assert device_config_crd()["spec"]["names"]["listKind"] == "DeviceConfigList"
    assert device_config_crd()["spec"]["names"]["shortNames"] == ["gpudc"]


def test_committed_yaml_parses_to_the_generated_object() -> None:
    assert yaml.safe_load(CHART_CRD.read_text()) == device_config_crd()


@pytest.mark.slow
def test_apiserver_accepts_the_crd_and_serves_printer_columns(kube_api_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(kube_api_client)
    ext.create_custom_resource_definition(client.V1CustomResourceDefinition.from_dict(device_config_crd()))
    custom = client.CustomObjectsApi(kube_api_client)
    body = {
        "apiVersion": "gpuop.dev/v1alpha1",
        "kind": "DeviceConfig",
        "metadata": {"name": "gpus"},
        "spec": {"vendor": "amd", "metricsExporter": {"port": 5001}},
    }
    stored = custom.create_namespaced_custom_object("gpuop.dev", "v1alpha1", "default", "deviceconfigs", body)
    # Defaults apply inside sections present in the CR, as on a real apiserver.
    assert stored["spec"]["metricsExporter"]["enable"] is True
    status = {
        "status": {
            "selectedNodes": 3,
            "readyNodes": 1,
            "conditions": [{"type": "Ready", "status": "False", "reason": "Progressing"}],
        }
    }
    patched = custom.patch_namespaced_custom_object_status(
        "gpuop.dev", "v1alpha1", "default", "deviceconfigs", "gpus", status
    )
    assert patched["status"]["readyNodes"] == 1
    with pytest.raises(ApiException) as bad:
        custom.create_namespaced_custom_object(
            "gpuop.dev",
            "v1alpha1",
            "default",
            "deviceconfigs",
            {**body, "metadata": {"name": "bad"}, "spec": {"vendor": "intel"}},
        )
    assert bad.value.status == 422
    assert "spec.vendor" in (bad.value.body or "")


def test_generated_crd_passes_the_real_servers_crd_rules() -> None:
    """The structural and CEL rules kube-apiserver 1.36 runs on a CRD create (gpuop_sim.crdschema)."""
    from gpuop_sim.apiserver.crdschema import crd_problems

    assert crd_problems(device_config_crd()) == []


def test_crd_rules_catch_the_shapes_a_real_server_refused() -> None:
    """Bad inputs: a description on root metadata, and a label-key regex over an unbounded map."""
    from gpuop_sim.apiserver.crdschema import crd_problems

    crd = device_config_crd()
    schema = _version(crd)["schema"]["openAPIV3Schema"]
    schema["properties"]["metadata"] = {"type": "object", "description": "Standard object metadata."}
    labels = schema["properties"]["spec"]["properties"]["selector"]["properties"]["matchLabels"]
    # The label-key regex the generator once wrote (a 114-byte pattern: 1.30x over on its own).
    key = (
        r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
    )
    labels["x-kubernetes-validations"] = [{"rule": f"self.all(k, k.matches(r'{key}'))"}]
    causes = crd_problems(crd)
    fields = [c["field"] for c in causes]
    assert "spec.validation.openAPIV3Schema.properties[metadata]" in fields
    rule_field = (
        "spec.validation.openAPIV3Schema.properties[spec].properties[selector]"
        ".properties[matchLabels].x-kubernetes-validations[0].rule"
    )
    assert rule_field in fields
    assert any("estimated rule cost exceeds budget" in c["message"] for c in causes)

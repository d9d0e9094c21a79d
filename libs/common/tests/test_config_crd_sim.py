"""The generated DeviceConfig schema, registered as a CRD on the simulated apiserver, guards real CRs."""

from __future__ import annotations

from typing import Any

import pytest
from gpuop_common.config import DeviceConfigSpec, device_config_openapi_schema
from kubernetes import client
from kubernetes.client.exceptions import ApiException


def _crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "deviceconfigs.gpuop.dev"},
        "spec": {
            "group": "gpuop.dev",
            "scope": "Namespaced",
            "names": {
                "plural": "deviceconfigs",
                "singular": "deviceconfig",
                "kind": "DeviceConfig",
                "shortNames": ["gpudc"],
            },
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": device_config_openapi_schema()},
                }
            ],
        },
    }


@pytest.fixture
def custom(kube_api_client: client.ApiClient) -> client.CustomObjectsApi:
    crd = client.V1CustomResourceDefinition.from_dict(_crd())
    client.ApiextensionsV1Api(kube_api_client).create_custom_resource_definition(crd)
    return client.CustomObjectsApi(kube_api_client)


def _create(custom: client.CustomObjectsApi, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "gpuop.dev/v1alpha1",
        "kind": "DeviceConfig",
        "metadata": {"name": name},
        "spec": spec,
    }
    result: dict[str, Any] = custom.create_namespaced_custom_object(
        "gpuop.dev", "v1alpha1", "default", "deviceconfigs", body
    )
    return result


@pytest.mark.slow
def test_valid_spec_is_stored_and_parses_back(custom: client.CustomObjectsApi) -> None:
    spec = {
        "vendor": "amd",
        "driver": {"enable": True, "upgradePolicy": {"maxUnavailableNodes": 2}},
        "metricsExporter": {"extraLabels": {"cluster_name": "lab"}},
    }
    stored = _create(custom, "amd", spec)
    parsed = DeviceConfigSpec.model_validate(stored["spec"])
    assert parsed.driver.enable is True
    assert parsed.driver.upgrade_policy.max_unavailable_nodes == 2
    # The apiserver filled scalar defaults from the schema; they are the model's defaults.
    assert parsed == DeviceConfigSpec.model_validate(spec)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"vendor": "intel"}, "spec.vendor"),
        ({"metricsExporter": {"port": 70000}}, "spec.metricsExporter.port"),
        ({"devicePlugin": {"migStrategy": "auto"}}, "spec.devicePlugin.migStrategy"),
        ({"driver": {"upgradePolicy": {"maxParallelUpgrades": -1}}}, "maxParallelUpgrades"),
    ],
)
def test_invalid_spec_is_rejected_naming_the_field(
    custom: client.CustomObjectsApi, spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as raised:
        _create(custom, "bad", spec)
    assert raised.value.status == 422
    assert field in (raised.value.body or "")

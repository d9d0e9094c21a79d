"""Resource-name rules the kubelet applies to device plugin registrations, and DRA service choice."""

from __future__ import annotations

import pytest
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import dra


@pytest.mark.parametrize("name", ["amd.com/gpu", "nvidia.com/gpu", "amd.com/cpx_nps4", "example.io/a.b-c"])
def test_extended_resource_names_accepted(name: str) -> None:
    assert dp.is_extended_resource_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "gpu",  # no domain: native resource
        "kubernetes.io/gpu",  # native domain
        "foo.kubernetes.io/gpu",
        "requests.amd.com/gpu",  # quota prefix
        "amd.com/",  # empty name
        "/gpu",
        "AMD.com/gpu",  # prefix must be a lowercase DNS subdomain
        "amd.com/gpu/extra",
        "amd.com/-gpu",
        "amd.com/" + "g" * 64,
        "",
    ],
)
def test_bad_resource_names_refused(name: str) -> None:
    assert not dp.is_extended_resource_name(name)


def test_health_is_exact_string() -> None:
    assert dp.is_healthy("Healthy")
    assert not dp.is_healthy("healthy")
    assert not dp.is_healthy("")


def test_dra_service_chosen_in_plugin_order() -> None:
    assert dra.choose_service(["v1beta1.DRAPlugin", "v1.DRAPlugin"]) == "v1beta1.DRAPlugin"
    assert dra.choose_service(["v1alpha1.DRAResourceHealth", "v1.DRAPlugin"]) == "v1.DRAPlugin"
    assert dra.choose_service(["v1alpha3.DRAPlugin"]) is None
    assert dra.choose_service([]) is None

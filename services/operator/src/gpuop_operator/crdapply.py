"""Create or update the DeviceConfig CRD on the cluster (`gpuop-operator --apply-crd`).

Helm installs the CRDs in a chart's crds/ folder but never upgrades them; the umbrella chart's
pre-upgrade hook runs this so a new schema reaches clusters installed with an older chart.
"""

from __future__ import annotations

import logging
from typing import Any

from gpuop_common.retry import kube_retry
from kubernetes.client.exceptions import ApiException

from gpuop_operator.crd import CRD_NAME, device_config_crd
from gpuop_operator.kubeio import CRDS, KubeJson

log = logging.getLogger(__name__)


def _contains(current: Any, wanted: Any) -> bool:
    """Whether `current` holds everything in `wanted` (the apiserver adds defaults of its own)."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(_contains(current.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return (
            isinstance(current, list)
            and len(current) == len(wanted)
            and all(_contains(c, w) for c, w in zip(current, wanted, strict=True))
        )
    return bool(current == wanted)


@kube_retry()
def apply_crd(kube: KubeJson) -> str:
    """Returns "created", "updated" or "unchanged"; re-reads on every attempt so a 409 resolves itself."""
    wanted = device_config_crd()
    try:
        current = kube.get(CRDS, CRD_NAME)
    except ApiException as exc:
        if exc.status != 404:
            raise
        kube.create(CRDS, wanted)
        log.info("created CRD", extra={"crd": CRD_NAME})
        return "created"
    if _contains(current.get("spec"), wanted["spec"]) and _contains(
        current.get("metadata"), wanted["metadata"]
    ):
        return "unchanged"
    body = {
        **wanted,
        "metadata": {**wanted["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
    }
    kube.replace(CRDS, CRD_NAME, body)
    log.info("updated CRD", extra={"crd": CRD_NAME})
    return "updated"

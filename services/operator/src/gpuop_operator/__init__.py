"""gpuop operator: reconciles DeviceConfigs into per-node rollout labels, settings and status.

Layers: `crd` (the CRD manifest), `selector`/`validation`/`plan`/`status` (pure functions over plain
dicts), `kubeio`/`cache` (API I/O and watch caches), `reconciler` (applies plans), `main` (wiring).
"""

"""gpuop kubelet device plugin: AMD and NVIDIA GPUs, per-GPU health, topology-aware allocation.

Layers: `inventory`, `health`, `topology`, `allocation`, `cdi` are pure functions over the
gpuop_common GPU models; `manager` reads the backends; `plugin` and `server` are the gRPC edge;
`service` keeps them in step; `main` is the console script.
"""

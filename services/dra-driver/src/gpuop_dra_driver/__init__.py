"""gpuop DRA driver (`gpu.gpuop.dev`): a node's GPUs and partitions through resource.k8s.io/v1.

Layers: `devices` (GPUs -> DRA devices), `slices` (devices -> ResourceSlices), `claims` (a claim's
allocation -> this node's devices), `cdi` (claim -> CDI spec) and `checkpoint` are pure or touch
one file; `inventory` reads the backends, `publisher` writes ResourceSlices, `driver` prepares and
unprepares claims; `server` is the gRPC edge (registration and DRAPlugin v1/v1beta1); `main` wires.
"""

DRIVER_NAME = "gpu.gpuop.dev"

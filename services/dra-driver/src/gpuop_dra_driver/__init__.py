"""gpuop DRA driver (`gpu.gpuop.dev`): a node's GPUs and partitions through resource.k8s.io/v1.

Layers: `devices` (GPUs -> DRA devices), `health` (health reports -> each device's health),
`slices` (devices -> ResourceSlices), `claims` (a claim's allocation -> this node's devices), `cdi`
(claim -> CDI spec) and `checkpoint` are pure or touch one file; `inventory` reads the backends,
`healthfeed` hands the latest health to the kubelet's health streams, `publisher` writes
ResourceSlices, `driver` prepares and unprepares claims; `server` is the gRPC edge (registration,
DRAPlugin v1/v1beta1, DRAResourceHealth v1alpha1); `main` wires.
"""

DRIVER_NAME = "gpu.gpuop.dev"

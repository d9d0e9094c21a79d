"""gpuop test runner: validates a node's GPUs on demand, when one turns unhealthy, and before workloads."""

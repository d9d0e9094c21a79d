"""gpuop metrics exporter: GPU telemetry as Prometheus metrics, attributed to the pods using the GPUs."""

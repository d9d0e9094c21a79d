"""gpuop_sim: a simulated cluster for tests, `make demo` and benchmarks. Never imported by a service."""

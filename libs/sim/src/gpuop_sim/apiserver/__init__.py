"""In-memory Kubernetes API server for tests, the demo and benchmarks (see docs/sim-apiserver.md)."""

from gpuop_sim.apiserver.controllers import ALL_CONTROLLERS
from gpuop_sim.apiserver.faults import Faults
from gpuop_sim.apiserver.server import SimApiServer

__all__ = ["ALL_CONTROLLERS", "Faults", "SimApiServer"]

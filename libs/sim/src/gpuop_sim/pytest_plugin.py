"""Pytest fixtures shared by every package's tests (registered through the pytest11 entry point).

Each area of the simulator keeps its fixtures next to its code; this module only gathers them so a
service's tests get `sim_apiserver`, fixture GPU roots and the kubelet emulator with no imports.
"""

from gpuop_sim.apiserver.fixtures import *  # noqa: F403
from gpuop_sim.debian_root_fixtures import *  # noqa: F403
from gpuop_sim.kubelet.fixtures import *  # noqa: F403
from gpuop_sim.nodes.fixtures import *  # noqa: F403
from gpuop_sim.oci_fixtures import *  # noqa: F403

"""Pytest fixtures for this area; re-exported by gpuop_sim.pytest_plugin."""

"""gpuop_common: the one library every gpuop service is built from."""

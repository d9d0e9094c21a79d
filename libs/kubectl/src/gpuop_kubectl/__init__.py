"""gpuop_kubectl: the `kubectl gpuop` plugin (status table, doctor, must-gather). Reads only."""

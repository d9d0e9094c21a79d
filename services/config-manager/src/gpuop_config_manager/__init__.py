"""gpuop config manager: applies GPU partition profiles (AMD compute/memory partitions, NVIDIA MIG)."""

"""CPU kernels in C for the torch engine's decode steps (few rows, bandwidth-bound)."""

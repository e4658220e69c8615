"""decodelab framework: Hydra entry point, config -> arrays, Numba kernel, metrics, tracking."""

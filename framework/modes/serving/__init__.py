"""decodelab.modes.serving: request-level continuous batching. Requests as arrays
(workload), the Numba scheduler (scheduler), its pure-Python mirror (reference), the run
(simulate) and its metrics (metrics)."""

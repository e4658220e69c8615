"""decodelab.core: a config node in, a Result out. Validation (checks), components -> plain
arrays (build), the Numba kernel and its pure-Python reference, KV-policy costs, metrics, the
Result type and the typed schemas. No Hydra, no MLflow, no files."""

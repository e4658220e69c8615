"""Calibration of hardware parameters from independent measurements: per-shape operator laws
fitted to operator microbenchmarks (`decodelab fit-hardware`, docs/model.md, "Per-shape operator
laws"; docs/extending.md, "Fit a chip from microbenchmarks"). Pure numpy/scipy/pandas over files the
caller names; knows no Hydra, MLflow or serving rows. Sits beside decodelab.modes
and decodelab.fidelity: it uses decodelab.core (the laws) only."""

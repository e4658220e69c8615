"""decodelab.runs: many designs at once: sweep execution in worker processes (sweep, items),
the papers' claims, validation against measured serving rows, multi-objective search. Uses
config, modes, output and tracking; knows neither Hydra nor MLflow directly."""

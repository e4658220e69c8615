"""decodelab.output: what a person reads of a result: result.json, steps.csv, plots, the
terminal tables and progress bars. No MLflow."""

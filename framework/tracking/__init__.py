"""decodelab.tracking: the only code that knows MLflow: runs, sweep parents, the recorder
of fast sweeps, sync of results that did not reach the tracker, resume by config hash."""

"""decodelab.apps: the `decodelab` command. One module per subcommand (`add_arguments`, `run`)
declared in one table (cli.COMMANDS), the Hydra app (run) and its MLflow callback (callbacks).
Parsing, printing and wiring only."""

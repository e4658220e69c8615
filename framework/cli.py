"""`decodelab` console script. Plain `decodelab [overrides]` and `decodelab -m ...` are the Hydra
app (framework/app.py); a first word naming a subcommand runs that tool instead, with the rest of
the command line passed to it as Hydra overrides."""
from __future__ import annotations

import sys

SUBCOMMANDS = {
    "bench": ("framework.bench", "main", "time one decode-step evaluation and the Numba speedup"),
    "claims": ("framework.claims", "main", "run the claim sweeps in sweeps/ and compare with the papers"),
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        import importlib
        mod, fn, _ = SUBCOMMANDS[sys.argv.pop(1)]
        sys.exit(getattr(importlib.import_module(mod), fn)(sys.argv[1:]))
    from framework.app import job
    job()


if __name__ == "__main__":
    main()

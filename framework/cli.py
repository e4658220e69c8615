"""`decodelab` console script. Plain `decodelab [overrides]` and `decodelab -m ...` are the Hydra
app (framework/app.py); a first word naming a subcommand runs that tool instead, with the rest of
the command line passed to it as Hydra overrides."""
from __future__ import annotations

import sys

SUBCOMMANDS = {
    "bench": ("framework.bench", "main", "time one decode-step evaluation and the Numba speedup"),
    "claims": ("framework.claims", "main", "run the claim sweeps in sweeps/ and compare with the papers"),
    "fidelity": ("framework.fidelity.report", "main", "KV-policy accuracy on a real small model (SmolLM2-135M): passkey + text"),
    "coe-plot": ("framework.coe", "main", "Composition of Experts: latency vs number of experts per platform"),
    "validate": ("framework.serving_validate", "main", "serving simulation vs measured TTFT/TPOT (csv=PATH)"),
    "sweep": ("framework.sweep", "main", "fast in-process sweep of a sweeps/ file or overrides (-j workers)"),
    "search": ("framework.search", "main", "multi-objective design-space search (Optuna) over a space YAML"),
    "sync": ("framework.sync", "main", "upload results that did not reach the tracker (idempotent)"),
    "compare": ("framework.compare", "main", "put MLflow runs side by side; export CSV"),
    "kvplot": ("framework.kvplot", "main", "KV-policy trade-off plot + CSV of a sweep's results (DIR)"),
}

ARGPARSE = {"framework.sweep", "framework.search", "framework.compare", "framework.sync"}  # own --help


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        import importlib
        mod, fn, _ = SUBCOMMANDS[sys.argv.pop(1)]
        module = importlib.import_module(mod)
        if {"-h", "--help"} & set(sys.argv[1:]) and mod not in ARGPARSE:
            # the subcommand's usage and what it does
            print("\n\n".join(d.strip() for d in (getattr(module, fn).__doc__, module.__doc__)
                              if d and d.strip()))
            sys.exit(0)
        sys.exit(getattr(module, fn)(sys.argv[1:]))
    from framework.app import EXIT_STATUS, job
    job()
    sys.exit(EXIT_STATUS[0])


if __name__ == "__main__":
    main()

"""The `decodelab` console script: one table of subcommands, one parsing style.

`decodelab [OVERRIDES]` and `decodelab -m [OVERRIDES]` are the Hydra app (decodelab.apps.run):
one design, or a multirun. A first word naming a subcommand runs it (each module's
`add_arguments` / `run`, decodelab.apps.common); Hydra overrides (KEY=VALUE) are positional
arguments everywhere. An unknown first word is one error line with the nearest names."""

from __future__ import annotations

import difflib
import importlib
import sys
from typing import Dict, List, Optional, Tuple

import decodelab
from decodelab.apps.common import errors, quiet_on_closed_pipe, run_module

# name -> (module, one-line summary): the one table `decodelab --help` lists
COMMANDS: Dict[str, Tuple[str, str]] = {
    "claims": ("decodelab.apps.claims", "the papers' published figures: simulated vs published (C1-C15)"),
    "calibrate": ("decodelab.apps.calibrate", "set one placeholder parameter from one published figure"),
    "validate": (
        "decodelab.apps.validate",
        "serving simulation vs measured TTFT/TPOT (shipped rows or --csv)",
    ),
    "sweep": ("decodelab.apps.sweep", "a whole sweep in one command: worker processes, one recorder"),
    "grid": (
        "decodelab.apps.grid",
        "static decode sweeps evaluated as arrays: one Parquet table, one MLflow run",
    ),
    "search": ("decodelab.apps.search", "multi-objective design-space search (Optuna) over a space YAML"),
    "slo": (
        "decodelab.apps.slo",
        "max request rate under TTFT/TPOT SLOs and goodput per chip, over a sweep or a search space",
    ),
    "compare": ("decodelab.apps.compare", "MLflow runs side by side; CSV"),
    "sync": ("decodelab.apps.sync", "upload results that did not reach the tracker (idempotent)"),
    "kvplot": ("decodelab.apps.kvplot", "KV-policy trade-off plot + CSV of a sweep's results"),
    "coe-plot": ("decodelab.apps.coe_plot", "Composition of Experts: latency vs number of experts"),
    "fidelity": ("decodelab.apps.fidelity", "KV-policy accuracy on a real small model (SmolLM2-135M)"),
    "bench": ("decodelab.apps.bench", "kernel speed after JIT, Numba vs Python"),
    "report": (
        "decodelab.apps.report",
        "regenerate docs/generated/*.md (claims, validation, headline) from the code; --check for CI",
    ),
    "fit-hardware": (
        "decodelab.apps.fit_hardware",
        "fit a hardware YAML's per-shape operator laws to operator microbenchmark CSVs",
    ),
    "import-model": ("decodelab.apps.import_model", "a model YAML from a Hugging Face config.json"),
}

USAGE = """usage: decodelab [-m] [OVERRIDE ...]        one design (or, with -m, a Hydra multirun)
       decodelab COMMAND [ARGS ...]          a subcommand (decodelab COMMAND --help)
       decodelab --version | --help | --cfg job | --info"""


def help_text() -> str:
    width = max(map(len, COMMANDS))
    lines = [USAGE, "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += [
        "",
        "Overrides pick a component per group (model=llama3_1_70b hardware=dgx_h100) or set",
        "a field (workload.batch_size=8); the groups and their options follow (Hydra's help).",
        "",
    ]
    return "\n".join(lines)


def suggest(word: str) -> Optional[str]:
    near = difflib.get_close_matches(word, list(COMMANDS), n=1, cutoff=0.6)
    return near[0] if near else None


def run_command(name: str, argv: List[str]) -> int:
    module = importlib.import_module(COMMANDS[name][0])  # on use: each pulls its own libraries
    return run_module(name, module, argv)


def main(argv: Optional[List[str]] = None) -> None:
    """The console script; output into a closed pipe ends it with 141 (common.quiet_on_closed_pipe)."""
    if quiet_on_closed_pipe(_main, argv) == 141:
        sys.exit(141)


def _main(argv: Optional[List[str]]) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argv[0] if argv else ""
    if first in ("--version", "-V"):
        print(f"decodelab {decodelab.__version__}")
        sys.exit(0)
    if first in COMMANDS:
        sys.exit(run_command(first, argv[1:]))
    if first and not first.startswith("-") and "=" not in first and not first.startswith(("+", "~")):
        near = suggest(first)
        hint = f"; did you mean '{near}'?" if near else ""
        print(
            f"error: unknown command '{first}'{hint} (commands: {', '.join(COMMANDS)}; "
            "overrides are KEY=VALUE)",
            file=sys.stderr,
        )
        sys.exit(2)
    if first in ("-h", "--help"):
        print(help_text())
    from decodelab.config.check import check_app  # Hydra: only for the Hydra app

    problems = check_app(argv)  # composition errors as one line each, before Hydra runs
    if problems:
        sys.exit(errors("\n".join(problems)))
    from decodelab.apps.run import EXIT_STATUS, job  # Hydra, MLflow: only for the Hydra app

    sys.argv = [sys.argv[0], *argv]
    EXIT_STATUS[0] = 0
    job()
    sys.exit(EXIT_STATUS[0])


if __name__ == "__main__":
    main()

"""Evaluate a sweep of static decode designs as arrays: one Parquet table, one MLflow parent run
(docs/sweeps.md, "Grids as arrays"). The same sweep files and overrides as `decodelab sweep`;
designs the array path cannot express run through the per-design path, and the summary says how
many and why.

  decodelab grid scale/grid_1m -j 2
  decodelab grid model=llama3_1_8b,llama3_1_70b hardware.memory.hbm.bandwidth_gb_s='range(1000,8001,500)'"""

from __future__ import annotations

import os
import sys
from typing import List

from decodelab.apps.common import add_max_designs, errors, run_module, workers
from decodelab.config.grid import make_grid
from decodelab.config.sweepfile import SweepError
from decodelab.output.files import where_lines
from decodelab.runs.grid import GridOutcome, run_grid


def print_summary(grid, out: GridOutcome) -> None:
    from rich.console import Console

    console = Console()
    rate = out.n_designs / out.seconds if out.seconds else 0.0
    console.print(
        f"[bold]grid {grid.name}[/bold]: {out.n_designs} designs in {out.seconds:.1f} s "
        f"({rate:,.0f}/s) -> {out.path}"
    )
    console.print("  " + ", ".join(f"{k} {v}" for k, v in out.counts.items() if v or k == "ok"))
    console.print(
        f"  {out.array_designs} evaluated as arrays ({out.builds} builds, "
        f"{out.rows_costed} kernel rows costed)"
    )
    for reason, n in sorted(out.per_design.items(), key=lambda x: -x[1]):
        console.print(f"  {n} by the per-design path: {reason}")
    if out.best:
        best = ", ".join(f"{k}={v}" for k, v in out.best.items() if k != "tok_s_aggregate")
        console.print(f"  best aggregate tok/s {out.best['tok_s_aggregate']:.1f}: {best}")
    if out.parent:
        console.print(f"  MLflow: parent run {out.parent} (the table as its artifact)")
    if out.tracker_error:
        console.print(
            f"[yellow]warning[/yellow]: the tracker failed ({out.tracker_error}); the table is in {out.path}"
        )
    tracking = grid.tracking if out.parent and not out.tracker_error else None
    console.print(*where_lines(out.path.parent, tracking, out.parent, out.path), sep="\n")


def add_arguments(ap) -> None:
    ap.add_argument(
        "args",
        nargs="*",
        metavar="[SWEEP] OVERRIDE",
        help="sweep file or name, then overrides, e.g. hardware.memory.hbm.bandwidth_gb_s=1000,2000",
    )
    ap.add_argument(
        "-j",
        "--jobs",
        type=workers,
        default=os.cpu_count() or 1,
        help="worker processes over choices of components (default: CPU count; 1: in this process)",
    )
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_max_designs(ap)


def run(a) -> int:
    first = a.args[0] if a.args else None
    has_target = first is not None and "=" not in first and not first.startswith(("~", "+"))
    sweep, overrides = (first, a.args[1:]) if has_target else (None, a.args)
    try:
        grid = make_grid(sweep, overrides, a.max_designs)
    except SweepError as e:
        return errors(str(e))
    out = run_grid(grid, jobs=a.jobs, progress=not a.quiet)
    print_summary(grid, out)
    return 0


def main(argv: List[str]) -> int:
    return run_module("grid", sys.modules[__name__], argv)

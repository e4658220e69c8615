"""Regenerate the figures the reference docs quote, from the code: docs/generated/claims.md (the
`decodelab claims` table), validation.md (`decodelab validate --all`: MAPE and bias per dataset,
chip and engine), headline.md (one line each), and the `report:headline` block of README.md
where its markers are. Nothing is logged to MLflow.

  decodelab report                 write the pages that changed (about a minute)
  decodelab report --check         exit 1 with one line per stale committed copy (CI)
  decodelab report --bench         also docs/generated/bench.md: `decodelab bench` on this machine,
                                   its load and CPU count stated (never compared by --check)

The pages hold no timestamps, timings or versions: a fresh copy equals the committed one until the
model, its data or its claims move."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List

from decodelab.apps import bench
from decodelab.apps.common import errors, run_module, workers
from decodelab.errors import ConfigError, Infeasible
from decodelab.output import report as R
from decodelab.paths import SOURCE_ROOT
from decodelab.runs.report import GENERATED, build_report, expected_files


def add_arguments(p) -> None:
    p.add_argument(
        "--check", action="store_true", help="compare with the committed copies; exit 1 naming each stale one"
    )
    p.add_argument("--bench", action="store_true", help="also write docs/generated/bench.md (this machine)")
    p.add_argument(
        "--root",
        metavar="DIR",
        default=str(SOURCE_ROOT),
        help="the checkout whose docs/generated/ and README.md to write (default: this checkout)",
    )
    p.add_argument(
        "-j", "--jobs", type=workers, default=1, help="worker processes for the validation rows (default 1)"
    )


def check(root: Path, jobs: int = 1, claim_rows=None) -> List[str]:
    """One line per stale (or missing) committed copy, as `decodelab report --check` prints them."""
    files = expected_files(root, build_report(claim_rows, jobs))
    return [
        f"stale: {p.relative_to(root)} (regenerate with `decodelab report`)" for p in R.stale_files(files)
    ]


def write_bench(root: Path) -> Path:
    """docs/generated/bench.md: `decodelab bench` of the default design, with the load average
    the machine had when it started (the report's own work not counted) and its CPU count."""
    cfg = bench.compose_design([])
    load = os.getloadavg()
    rows, _ = bench.table_rows(cfg, [])
    path = root / GENERATED / "bench.md"
    title = f"{cfg.model.name} on {cfg.hardware.name}"
    R.write_files({path: R.bench_page(title, rows, load, os.cpu_count() or 1)})
    return path


def run(a) -> int:
    root = Path(a.root).expanduser().resolve()
    if not (root / "docs").is_dir():
        return errors(f"--root {root} has no docs/ (decodelab report writes into a source checkout)")
    if a.check and a.bench:
        return errors("--check compares the pages that do not depend on the machine: give it without --bench")
    if a.check:
        stale = check(root, a.jobs)
        for line in stale:
            print(line)
        if not stale:
            print(f"{root / GENERATED}: current")
        return 1 if stale else 0
    written = R.write_files(expected_files(root, build_report(jobs=a.jobs)))
    if a.bench:
        try:
            written.append(write_bench(root))
        except (ConfigError, Infeasible) as e:
            return errors(str(e))
    for p in written:
        print(f"wrote {p.relative_to(root)}")
    if not written:
        print(f"{root / GENERATED}: current, nothing written")
    return 0


def main(argv: List[str]) -> int:
    return run_module("report", sys.modules[__name__], argv)

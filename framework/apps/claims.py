"""Run the claim sweeps (sweeps/c*.yaml) in-process and compare the simulated figures with the
papers' published ones; the table is printed and logged to MLflow as one run.

  decodelab claims                         every claim
  decodelab claims C2 C5                   some of them
  decodelab claims C6 ++speculative.acceptance=0.95   what-if: an override applied to every job
  decodelab claims --no-track              print only
  decodelab claims my_claims/              a researcher's own claims: sweep files (a file or a
                                           directory of them) with the same `claim:` block
  decodelab claims --bands                 also each figure's band over the placeholder ranges

Any argument that is an existing file or directory (or ends in .yaml) is a user claim sweep; with
one, only the user's sweeps run, and the table, the run name (`user claims`) and the MLflow tags
(`claims_set=user`, `claims_paths`) say so.

Any KEY=VALUE other than tracking.* / tracking=NAME is a what-if: applied to every job of the
selected sweeps, after and in place of the sweep's own value for that key. The table and the
MLflow run say so (run name `claims what-if`, tag `what_if`), so a what-if is never mistaken for
the canonical table. How a claim sweep names its figures: decodelab.runs.claims.

A figure a parameter was calibrated on (data/calibration.yaml, `decodelab calibrate`) is reported as
`calibration`, not counted in the pass rate. --bands propagates the ranges of the placeholder and
calibrated parameters to every figure (one-at-a-time ends plus a seeded Latin hypercube,
decodelab.runs.bands): the band [min, max] and the two parameters that move it most. A figure
passes on its point value; the band is information (about a minute for every claim)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import List

from decodelab.apps.common import errors, run_module
from decodelab.config import compose as C
from decodelab.errors import ConfigError
from decodelab.paths import SWEEPS_DIR
from decodelab.runs.bands import run_bands
from decodelab.runs.claims import key_of, load_sweep, run_claims, sweep_files
from decodelab.runs.placeholders import load_params
from decodelab.tracking import store as tracking


def add_arguments(p) -> None:
    p.add_argument(
        "args",
        nargs="*",
        metavar="ID | PATH | KEY=VALUE",
        help="claim ids (C1 ... C15); sweep files or directories of them (user claims); "
        "tracking.KEY=VALUE; other KEY=VALUE: what-ifs",
    )
    p.add_argument("--no-track", action="store_true", help="print the table, log nothing")
    p.add_argument(
        "--bands", action="store_true", help="uncertainty band of each figure over the placeholder ranges"
    )
    p.add_argument(
        "--samples", type=int, default=16, metavar="N", help="Latin-hypercube points per figure (--bands; 16)"
    )


def known_ids(files=None) -> List[str]:
    paths = files if files is not None else SWEEPS_DIR.glob("*.yaml")
    return sorted({str(load_sweep(p)[0]["id"]) for p in paths}, key=lambda c: (len(c), c))


def _is_path(x: str) -> bool:
    return "=" not in x and (x.endswith((".yaml", ".yml")) or "/" in x or Path(x).exists())


def run(a) -> int:
    paths = [x for x in a.args if _is_path(x)]
    files = None
    if paths:
        files, problems = sweep_files(paths)
        if problems:
            return errors("\n".join(problems))
    ids = [x for x in a.args if "=" not in x and not x.startswith(("+", "~")) and x not in paths]
    known = known_ids(files)
    unknown = [i for i in ids if i not in known]
    if unknown:
        where = "in " + " ".join(paths) if paths else "shipped"
        return errors(f"{', '.join(unknown)}: not a claim id ({where}); the ids: {' '.join(known)}")
    overrides = [x for x in a.args if "=" in x and key_of(x).split(".")[0] == "tracking"]
    what_if = [x for x in a.args if x not in overrides and x not in ids and x not in paths]
    try:
        tr = C.compose(overrides).tracking
    except C.hydra_errors() as e:
        return errors(str(e).strip().splitlines()[0])
    track = not a.no_track and tr.enabled
    plots = Path(tempfile.mkdtemp(prefix="decodelab-claims-")) if track else None
    try:
        rows = run_claims(
            ids or None, plots_dir=plots, what_if=what_if, files=files, progress=sys.stderr.isatty()
        )
    except C.hydra_errors() as e:  # a misspelled key or a value a job's config rejects
        return errors(f"{' '.join(what_if)}: {str(e).strip().splitlines()[0]}")
    except ConfigError as e:  # a figure naming an unknown metric: before the sweep runs
        return errors(str(e))
    _print_table(rows, paths, what_if)
    for cid, why in {r["id"]: r["why_none"] for r in rows if r["why_none"]}.items():
        print(f"{cid}: no figure: " + "; ".join(why))
    scored = [r for r in rows if not r.get("calibration")]
    cal = len(rows) - len(scored)
    print(
        f"{sum(r['pass'] for r in scored)} of {len(scored)} figures pass"
        + (f" ({cal} calibration figure{'s' * (cal > 1)} not counted)" if cal else "")
    )
    bands = _bands(ids, files, what_if, a.samples) if a.bands else None
    if track:
        _log(rows, plots, tr, what_if, paths, bands)
    return 0 if all(r["pass"] for r in scored) else 1


def _print_table(rows: List[dict], paths: List[str], what_if: List[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    title = "decodelab claims (pass: within tolerance, default 15%; ranges: inside)"
    if paths:
        title = f"USER claims from {' '.join(paths)}\n" + title
    if what_if:
        title += f"\nWHAT-IF, not the canonical table: {' '.join(what_if)}"
    t = Table(title=title)
    for col in ("id", "figure", "published", "simulated", "ratio", "pass"):
        t.add_column(col, justify="right" if col in ("published", "simulated", "ratio") else "left")
    for r in rows:
        t.add_row(
            f"{r['id']} (user)" if r.get("user") else r["id"],
            r["figure"],
            r["published"],
            "-" if r["simulated"] is None else f"{r['simulated']:.3g}",
            "" if r["ratio"] is None else f"{r['ratio']:.2f}",
            "[yellow]calibration[/yellow]"
            if r.get("calibration")
            else "[green]pass[/green]"
            if r["pass"]
            else "[red]FAIL[/red]",
        )
    Console().print(t)


def _bands(ids, files, what_if, samples: int) -> List[dict]:
    """Compute and print each figure's band (decodelab.runs.bands)."""
    from rich.console import Console
    from rich.table import Table

    bands, evals = run_bands(load_params(), ids or None, files, what_if, n=samples)
    t = Table(
        title=f"bands over the placeholder ranges (data/calibration.yaml; one-at-a-time + {samples} LHS points)"
    )
    for col in ("figure", "name", "point", "band", "moved most by (one-at-a-time swing)"):
        t.add_column(col, justify="right" if col in ("point", "band") else "left")
    g = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
    for b in bands:
        movers = ", ".join(f"{k} {s:.3g}" for k, s in b["movers"]) or "-"
        t.add_row(b["fid"], b["figure"], g(b["point"]), f"[{g(b['lo'])}, {g(b['hi'])}]", movers)
    Console().print(t)
    print(f"{evals} design evaluations")
    return bands


def _log(rows: List[dict], plots, tr, what_if: List[str], paths: List[str] = (), bands=None) -> None:
    """The claims table (and the per-sweep breakdown plots) as one MLflow run."""
    import pandas as pd

    tags = {"kind": "claims", "claims_set": "user" if paths else "shipped"}
    if paths:
        tags["claims_paths"] = " ".join(paths)
    if what_if:
        tags["what_if"] = " ".join(what_if)
    pre = "user_" if paths else ""
    metrics = {f"{pre}{r['id']}_{r['figure']}": r["simulated"] for r in rows if r["simulated"] is not None}
    metrics["figures_pass"] = float(sum(r["pass"] for r in rows if not r.get("calibration")))
    metrics["figures_calibration"] = float(sum(bool(r.get("calibration")) for r in rows))
    tables = {"claims.csv": pd.DataFrame(rows)}
    if bands:
        tags["bands"] = "one-at-a-time + latin hypercube over data/calibration.yaml ranges"
        for b in bands:
            if b["lo"] is not None:
                metrics[f"{pre}{b['id']}_{b['figure']}_band_lo"] = b["lo"]
                metrics[f"{pre}{b['id']}_{b['figure']}_band_hi"] = b["hi"]
        tables["bands.csv"] = pd.DataFrame(
            [
                {
                    **b,
                    "movers": "; ".join(f"{k} {s:.4g}" for k, s in b["movers"]),
                    "params": " ".join(b["params"]),
                }
                for b in bands
            ]
        )
    try:
        tracking.log_summary_run(
            tr,
            ("user claims" if paths else "claims") + (" what-if" if what_if else ""),
            tags,
            metrics,
            tables,
            [(png, "breakdown") for png in sorted(plots.glob("*.png"))],
        )
    except Exception as e:  # never lose the printed table to a tracker problem
        print(f"warning: claims table not logged to MLflow ({type(e).__name__}: {e})")


def main(argv: List[str]) -> int:
    return run_module("claims", sys.modules[__name__], argv)

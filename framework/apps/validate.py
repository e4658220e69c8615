"""Simulate every row of a measured serving CSV as the setting it was measured in (closed loop:
`concurrency` clients, `isl` prompt and `osl` output tokens, `precision`, `tp`) and compare
predicted with measured TTFT and TPOT; the table is printed and logged to MLflow as one run.

  decodelab validate                                  the shipped Llama-3.1-8B rows
  decodelab validate --csv rows.csv engine.chunk_size=2048
  decodelab validate --static                         the decode step alone (calibration)

The CSV needs the columns model, precision, tp, isl, osl, concurrency, ttft_ms, tpot_ms (an
optional `system` column picks the hardware config; default h100_sxm). docs/validation.md."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from decodelab.apps.common import errors, run_module
from decodelab.config import compose as C
from decodelab.runs.validation import default_csv, mape, run_validation
from decodelab.tracking import store as tracking


def print_table(df, csv: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"decodelab validate: {csv.name} (error = predicted / measured - 1)")
    for col in ("conc", "isl", "osl", "TTFT meas", "TTFT pred", "err", "TPOT meas", "TPOT pred", "err"):
        t.add_column(col, justify="right")
    for _, r in df.iterrows():
        t.add_row(
            str(r["concurrency"]),
            str(r["isl"]),
            str(r["osl"]),
            f"{r['ttft_meas']:.1f}",
            f"{r['ttft_pred']:.1f}",
            f"{r['ttft_err_pct']:+.1f}%",
            f"{r['tpot_meas']:.2f}",
            f"{r['tpot_pred']:.2f}",
            f"{r['tpot_err_pct']:+.1f}%",
        )
    Console().print(t)
    for _, r in df[df["status"] != "ok"].iterrows():
        Console().print(
            f"{r['status']} (concurrency {r['concurrency']}, isl {r['isl']}, osl {r['osl']}): {r['reason']}"
        )
    Console().print(
        f"mean absolute percentage error: TPOT {mape(df, 'tpot'):.1f}%, "
        f"TTFT {mape(df, 'ttft'):.1f}% over {len(df)} rows"
    )


def _log(df, csv: Path) -> None:
    """One MLflow run with the MAPEs as metrics and the table as an artifact (tracking settings
    of the default config), as `decodelab claims` does."""
    tr = C.compose().tracking
    try:
        tracking.log_summary_run(
            tr,
            f"validate {csv.name}",
            {"kind": "validate", "csv": str(csv)},
            {"tpot_mape_pct": mape(df, "tpot"), "ttft_mape_pct": mape(df, "ttft"), "rows": float(len(df))},
            {"validation.csv": df},
        )
    except Exception as e:  # never lose the printed table to a tracker problem
        print(f"warning: validation table not logged to MLflow ({type(e).__name__}: {e})")


def add_arguments(p) -> None:
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="Hydra overrides applied to every row (csv=PATH: the CSV, as --csv)",
    )
    p.add_argument("--csv", help="measured rows (default: the shipped h100_llama31_8b_tp1.csv)")
    p.add_argument(
        "--static", action="store_true", help="the pure decode step instead of the serving simulation"
    )
    p.add_argument("--no-track", action="store_true", help="print the table, log nothing")


def run(a) -> int:
    csv_arg = [x.split("=", 1)[1] for x in a.overrides if x.startswith("csv=")]
    overrides = [x for x in a.overrides if not x.startswith("csv=")]
    csv = Path(a.csv or (csv_arg[-1] if csv_arg else default_csv())).expanduser()
    if not csv.is_file():
        return errors(f"csv={csv} is not a file")
    try:
        df = run_validation(csv, overrides, static=a.static)
    except (ValueError,) + C.hydra_errors() as e:
        return errors(str(e).strip().splitlines()[0])
    print_table(df, csv)
    if not a.no_track:
        _log(df, csv)
    return 0


def main(argv: List[str]) -> int:
    return run_module("validate", sys.modules[__name__], argv)

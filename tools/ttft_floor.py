"""TTFT at low concurrency as a line in the prompt length: measured against predicted.

Reads the rows file `decodelab validate --out DIR` writes (DIR/<csv>_rows.csv) and, per group of
rows that share everything but the prompt length (engine, system, model, precision, tp, mode, output
length) at one concurrency (default 4, where a request rarely waits for another's prefill), takes
the median measured and predicted TTFT at each of two prompt lengths and the line through them:
its slope (ms per 1,000 prompt tokens) and its intercept at no prompt (the part of TTFT that does
not grow with the prompt: front end, scheduling, the fixed cost of a prefill step). A predicted
slope near the measured one with an intercept well below it says the per-token cost holds and a
fixed cost is missing (docs/journal/2026-11-30-ttft-floor.md).

    python tools/ttft_floor.py DIR/aic_silicon_dev_rows.csv --concurrency 4

Only rows with status ok and, where the file has the column, a TTFT that is a serving measurement
(`ttft_ok`)."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from decodelab.apps.common import errors, quiet_on_closed_pipe
from rows_file import print_table, read_rows, serving_ttft

KEYS = ["engine", "system", "model", "precision", "tp", "mode", "osl"]


def floor_table(rows: pd.DataFrame, concurrency: float, short: int, long: int) -> pd.DataFrame:
    """Per group (KEYS) with rows at both prompt lengths: median measured / predicted TTFT at each,
    slope per 1,000 tokens and intercept of the line through the two, measured and predicted."""
    ok = rows[(rows["status"] == "ok") & (rows["concurrency"] == concurrency)]
    ok = serving_ttft(ok)
    ok = ok[ok["isl"].isin([short, long])].assign(model=ok["model"].str.split("/").str[-1])
    med = ok.groupby(KEYS + ["isl"], dropna=False)[["ttft_meas", "ttft_pred"]].median().unstack("isl")
    if any((f"ttft_{w}", n) not in med.columns for w in ("meas", "pred") for n in (short, long)):
        return pd.DataFrame()
    med = med.dropna()
    out = pd.DataFrame(index=med.index)
    for what in ("meas", "pred"):
        a, b = med[(f"ttft_{what}", short)], med[(f"ttft_{what}", long)]
        slope = (b - a) / (long - short)
        out[f"{what}_{short}"], out[f"{what}_{long}"] = a, b
        out[f"{what}_per_1k"] = 1000.0 * slope
        out[f"{what}_at_0"] = a - short * slope
    out["missing_at_0"] = out["meas_at_0"] - out["pred_at_0"]
    return out.reset_index()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", help="a rows file of `decodelab validate --out`")
    ap.add_argument("--concurrency", type=float, default=4.0)
    ap.add_argument("--short", type=int, default=1024, help="the shorter prompt length (tokens)")
    ap.add_argument("--long", type=int, default=8192, help="the longer prompt length (tokens)")
    args = ap.parse_args(argv)
    rows, why = read_rows(args.rows, {"status", "concurrency", "isl", "ttft_meas", "ttft_pred", *KEYS})
    if rows is None:
        return errors(why)
    table = floor_table(rows, args.concurrency, args.short, args.long)
    if table.empty:
        return errors(
            f"--concurrency / --short / --long: no group has ok rows at {args.concurrency:g} clients and "
            f"both {args.short} and {args.long} prompt tokens"
        )
    print_table(table)
    print(
        f"\n{len(table)} groups; missing at 0 tokens (measured - predicted intercept): median "
        f"{table['missing_at_0'].median():.1f} ms; slope predicted / measured: median "
        f"{(table['pred_per_1k'] / table['meas_per_1k']).median():.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_pipe(main))

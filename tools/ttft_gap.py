"""TTFT measured minus predicted at low concurrency, per group of a `decodelab validate` rows file.

Reads the rows file `decodelab validate --out DIR` writes (DIR/<csv>_rows.csv) and, over the rows
with status ok at no more than `--max-clients` clients whose TTFT is a serving measurement
(`ttft_ok`, where the file has the column) and that ran one launch (no `candidate`), gives per group
(`--by`, default engine, model, mode) the rows, the median gap (measured - predicted TTFT, ms) with
its quartiles, the median measured and predicted TTFT and the systems. A gap that follows the model
rather than the engine or the client points at the model's forward
(docs/journal/2026-12-01-ttft-gap-by-model.md).

    python tools/ttft_gap.py DIR/aic_silicon_dev_rows.csv --max-clients 8"""

from __future__ import annotations

import argparse
import sys
from typing import List

import pandas as pd

from decodelab.apps.common import errors, quiet_on_closed_pipe
from rows_file import print_table, read_rows, serving_ttft

NEEDED = {"status", "concurrency", "ttft_meas", "ttft_pred"}


def low_rows(rows: pd.DataFrame, max_clients: float) -> pd.DataFrame:
    """The ok, single-launch rows at <= max_clients whose TTFT is a serving measurement, with the
    model's organisation dropped and `gap` = measured - predicted TTFT."""
    ok = rows[(rows["status"] == "ok") & (rows["concurrency"] <= max_clients)]
    ok = serving_ttft(ok)
    if "candidate" in ok:
        ok = ok[ok["candidate"].isna() | (ok["candidate"].astype(str) == "")]
    out = ok.assign(gap=ok["ttft_meas"] - ok["ttft_pred"])
    if "model" in out:
        out = out.assign(model=out["model"].astype(str).str.split("/").str[-1])
    return out


def gap_table(rows: pd.DataFrame, by: List[str]) -> pd.DataFrame:
    """Per group: rows, gap median and quartiles, measured and predicted medians, systems."""
    g = rows.groupby(by, dropna=False)
    out = pd.DataFrame(
        {
            "rows": g.size(),
            "gap_median": g["gap"].median(),
            "gap_q25": g["gap"].quantile(0.25),
            "gap_q75": g["gap"].quantile(0.75),
            "measured": g["ttft_meas"].median(),
            "predicted": g["ttft_pred"].median(),
        }
    )
    if "system" in rows and "system" not in by:
        out["systems"] = g["system"].agg(lambda s: ", ".join(sorted(set(map(str, s)))))
    return out.reset_index()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", help="a rows file of `decodelab validate --out`")
    ap.add_argument("--max-clients", type=float, default=8.0)
    ap.add_argument("--by", default="engine,model,mode", help="comma-separated columns to group by")
    args = ap.parse_args(argv)
    by = [k.strip() for k in args.by.split(",") if k.strip()]
    rows, why = read_rows(
        args.rows, NEEDED | set(by), "; --by takes its columns (engine, model, mode, system, tp, isl)"
    )
    if rows is None:
        return errors(why)
    low = low_rows(rows, args.max_clients)
    if low.empty:
        return errors(f"--max-clients: no ok single-launch row at <= {args.max_clients:g} clients")
    table = gap_table(low, by)
    print_table(table)
    print(f"{len(low)} rows at <= {args.max_clients:g} clients; gap median {low['gap'].median():.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_pipe(main))

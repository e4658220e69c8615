"""MTP's speedup measured against predicted, over pairs of rows of a `decodelab validate` rows file.

A pair is two rows at the same engine, system, precision, tp, clients, isl and osl, one run with an
engine file that sets in-engine MTP (`engine.mtp.k` > 0 in conf/engine/<engine_config>.yaml) and one
with a file that does not; rows that ran as the mean of several launches (`candidate`) are left
out, and same-setting rows of one side are taken at their median. A pair's speedup is the non-MTP
TPOT over the MTP TPOT, measured and predicted: no acceptance rate is needed to read it. Printed per
client range and per (engine, system, precision, tp) group in the ranges given
(docs/journal/2026-12-01-mtp-speedup-by-clients.md).

    python tools/mtp_pairs.py DIR/aic_silicon_dev_rows.csv --clients 8,16,64"""

from __future__ import annotations

import argparse
import sys
from functools import lru_cache
from typing import List

import pandas as pd

from decodelab.apps.common import errors, quiet_on_closed_pipe
from decodelab.errors import ConfigError
from rows_file import print_table, read_rows

KEY = ["engine", "system", "precision", "tp", "concurrency", "isl", "osl"]
NEEDED = set(KEY) | {"status", "engine_config", "tpot_meas", "tpot_pred"}


@lru_cache(maxsize=None)
def mtp_k(engine_config: str) -> int:
    """The draft tokens per step (engine.mtp.k) the named engine file sets, 0 without MTP."""
    from decodelab.config.composition import design_config

    mtp = design_config([f"engine={engine_config}"]).engine.get("mtp")
    return int(mtp.get("k", 0) or 0) if mtp else 0


def single_launch(rows: pd.DataFrame) -> pd.DataFrame:
    """The ok rows that ran one launch (no `candidate`)."""
    ok = rows[rows["status"] == "ok"]
    if "candidate" in ok:
        ok = ok[ok["candidate"].isna() | (ok["candidate"].astype(str) == "")]
    return ok


def pairs(ok: pd.DataFrame) -> pd.DataFrame:
    """One line per pair of `ok` rows: the key and the measured and predicted speedups."""
    ok = ok.assign(mtp=[mtp_k(str(c)) > 0 for c in ok["engine_config"]])
    side = ok.groupby(KEY + ["mtp"]).agg(meas=("tpot_meas", "median"), pred=("tpot_pred", "median"))
    wide = side.unstack("mtp").dropna()
    if wide.empty or ("meas", False) not in wide or ("meas", True) not in wide:
        return pd.DataFrame()
    out = pd.DataFrame(
        {
            "measured": wide[("meas", False)] / wide[("meas", True)],
            "predicted": wide[("pred", False)] / wide[("pred", True)],
        }
    )
    return out.reset_index()


def summary(p: pd.DataFrame, edges: List[float], by: List[str]) -> pd.DataFrame:
    """Pairs and mean speedups per client range (and per `by`)."""
    labels = [f"{int(lo) + 1}-{int(hi)}" for lo, hi in zip([0.0] + edges[:-1], edges)]
    p = p.assign(clients=pd.cut(p["concurrency"], [0.0] + edges, labels=labels))
    g = p.groupby(by + ["clients"], observed=True)
    out = pd.DataFrame(
        {"pairs": g.size(), "measured": g["measured"].mean(), "predicted": g["predicted"].mean()}
    )
    return out.reset_index()


def show(table: pd.DataFrame) -> None:
    """The table with speedups to two decimals."""
    shown = table.copy()
    for c in ("measured", "predicted"):
        shown[c] = shown[c].map(lambda v: f"{v:.2f}")
    shown["clients"] = shown["clients"].astype(str)
    print_table(shown)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", help="a rows file of `decodelab validate --out`")
    ap.add_argument("--clients", default="8,16,64", help="upper edges of the client ranges, comma-separated")
    args = ap.parse_args(argv)
    try:
        edges = sorted(float(e) for e in args.clients.split(",") if e.strip())
    except ValueError:
        return errors(f"--clients={args.clients}: give increasing client counts, e.g. 8,16,64")
    if not edges or edges[0] <= 0:
        return errors(f"--clients={args.clients}: give client counts > 0, e.g. 8,16,64")
    rows, why = read_rows(args.rows, NEEDED)
    if rows is None:
        return errors(why)
    ok = single_launch(rows)
    for name in sorted(set(map(str, ok["engine_config"]))):
        try:
            mtp_k(name)
        except ConfigError:
            return errors(f"rows: engine_config {name!r} is not a conf/engine file")
    p = pairs(ok)
    if p.empty:
        return errors(f"rows: {args.rows} has no pair of an MTP and a non-MTP row at one setting")
    p = p[p["concurrency"] <= edges[-1]]
    show(summary(p, edges, []))
    show(summary(p, edges, ["engine", "system", "precision", "tp"]))
    print(f"{len(p)} pairs at <= {edges[-1]:g} clients")
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_pipe(main))

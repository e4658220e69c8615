"""What each named part of a `decodelab validate` rows file's error costs, and the floor under it.

For each group of rows (a pandas query over the rows file's columns), the overall TPOT and TTFT MAPE
and the TPOT bias per system if that group's predictions were exact (replaced by its measurements),
then the same for every group at once and for the rows outside them all. `--group NAME=QUERY`
(repeatable) replaces the default groups, those of docs/journal/2026-12-02-gap-budget.md; a default
group that names TTFT replaces only TTFT.

With `--csv`, the measured CSV in AIConfigurator's schema the rows came from, it also prints the
floor no predictor that reads only a row's recorded cells can go below: rows with the same cells
(its `silicon_data_source` reduced to the clients it states) get one prediction, and the best one
for their MAPE is the 1/measured-weighted median of their measurements.

    python tools/gap_budget.py DIR/aic_silicon_dev_rows.csv --csv ../shared/validation/aic_silicon_dev.csv"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd

from decodelab.apps.common import errors, quiet_on_closed_pipe
from decodelab.runs.aic_mapping import CONCURRENCY
from rows_file import print_table, read_rows

NEEDED = {"status", "system", "engine", "model", "mode", "tpot_meas", "tpot_pred", "ttft_meas", "ttft_pred"}
BOTH, TTFT = ("tpot", "ttft"), ("ttft",)
DEEPSEEK = "model.str.contains('DeepSeek')"
# (name, query, metrics made exact): the groups of docs/journal/2026-12-02-gap-budget.md
GROUPS: List[Tuple[str, str, tuple]] = [
    ("launch open (candidate mean)", "candidate.notna()", BOTH),
    ("TTFT with compile time (ttft_ok false)", "ttft_ok != True", TTFT),
    (
        "vLLM 0.12 Qwen3-235B, H200",
        "system == 'h200_sxm' and engine == 'vllm' and model.str.contains('Qwen3-235B')",
        BOTH,
    ),
    (
        "SGLang DeepSeek disagg, Hopper",
        f"engine == 'sglang' and mode == 'disagg' and {DEEPSEEK} and system != 'b200_sxm'",
        BOTH,
    ),
    (
        "TensorRT-LLM DeepSeek disagg, H100",
        f"engine == 'trtllm' and mode == 'disagg' and {DEEPSEEK} and system == 'h100_sxm'",
        BOTH,
    ),
    ("DeepSeek TTFT", DEEPSEEK, TTFT),
]
MEASURED = ("silicon_ttft_ms", "silicon_tpot_ms")


def _errors(rows: pd.DataFrame, q: str) -> pd.Series:
    return rows[f"{q}_pred"] / rows[f"{q}_meas"] - 1.0


def scores(rows: pd.DataFrame) -> dict:
    """TPOT and TTFT MAPE (%), and the TPOT bias (%) per system."""
    tpot, ttft = _errors(rows, "tpot"), _errors(rows, "ttft")
    out = {"TPOT MAPE": 100 * tpot.abs().mean(), "TTFT MAPE": 100 * ttft.abs().mean()}
    for system, bias in (100 * tpot.groupby(rows["system"]).mean()).items():
        out[f"TPOT bias {system}"] = bias
    return out


def exact(rows: pd.DataFrame, mask: pd.Series, metrics: tuple) -> pd.DataFrame:
    """The rows with the masked rows' predictions of `metrics` replaced by their measurements."""
    out = rows.copy()
    for q in metrics:
        out.loc[mask, f"{q}_pred"] = out.loc[mask, f"{q}_meas"]
    return out


def budget(rows: pd.DataFrame, groups) -> pd.DataFrame:
    """One line per group (its rows, its own MAPEs, the overall scores were it exact), then all
    groups at once, then the rows outside every group as they are."""
    lines, union = [{"group": "as predicted", "rows": len(rows), **scores(rows)}], None
    for name, mask, metrics in groups:
        own = scores(rows[mask])
        line = {
            "group": name,
            "rows": int(mask.sum()),
            "its TPOT": own["TPOT MAPE"],
            "its TTFT": own["TTFT MAPE"],
        }
        lines.append({**line, **scores(exact(rows, mask, metrics))})
        union = mask if union is None else union | mask
    if union is not None:
        everything = rows
        for _, mask, metrics in groups:
            everything = exact(everything, mask, metrics)
        lines.append({"group": "all groups exact", "rows": int(union.sum()), **scores(everything)})
        lines.append(
            {"group": "rows outside the groups", "rows": int((~union).sum()), **scores(rows[~union])}
        )
    out = pd.DataFrame(lines)
    first = [c for c in ("group", "rows", "its TPOT", "its TTFT") if c in out]
    return out[first + [c for c in out.columns if c not in first]]


def floor(measured: pd.DataFrame) -> dict:
    """The lowest TPOT and TTFT MAPE (%) one prediction per set of rows with the same recorded
    cells and stated clients can reach: each set's 1/m-weighted median of its measurements m."""
    clients = measured["silicon_data_source"].fillna("").str.extract(CONCURRENCY.pattern)[0]
    cells = [c for c in measured.columns if c not in (*MEASURED, "id", "silicon_data_source")]
    keyed = measured.assign(_clients=clients)
    out = {}
    for col in MEASURED:
        err: List[float] = []
        for _, g in keyed.groupby([*cells, "_clients"], dropna=False):
            m = np.sort(g[col].dropna().to_numpy(float))
            if len(m):
                w = np.cumsum(1.0 / m)
                best = m[np.searchsorted(w, w[-1] / 2)]
                err.extend(np.abs(best / m - 1.0))
        out[col.split("_")[1].upper()] = 100 * float(np.mean(err))
    return out


def _groups(rows: pd.DataFrame, specs: Optional[List[str]]):
    """(name, mask, metrics) of each group: the --group NAME=QUERY specs, else GROUPS."""
    wanted = [(s.split("=", 1)[0].strip(), s.split("=", 1)[1], BOTH) for s in specs] if specs else GROUPS
    out = []
    for name, query, metrics in wanted:
        mask = rows.eval(query, engine="python")
        out.append((name, pd.Series(mask, index=rows.index).fillna(False).astype(bool), metrics))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", help="a rows file of `decodelab validate --out`")
    ap.add_argument("--group", action="append", metavar="NAME=QUERY", help="a group (repeatable)")
    ap.add_argument("--csv", help="the measured CSV (AIConfigurator's schema) the rows came from")
    args = ap.parse_args(argv)
    if any("=" not in s or not s.split("=", 1)[0].strip() for s in args.group or []):
        return errors("--group: give NAME=QUERY, a pandas query over the rows file's columns")
    rows, why = read_rows(args.rows, NEEDED)
    if rows is None:
        return errors(why)
    rows = rows[(rows["status"] == "ok") & rows["tpot_pred"].notna() & rows["ttft_pred"].notna()]
    try:
        groups = _groups(rows, args.group)
    except Exception as e:  # a query pandas cannot evaluate on these columns
        return errors(f"--group: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    measured, why = _measured(args.csv)
    if why:
        return errors(why)
    print_table(budget(rows, groups), digits=1)
    if measured is not None:
        f = floor(measured)
        print(
            f"floor over {len(measured)} measured rows (same cells and clients, one prediction): "
            f"TPOT {f['TPOT']:.1f}%, TTFT {f['TTFT']:.1f}%"
        )
    return 0


def _measured(path: Optional[str]) -> Tuple[Optional[pd.DataFrame], str]:
    """(the measured CSV or None where no path is given, "") or (None, the error line)."""
    if not path:
        return None, ""
    try:
        measured = pd.read_csv(path)
    except (OSError, ValueError) as e:
        return None, f"--csv: cannot read {path} ({type(e).__name__})"
    if not {*MEASURED, "silicon_data_source"} <= set(measured.columns):
        return None, f"--csv: {path} is not in AIConfigurator's silicon schema"
    return measured, ""


if __name__ == "__main__":
    sys.exit(quiet_on_closed_pipe(main))

"""Ablation of the serving mechanisms on a measured-row CSV (docs/validation.md, "Ablation").

Runs `decodelab validate` on the CSV once with every mechanism and once per ablation below (one
mechanism switched off by an override every row keeps, or by `--launch`), writes each run's rows to
OUT/<name>_rows.csv with the code version it ran (OUT/<name>.json), and prints one Markdown table:
per ablation, over the rows it and the run with every mechanism both predict, TPOT and TTFT MAPE
(bias) without it, TTFT also over the rows whose TTFT is a serving measurement (`ttft_ok`), and the
rows whose prediction moved. A run stored for this code version is read back instead of run again
(--rerun runs it anyway); one of another version is run again.

    python tools/dev_ablation.py ../shared/validation/aic_silicon_dev.csv --out out/ablation -j 2

Each run takes as long as one `decodelab validate` of the CSV (the dev set: 3-10 min on two cores)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pandas as pd

from decodelab.apps.common import errors
from decodelab.core.result import code_version
from decodelab.runs.validation import bias, mape, run_validation

# (name, what is switched off, Hydra overrides, --launch)
ABLATIONS: List[Tuple[str, str, List[str], str]] = [
    ("all", "nothing", [], "auto"),
    ("sustained", "sustained clocks", ["hardware.sustained_compute_ratio=1"], "auto"),
    ("roofline", "measured kernels (roofline instead)", ["hardware.op_model=roofline"], "auto"),
    ("defaults", "per-row launch rules (file defaults instead)", [], "defaults"),
    ("mtp", "in-engine MTP (aggregated rows)", ["engine.mtp.k=0"], "auto"),
    (
        "lengths",
        "length draws in [0.8 L, L] (fixed)",
        ["workload.prompt_dist.kind=fixed", "workload.output_dist.kind=fixed"],
        "auto",
    ),
    (
        "frontend",
        "front end (HTTP, tokenizer)",
        ["engine.frontend.request_ms=0", "engine.frontend.tokenize_mb_s=0"],
        "auto",
    ),
    ("eager", "eager dispatch", ["engine.eager_launch_us=null"], "auto"),
    ("lookahead", "overlap lookahead", ["engine.lookahead=false"], "auto"),
    ("warmup", "drained warm-ups (aggregated rows)", ["workload.warmup_drain=false"], "auto"),
]


def rows_of(csv: Path, out: Path, name: str, overrides, launch: str, jobs: int, rerun: bool) -> pd.DataFrame:
    """One ablation's predicted rows: stored ones of this code version, else a fresh run (stored)."""
    rows, stamp = out / f"{name}_rows.csv", out / f"{name}.json"
    version = code_version()
    if not rerun and rows.exists() and stamp.exists():
        if json.loads(stamp.read_text()).get("code_version") == version:
            return pd.read_csv(rows)
    print(f"running {name}: {' '.join(overrides) or '(no override)'} --launch {launch}", flush=True)
    df = run_validation(csv, overrides, launch=launch, jobs=jobs)
    df.to_csv(rows, index=False)
    stamp.write_text(json.dumps({"code_version": version, "overrides": overrides, "launch": launch}))
    return df


def stats(df: pd.DataFrame) -> Dict[str, float]:
    """MAPE and bias of TPOT and TTFT over the rows run; TTFT also over the ttft_ok rows."""
    ok = df[df["status"] == "ok"]
    real = ok[ok["ttft_ok"].astype(str) == "True"] if "ttft_ok" in ok.columns else ok
    out: Dict[str, float] = {"n": len(ok)}
    for name, rows, key in (("tpot", ok, "tpot"), ("ttft", ok, "ttft"), ("ttft_ok", real, "ttft")):
        out[name], out[f"{name}_bias"] = mape(rows, key), bias(rows, key)
    return out


def moved(base: pd.DataFrame, other: pd.DataFrame) -> int:
    """Rows whose TPOT or TTFT prediction differs by more than 0.1% from the run with every mechanism."""
    m = base[["row", "tpot_pred", "ttft_pred"]].merge(other[["row", "tpot_pred", "ttft_pred"]], on="row")
    rel = [(m[f"{k}_y"] - m[f"{k}_x"]).abs() / m[f"{k}_x"] for k in ("tpot_pred", "ttft_pred")]
    lost = m["tpot_pred_y"].isna() != m["tpot_pred_x"].isna()  # run in one, refused in the other
    return int(((rel[0] > 1e-3) | (rel[1] > 1e-3) | lost).sum())


def table(runs: Dict[str, pd.DataFrame]) -> str:
    """The Markdown table of the ablations' runs: per ablation the rows its run and the run with every
    mechanism both predict (and how many moved), their MAPE (bias) in %; where those rows are not all
    the run with every mechanism predicts, its MAPE over them comes first (`before -> after`)."""
    base = runs["all"]
    every = set(base.loc[base["status"] == "ok", "row"])
    head = "| switched off | override | rows (moved) | TPOT MAPE (bias), % | TTFT | TTFT, ttft_ok rows |"
    lines = [head, "|---|---|---|---|---|---|"]
    for name, what, overrides, launch in ABLATIONS:
        both = every & set(runs[name].loc[runs[name]["status"] == "ok", "row"])
        b, s = (stats(r[r["row"].isin(both)]) for r in (base, runs[name]))
        before = "" if len(both) == len(every) else "{:.1f} -> "
        cells = [
            before.format(b[k]) + f"{s[k]:.1f} ({s[k + '_bias']:+.1f})" for k in ("tpot", "ttft", "ttft_ok")
        ]
        how = " ".join(overrides) + (f" --launch {launch}" if launch != "auto" else "")
        rows = f"{s['n']:,}" + ("" if name == "all" else f" ({moved(base, runs[name]):,})")
        lines.append(f"| {what} | `{how.strip()}` | {rows} | " + " | ".join(cells) + " |")
    return "\n".join(lines).replace("| `` |", "| - |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", type=Path, help="measured rows (e.g. the AIConfigurator dev set)")
    p.add_argument("--out", type=Path, required=True, help="directory of the runs' rows")
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes per run")
    p.add_argument("--rerun", action="store_true", help="run every ablation even if stored")
    a = p.parse_args()
    if not a.csv.is_file():
        sys.exit(errors(f"csv: no such file: {a.csv}"))
    a.out.mkdir(parents=True, exist_ok=True)
    try:
        runs = {n: rows_of(a.csv, a.out, n, o, la, a.jobs, a.rerun) for n, _, o, la in ABLATIONS}
    except ValueError as e:  # a bad CSV: validate's one line naming the row and column
        sys.exit(errors(str(e)))
    print(table(runs))


if __name__ == "__main__":
    main()

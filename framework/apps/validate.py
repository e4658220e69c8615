"""Simulate every row of a measured serving CSV as the setting it was measured in (closed loop:
`concurrency` clients, `isl` prompt and `osl` output tokens, `precision`, `tp`; optional
`engine_version`, `system`, `pp`, `dp`, `ep` / `moe_ep`) and compare predicted with measured
TTFT and TPOT (and the output rate they imply); the table is printed and logged to MLflow as
one run.

  decodelab validate                                  the shipped Llama-3.1-8B rows
  decodelab validate --csv rows.csv engine.chunk_size=2048
  decodelab validate --static                         the decode step alone (calibration)
  decodelab validate --steps                          + each group's decode step and interference
  decodelab validate --csv rows.csv --explain 12      one row: where its TTFT and TPOT went

The CSV needs the columns model, engine, precision, tp, isl, osl, concurrency, ttft_ms, tpot_ms
(optional: engine_version picks among an engine's configs; `system` the hardware config, default
h100_sxm); AIConfigurator's silicon_sample.csv column names are read too. Each row runs with the
conf/engine file whose family / versions match; a row the model cannot express is recorded with its
reason, without a prediction. docs/validation.md."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List

from decodelab.apps import validate_explain
from decodelab.apps.common import errors, run_module, workers
from decodelab.apps.validate_tables import print_aic, print_steps, print_table
from decodelab.config import compose as C
from decodelab.paths import VALIDATION_DIR
from decodelab.runs import aic_rows
from decodelab.runs.validation import LAUNCHES, bias, default_csv, mape, run_validations
from decodelab.runs.validation_peer import read_peer
from decodelab.tracking import store as tracking


def write_out(df, csv: Path, out: Path) -> None:
    """--out DIR: <csv>_rows.csv (every row: prediction or status and reason) and
    <csv>_refused.csv (the rows without a prediction, with their reason)."""
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"{csv.stem}_rows.csv", index=False)
    aic_rows.refusals(df).to_csv(out / f"{csv.stem}_refused.csv", index=False)
    print(f"wrote {out / f'{csv.stem}_rows.csv'} and {out / f'{csv.stem}_refused.csv'}")


def _log(df, csv: Path, a, overrides: List[str], steps=None) -> None:
    """One MLflow run with the MAPEs as metrics and the table as an artifact (tracking settings
    of the default config), as `decodelab claims` does; tagged with how the rows were run (the
    launch recipe, --static, the overrides) so that runs compared in the UI say what differs."""
    tr = C.compose().tracking
    how = {"launch": a.launch, "static": str(bool(a.static)), "overrides": " ".join(overrides)}
    try:
        tracking.log_summary_run(
            tr,
            f"validate {csv.name}",
            {"kind": "validate", "csv": str(csv), **how},
            {
                "tpot_mape_pct": mape(df, "tpot"),
                "ttft_mape_pct": mape(df, "ttft"),
                "tpot_bias_pct": bias(df, "tpot"),
                "ttft_bias_pct": bias(df, "ttft"),
                "tput_mape_pct": mape(df, "tput"),
                "tput_bias_pct": bias(df, "tput"),
                "rows": float(len(df)),
            },
            {"validation.csv": df, **({"validation_steps.csv": steps} if steps is not None else {})},
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
    p.add_argument(
        "--launch",
        choices=LAUNCHES,
        default="auto",
        help="engine settings per row: auto (default) = AIConfigurator's launch rules for "
        "TensorRT-LLM rows (their engine file is AIConfigurator's launch config) and for vLLM from "
        "0.12.0 and SGLang from 0.5.8 (versions its pipeline served after its generator passed those "
        "rules), "
        "the engine files' defaults for older or undated vLLM and SGLang rows; defaults = every "
        "engine file's own defaults; aic = AIConfigurator's rules for every engine (max_num_tokens "
        "= concurrency + isl + 1500; SGLang mixed chunks; graphs for every batch size)",
    )
    p.add_argument(
        "--steps",
        action="store_true",
        help="also split each group's TPOT (rows differing only in osl) into its decode step D and the "
        "prefill interference I, TPOT = D + I / (osl - 1), measured and predicted",
    )
    p.add_argument("--no-track", action="store_true", help="print the table, log nothing")
    p.add_argument(
        "--explain",
        metavar="ROW",
        help="run one row (its data row number or id) and print where its time went: TTFT parts, "
        "TPOT by cause, the steps, a disaggregated row's pools, the notes (no table, nothing logged)",
    )
    p.add_argument(
        "--peer",
        metavar="FILE",
        help="another predictor's numbers on the same rows: a CSV keyed by `row` (1-based data row of "
        "--csv) or `id`, with ttft_ms and/or tpot_ms; its MAPE shown beside ours on the rows both predict",
    )
    p.add_argument("--out", metavar="DIR", help="write <csv>_rows.csv and <csv>_refused.csv (reasons) there")
    p.add_argument(
        "-j",
        "--jobs",
        type=workers,
        default=os.cpu_count() or 1,
        help="worker processes over the CSV's designs (default: CPU count; 1: in this process); "
        "the table is the same for any count",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="every shipped CSV (decodelab/data/validation/*.csv) in one process, a table and run each",
    )


def run(a) -> int:
    csv_arg = [x.split("=", 1)[1] for x in a.overrides if x.startswith("csv=")]
    overrides = [x for x in a.overrides if not x.startswith("csv=")]
    if a.all and (a.csv or csv_arg):
        return errors("--all runs every shipped CSV: give it without --csv / csv=")
    if a.all:
        csvs = sorted(VALIDATION_DIR.glob("*.csv"))
    else:
        csvs = [Path(a.csv or (csv_arg[-1] if csv_arg else default_csv())).expanduser()]
    for csv in csvs:
        if not csv.is_file():
            return errors(f"csv={csv} is not a file")
    if a.explain is not None:
        if a.all:
            return errors("--explain runs one row of one CSV: give it with --csv, not --all")
        try:
            return validate_explain.run(csvs[0], a.explain, overrides, a.static, a.launch, a.out)
        except (ValueError,) + C.hydra_errors() as e:
            return errors(str(e).strip().splitlines()[0])
    try:
        dfs = run_validations(csvs, overrides, static=a.static, launch=a.launch, jobs=a.jobs)
    except (ValueError,) + C.hydra_errors() as e:
        return errors(str(e).strip().splitlines()[0])
    rows = [r for df in dfs for r in df.itertuples()]
    if rows and all(r.status == "invalid" and r.engine_config for r in rows):
        # every row composed and none is a valid design: the overrides given to all of them
        # (a row-specific reason would leave some row valid)
        return errors(rows[0].reason)
    if rows and all(r.status != "ok" for r in rows):  # nothing to compare: one line, not nan%
        return errors(
            f"{' '.join(map(str, csvs))}: none of the {len(rows)} rows can be simulated "
            f"({rows[0].status}: {rows[0].reason})"
        )
    if a.peer:
        if len(dfs) != 1:
            return errors("--peer compares one CSV's rows: give it with --csv, not --all")
        try:
            dfs = [read_peer(Path(a.peer).expanduser(), dfs[0])]
        except ValueError as e:
            return errors(str(e))
    for csv, df in zip(csvs, dfs):
        print_aic(df, csv) if "mode" in df.columns else print_table(df, csv)
        if a.out:
            write_out(df, csv, Path(a.out).expanduser())
        steps = None
        if a.steps:
            from decodelab.runs.validation_steps import step_split

            steps = step_split(df)
            if len(steps):
                print_steps(steps)
            else:  # the split needs two output lengths of one setting
                print(f"note: --steps: no rows of {csv.name} differ only in osl; no decode step split")
        if not a.no_track:
            _log(df, csv, a, overrides, steps)
    return 0


def main(argv: List[str]) -> int:
    return run_module("validate", sys.modules[__name__], argv)

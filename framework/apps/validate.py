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
from decodelab.config import compose as C
from decodelab.paths import VALIDATION_DIR
from decodelab.runs import aic_candidates, aic_rows
from decodelab.runs.validation import (
    GROUPS,
    LAUNCHES,
    bias,
    default_csv,
    launch_notes,
    mape,
    run_validations,
    summary,
    version_notes,
)
from decodelab.runs.validation_peer import peer_summary, read_peer
from decodelab.tracking import store as tracking


def _short_model(m: str) -> str:
    return str(m).split("/")[-1]


def _console():
    from rich.console import Console

    con = Console()
    return con if con.is_terminal else Console(width=200)  # a file or pipe: the whole table, unwrapped


def _setting(r) -> list:
    """The table cells naming a row's (or group's) setting: model, engine, TP, precision, concurrency, isl."""
    return [
        _short_model(r["model"]),
        f"{r['engine']} {r['engine_version']}".strip(),
        *(str(r[k]) for k in ("tp", "precision", "concurrency", "isl")),
    ]


def print_table(df, csv: Path) -> None:
    from rich.table import Table

    con = _console()
    t = Table(title=f"decodelab validate: {csv.name} (error = predicted / measured - 1)")
    cols = ("model", "engine", "TP", "prec", "conc", "isl", "osl")
    cols += ("TTFT meas", "TTFT pred", "err", "TPOT meas", "TPOT pred", "err")
    for col in cols:
        t.add_column(col, justify="left" if col in ("model", "engine") else "right")
    for _, r in df.iterrows():
        ok = r["status"] == "ok"  # else no prediction: its status here, its reason in a note below
        t.add_row(
            *_setting(r),
            str(r["osl"]),
            f"{r['ttft_meas']:.1f}",
            f"{r['ttft_pred']:.1f}" if ok else r["status"],
            f"{r['ttft_err_pct']:+.1f}%" if ok else "-",
            f"{r['tpot_meas']:.2f}",
            f"{r['tpot_pred']:.2f}" if ok else r["status"],
            f"{r['tpot_err_pct']:+.1f}%" if ok else "-",
        )
    con.print(t)
    for line in version_notes(df) + launch_notes(df):
        con.print(f"note: {line}")
    for (status, reason), g in df[df["status"] != "ok"].groupby(["status", "reason"], sort=False):
        r = g.iloc[0]
        where = (
            f"{_short_model(r['model'])} {r['engine']} tp {r['tp']}, concurrency {r['concurrency']}, "
            f"isl {r['isl']}, osl {r['osl']}"
        )
        many = f"{len(g)} rows, the first " if len(g) > 1 else ""
        con.print(f"{status} ({many}{where}): {reason}")
    print_groups(df, GROUPS, con)
    unpredicted = int(df["tpot_pred"].isna().sum())
    con.print(
        f"mean absolute percentage error: TPOT {mape(df, 'tpot'):.1f}% (bias {bias(df, 'tpot'):+.1f}%), "
        f"TTFT {mape(df, 'ttft'):.1f}% (bias {bias(df, 'ttft'):+.1f}%), "
        f"output tok/s {mape(df, 'tput'):.1f}% (bias {bias(df, 'tput'):+.1f}%) over {len(df)} rows"
        + (f" ({unpredicted} without a prediction, not counted)" if unpredicted else "")
    )


GROUP_TITLE = (
    "by group: mean absolute % error (MAPE), mean signed % error (bias), worst ratio; "
    "tok/s: the output rate TTFT and TPOT imply, concurrency x osl / (TTFT + (osl - 1) TPOT)"
)
GROUP_COLS = (
    "group",
    "value",
    "rows",
    "TPOT MAPE",
    "TPOT bias",
    "TPOT worst",
    "TTFT MAPE",
    "TTFT bias",
    "TTFT worst",
    "tok/s MAPE",
    "tok/s bias",
)
# With --peer: per metric, the rows both predict, decodelab's MAPE and the peer's on them
PEER_COLS = ("both", "TPOT ours", "TPOT peer", "TTFT ours", "TTFT peer")


def print_groups(df, groups, con, title: str = GROUP_TITLE) -> None:
    """The summary table by group (runs/validation.summary); with a peer's columns (`tpot_peer`,
    validation_peer.read_peer) its MAPE beside decodelab's on the rows both predict."""
    from rich.table import Table

    s = Table(title=title)
    peer = "tpot_peer" in df.columns
    for col in GROUP_COLS + (PEER_COLS if peer else ()):
        s.add_column(col, justify="left" if col in ("group", "value") else "right")
    both = peer_summary(df, list(groups)) if peer else None
    for i, g in summary(df, groups).iterrows():
        cells = [
            g["group"],
            g["value"],
            str(g["rows"]),
            f"{g['tpot_mape']:.1f}%",
            f"{g['tpot_bias']:+.1f}%",
            f"{g['tpot_worst_x']:.2f}x",
            f"{g['ttft_mape']:.1f}%",
            f"{g['ttft_bias']:+.1f}%",
            f"{g['ttft_worst_x']:.2f}x",
            f"{g['tput_mape']:.1f}%",
            f"{g['tput_bias']:+.1f}%",
        ]
        if peer:
            p = both.iloc[i]
            cells += [f"{p['tpot_both']}/{p['ttft_both']}"]
            cells += [
                f"{p[k]:.1f}%"
                for k in ("tpot_mape_both", "tpot_peer_mape", "ttft_mape_both", "ttft_peer_mape")
            ]
        s.add_row(*cells)
    con.print(s)


AIC_GROUPS = ("system", "model", "engine", "version", "mode", "launches")


def print_aic(df, csv: Path) -> None:
    """A table of AIConfigurator's schema (runs/aic_rows.py): the rows not run counted by reason,
    the rows run by system, model, engine, version (with its engine file) and mode, no per-row
    table (--out writes it)."""
    from rich.table import Table

    con = _console()
    for line in version_notes(df) + launch_notes(df):
        con.print(f"note: {line}")
    ref = aic_rows.refusals(df)
    t = Table(
        title=f"decodelab validate: {csv.name}: {len(ref)} of {len(df)} rows without a prediction, by reason"
    )
    for col in ("status", "reason (kind)", "rows", "first row", "its reason"):
        t.add_column(col, justify="right" if col in ("rows", "first row") else "left")
    for _, r in aic_rows.refusal_counts(ref).iterrows():
        t.add_row(r["status"], r["kind"], str(r["rows"]), str(r["row"]), r["reason"])
    con.print(t)
    ok = df[df["status"] == "ok"]
    cand = ok["candidate"] if "candidate" in ok.columns else [None] * len(ok)
    ok = ok.assign(
        version=[f"{e} {v or '-'} ({c})" for e, v, c in zip(ok.engine, ok.engine_version, ok.engine_config)],
        launches=["mean of candidates" if aic_candidates.is_mean(c) else "one" for c in cand],
    )
    print_groups(ok, AIC_GROUPS, con, f"{csv.name}: the rows run, {GROUP_TITLE}")
    con.print(
        f"mean absolute percentage error: TPOT {mape(ok, 'tpot'):.1f}% (bias {bias(ok, 'tpot'):+.1f}%), "
        f"TTFT {mape(ok, 'ttft'):.1f}% (bias {bias(ok, 'ttft'):+.1f}%), "
        f"output tok/s {mape(ok, 'tput'):.1f}% (bias {bias(ok, 'tput'):+.1f}%) over {len(ok)} rows run "
        f"of {len(df)} ({len(ref)} without a prediction, not counted)"
    )
    flagged = ok[~ok["ttft_ok"].astype(bool)] if "ttft_ok" in ok.columns else ok.iloc[:0]
    if len(flagged):  # rows whose TTFT holds more than the serving (runs/aic_clients.py)
        clean = ok.drop(flagged.index)
        con.print(
            f"TTFT over the {len(clean)} rows whose TTFT is a serving measurement: {mape(clean, 'ttft'):.1f}% "
            f"(bias {bias(clean, 'ttft'):+.1f}%); over all {len(ok)}: {mape(ok, 'ttft'):.1f}%; "
            f"{len(flagged)} rows flagged: {flagged['ttft_note'].iloc[0]}"
        )


def write_out(df, csv: Path, out: Path) -> None:
    """--out DIR: <csv>_rows.csv (every row: prediction or status and reason) and
    <csv>_refused.csv (the rows without a prediction, with their reason)."""
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"{csv.stem}_rows.csv", index=False)
    aic_rows.refusals(df).to_csv(out / f"{csv.stem}_refused.csv", index=False)
    print(f"wrote {out / f'{csv.stem}_rows.csv'} and {out / f'{csv.stem}_refused.csv'}")


# A group whose simulated decoding requests exceed the measured ones by more than this factor is
# named after the --steps table: a display threshold, not a model parameter.
ADMISSION_GAP = 1.25


def _label(r) -> str:
    """A group's setting in a few words: engine version, TP, concurrency, isl."""
    version = f" {r['engine_version']}" if r["engine_version"] else ""
    return f"{r['engine']}{version} TP{int(r['tp'])} c{int(r['concurrency'])} isl {int(r['isl'])}"


def print_steps(steps) -> None:
    """The decode step D and the interference I of each group (runs/validation_steps.py)."""
    from rich.table import Table

    con = _console()
    t = Table(
        title="decode step D and interference I by group: TPOT = D + I / (osl - 1), "
        "least squares over the group's osl values (error = predicted / measured - 1); N: requests "
        "decoding at once, concurrency x (osl - 1) TPOT / (TTFT + (osl - 1) TPOT), the group's mean"
    )
    for col in (
        "model",
        "engine",
        "TP",
        "prec",
        "conc",
        "isl",
        "osl",
        "D meas",
        "D pred",
        "err",
        "I meas",
        "I pred",
        "N meas",
        "N pred",
    ):
        t.add_column(col, justify="left" if col in ("model", "engine", "osl") else "right")
    for _, r in steps.iterrows():
        t.add_row(
            *_setting(r),
            r["osl"],
            f"{r['d_meas_ms']:.2f}",
            f"{r['d_pred_ms']:.2f}",
            f"{r['d_err_pct']:+.1f}%",
            f"{r['i_meas_ms']:.0f}",
            f"{r['i_pred_ms']:.0f}",
            f"{r['n_meas']:.1f}",
            f"{r['n_pred']:.1f}",
        )
    con.print(t)
    if len(steps):
        con.print(
            f"decode step D: mean error {steps['d_err_pct'].mean():+.1f}%, "
            f"mean |error| {steps['d_err_pct'].abs().mean():.1f}% over {len(steps)} groups (D and I in ms)"
        )
        over = steps[steps["n_pred"] > ADMISSION_GAP * steps["n_meas"]]
        if len(over):
            con.print(
                f"note: {len(over)} group(s) decode more requests at once in the simulation than measured "
                f"(N pred > {ADMISSION_GAP:g} x N meas: "
                + ", ".join(f"{_label(r)} {r['n_pred']:.1f} vs {r['n_meas']:.1f}" for _, r in over.iterrows())
                + "): the engine held fewer requests than the model lets it (a KV pool, batch cap or "
                "admission rule the model lacks), not a slower step"
            )


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

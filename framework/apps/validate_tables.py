"""The tables `decodelab validate` prints (apps/validate.py): a measured CSV's rows and its groups
(engine, model, TP, concurrency: MAPE, bias, worst ratio, with another predictor's MAPE beside ours
under --peer), AIConfigurator's schema by system / model / engine / version / mode with the rows not
run counted by reason, and the --steps split of each group's TPOT into decode step and interference."""

from __future__ import annotations

from pathlib import Path

from decodelab.runs import aic_candidates, aic_rows
from decodelab.runs.validation import GROUPS, bias, launch_notes, mape, summary, version_notes
from decodelab.runs.validation_peer import peer_summary


def _short_model(m: str) -> str:
    return str(m).split("/")[-1]


def console():
    """A rich console for the tables: the terminal's, or 200 columns wide into a file or pipe."""
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

    con = console()
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

    con = console()
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

    con = console()
    t = Table(
        title="decode step D and interference I by group: TPOT = D + I / (osl - 1), "
        "least squares over the group's osl values (error = predicted / measured - 1); stall: "
        "(I meas - I pred) / (conc - 1), a prompt's step the prediction lacks; TTFT gap: measured - "
        "predicted; N: requests decoding at once, concurrency x (osl - 1) TPOT / (TTFT + (osl - 1) "
        "TPOT), the group's mean"
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
        "stall",
        "TTFT gap",
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
            f"{r['stall_ms']:.0f}",
            f"{r['ttft_gap_ms']:.0f}",
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

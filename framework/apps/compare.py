"""`decodelab compare [RUN_ID ...] [--experiment NAME] [--filter EXPR] [--csv FILE]`: selected
MLflow runs side by side, as a pandas table from `mlflow.search_runs`, printed (and saved as CSV
with --csv; compare writes nothing otherwise).

Runs are chosen by id, or by an MLflow search filter over an experiment (e.g.
`--filter "tags.status = 'ok' and params.model.name = 'llama3_1_8b'"`); sweep parent runs are left
out. The table keeps the params that differ between the chosen runs (`--params` names others)
and the headline metrics (`--metrics` to choose). A few runs print as columns (runs side by
side), many as rows. The tracker is the default config's (`tracking.uri=...` to change).

`--table DIR|FILE` compares the designs of a sweep's results table (results.parquet, every
design of the sweep, also those that are not MLflow child runs) instead; `--filter` is then a
pandas query over its columns (dotted names in backquotes), e.g. `--filter "status == 'ok' and tpot_ms < 5"`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional
from decodelab.apps.common import errors, narrow_table, run_module
from decodelab.output.table import read_table
from decodelab.runs.resume import EXTRA_COLUMNS
from decodelab.config.diagnose import did_you_mean, listing
from decodelab.tracking.store import select_runs as select
from decodelab.core.schema import TrackingConfig
from decodelab.tracking.sync import tracking_keys, tracking_override_errors

METRICS = ("tpot_ms", "ttft_ms", "tok_s_user", "tok_s_aggregate", "pct_roofline", "mem_hbm_pct")
METRICS_SET = set(METRICS)
PRINTED = (
    "tpot_ms",
    "ttft_ms",
    "tok_s_aggregate",
    "pct_roofline",
)  # printed by default (80 columns); the CSV has all of METRICS
# params the run name (decodelab.core.labels) already shows
IN_LABEL = {"workload.batch_size", "workload.prompt_len", "workload.output_len", "hardware.tensor_parallel"}
SIDE_BY_SIDE = 8  # at most this many runs print as columns
MAX_PARAMS = 6  # params printed (the CSV has every one that differs)
RECENT = 20  # no run ids and no filter: the most recent this many runs


def table(df, params: Optional[List[str]] = None, metrics: Optional[List[str]] = None):
    """Run id, name and status, the params that differ (or those named), the metrics."""
    import pandas as pd

    pcols = [c for c in df.columns if c.startswith("params.")]
    if params:
        keep_p = [f"params.{p}" for p in params if f"params.{p}" in df.columns]
    else:
        keep_p = sorted(
            c for c in pcols if df[c].astype(str).nunique(dropna=False) > 1 and not c.endswith(".source")
        )  # citations, not settings
    mnames = metrics or [m for m in METRICS if f"metrics.{m}" in df.columns]
    keep_m = [f"metrics.{m}" for m in mnames if f"metrics.{m}" in df.columns]
    base = [c for c in ("run_id", "tags.mlflow.runName", "tags.status") if c in df.columns]
    out = df[base + keep_p + keep_m].copy()
    out.columns = [
        c.split(".", 1)[1]
        if c.startswith(("params.", "metrics."))
        else {"tags.mlflow.runName": "name", "tags.status": "status"}.get(c, c)
        for c in out.columns
    ]
    return out.reset_index(drop=True) if isinstance(out, pd.DataFrame) else out


def from_table(path: str, query: str = "", limit: int = 10000):
    """A sweep's results table shaped like mlflow.search_runs' DataFrame (run_id = `job N`,
    params.* = the dotted design columns, metrics.* = the metrics), rows chosen by a pandas
    query."""
    import pandas as pd

    t = read_table(path)
    if "job" in t.columns:
        t = t.sort_values("job", kind="stable")
    if query:
        t = t.query(query, engine="python")
    t = t.head(limit)
    cols = {
        "run_id": [f"job {j}" for j in t["job"]] if "job" in t.columns else [str(i) for i in t.index],
        "tags.status": t["status"],
    }
    for c in t.columns:
        if "." in c:
            cols[f"params.{c}"] = t[c]
        elif (
            c not in ("status", "reason", "config_hash", "code_version", *EXTRA_COLUMNS)
            and t[c].dtype.kind in "fi"
        ):
            cols[f"metrics.{c}"] = t[c]
    return pd.DataFrame(cols).reset_index(drop=True)


def shown(t, explicit=None, with_name: bool = True, most: int = MAX_PARAMS):
    """The columns worth printing: a group's fields are left out where its component differs
    (`model.name` differs: not its ~20 shape params; the run name says which), nor what the run
    name already says (IN_LABEL), at most `most` params, and the metrics named `explicit`
    (--metrics) or else the PRINTED ones; the CSV keeps them all. Returns (table, number of params left out)."""
    cols = list(t.columns)
    metrics = [c for c in (explicit or PRINTED) if c in cols]
    params = [
        c
        for c in cols
        if c not in METRICS_SET | set(explicit or ()) and c not in ("run_id", "name", "status")
    ]
    chosen = {c.split(".")[0] for c in params if c.endswith(".name") and c.count(".") == 1}
    keep = [c for c in params if c.split(".")[0] not in chosen and not (with_name and c in IN_LABEL)]
    if not with_name:  # runs side by side: no run-name row, so the differing components
        keep = [c for c in params if c.split(".")[0] in chosen and c.endswith(".name")] + keep
    left = max(len(keep) - most, 0)
    base = [c for c in ("run_id", "name", "status") if c in cols and (with_name or c != "name")]
    return t[base + keep[:most] + metrics], left


def show(t, title: str, explicit=None) -> None:
    from rich.console import Console

    fmt = lambda v: ("-" if v != v else f"{v:.4g}") if isinstance(v, float) else str(v)  # noqa: E731
    side = 0 < len(t) <= SIDE_BY_SIDE
    t, left = shown(t, explicit, with_name=not side)
    if side:  # runs side by side: one column per run
        names = ["", *[str(r)[:8] for r in t["run_id"]]]
        rows = [[col, *[fmt(v) for v in t[col]]] for col in t.columns[1:]]
        numeric = [False] + [True] * len(t)
    else:
        names = ["run", *t.columns[1:]]
        rows = [[str(row[0])[:8], *[fmt(v) for v in row[1:]]] for row in t.itertuples(index=False)]
        numeric = [False] + [t[c].dtype.kind == "f" for c in t.columns[1:]]
    Console().print(narrow_table(title, names, rows, numeric))
    if left:
        print(f"{left} more params differ between these runs (--params NAME,... or --csv FILE shows them)")


def add_arguments(ap) -> None:
    ap.add_argument("args", nargs="*", metavar="RUN_ID | tracking.KEY=VALUE")
    ap.add_argument("--experiment", help="experiment name (default: the config's)")
    ap.add_argument("--filter", default="", help="MLflow search filter, e.g. \"tags.status = 'ok'\"")
    ap.add_argument("--params", help="comma-separated params to show (default: those that differ)")
    ap.add_argument("--metrics", help=f"comma-separated metrics (default: {','.join(METRICS)})")
    ap.add_argument("--csv", help="also write the table to this CSV file")
    ap.add_argument(
        "--max",
        type=int,
        default=None,
        help=f"at most this many runs (default: all chosen; {RECENT} most recent when none are named)",
    )
    ap.add_argument(
        "--table",
        metavar="SWEEP_DIR|FILE",
        help="compare the designs of a sweep's results table (results.parquet) instead of MLflow runs; "
        "--filter is then a pandas query",
    )


def run(a) -> int:
    from omegaconf import OmegaConf
    from dataclasses import asdict

    over = OmegaConf.to_container(OmegaConf.from_dotlist([x for x in a.args if "=" in x]))
    bad = [k for k in over if k != "tracking"] or tracking_override_errors(over)
    if bad:
        print(
            f"error: {', '.join(bad)}: give run ids and tracking.KEY=VALUE overrides, KEY one "
            f"of {', '.join(tracking_keys())}",
            file=sys.stderr,
        )
        return 2
    tr = {**asdict(TrackingConfig()), **over.get("tracking", {})}
    run_ids = [x for x in a.args if "=" not in x]
    most = a.max or (10000 if run_ids or a.filter or a.table else RECENT)
    try:
        if a.table:
            df = from_table(a.table, a.filter, most + 1)
            tr["uri"] = a.table
        else:
            df = select(tr["uri"], a.experiment or tr["experiment"], run_ids, a.filter, most + 1)
    except FileNotFoundError as e:
        return errors(str(e))
    except Exception as e:
        return errors(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    if df is None:
        return errors(
            f"tracking.uri={tr['uri']}: no MLflow store there (run a design first, or give tracking.uri=...)"
        )
    if df.empty:
        print("no runs match")
        return 1
    have_m = sorted(c.split(".", 1)[1] for c in df.columns if c.startswith("metrics."))
    have_p = sorted(c.split(".", 1)[1] for c in df.columns if c.startswith("params."))
    for flag, names, have in (("--metrics", a.metrics, have_m), ("--params", a.params, have_p)):
        unknown = [n for n in (names or "").split(",") if n and n not in have]
        if unknown:
            return errors(
                f"{flag} {unknown[0]}: no such {flag[2:-1]} in the chosen runs"
                f"{did_you_mean(unknown[0], have)} ({flag[2:]}: {listing(have)})"
            )
    more = len(df) > most
    df = df.iloc[:most]
    t = table(df, a.params.split(",") if a.params else None, a.metrics.split(",") if a.metrics else None)
    show(
        t,
        f"{'the most recent ' if more else ''}{len(t)} runs ({tr['uri']})",
        a.metrics.split(",") if a.metrics else None,
    )
    if more:
        print("more runs match: --max N shows more, --filter EXPR or run ids choose")
    if a.csv:
        Path(a.csv).parent.mkdir(parents=True, exist_ok=True)
        t.to_csv(a.csv, index=False)
        print(f"wrote {a.csv}")
    return 0


def main(argv: List[str]) -> int:
    return run_module("compare", sys.modules[__name__], argv)

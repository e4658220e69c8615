"""Rows whose launch the data leaves open: disaggregated rows of an InferenceX run that record no
pools and match several of its benchmark recipes (recipes of different pools, or of the same pools
with and without MTP; framework/runs/aic_recipes.py), and aggregated rows at a setting that
several configs of one run swept (framework/runs/aic_launches.py), less the launches the run's other
measurements at that setting settle (`expand_all`). `decodelab validate` runs each
candidate launch (`expand`: one row per candidate, column `candidate` "i/k") and reports the row
once, with the mean of the candidates' predictions and their range in its reason (`combine`): the
expectation over launches the data cannot tell apart, each weighted the same, rather than a
refusal. A row whose candidates cannot all run (an MTP recipe's draft length not known) stays
refused with its reason."""

from __future__ import annotations

from typing import List

import numpy as np

from decodelab.runs import aic_launches, aic_recipes, aic_rows
from decodelab.runs.aic_mapping import stated_clients
from decodelab.runs.validation_steps import output_rate

# pools_of's refusals that name several launches (aic_recipes.pools_of)
OPEN = ("ambiguous recipe:", "MTP or not:")


def expand_all(recs: List[tuple], twins: dict) -> List[dict]:
    """The records of every (record, CSV row) pair of `recs` (aic_rows.frame), each row's by `expand`,
    its open launches less those its siblings settle (`_settled`)."""
    keys = [(_run_key(rec, row), aic_rows.twin_key(row)) for rec, row in recs]
    settled = _settled(recs, keys)
    out: List[dict] = []
    for (rec, row), (key, own) in zip(recs, keys):
        others = {launch for twin, launch in settled.get(key, ()) if twin != own}
        out += expand(rec, row, twins.get(own), others)
    return out


def _gpus(rec: dict) -> int:
    return int(rec.get("tp", 1)) * int(rec.get("dp", 1))


def _is_open(rec: dict) -> bool:
    """Whether a disaggregated record names several launches (pools_of's OPEN refusals)."""
    return rec.get("mode") == "disagg" and any(k in str(rec.get("refuse", "")) for k in OPEN)


def _run_key(rec: dict, row):
    """A row's setting in one run: its mode, system, engine, version, precision, lengths, clients,
    an aggregated row's GPUs (a disaggregated run's launches differ in pools) and its measured time to
    the second (aic_recipes.exact_time); None without one, or refused other than for its launch."""
    t = aic_recipes.exact_time(aic_rows.cell(row, "silicon_data_source"))
    mode = rec.get("mode")
    if mode not in ("agg", "disagg") or not t or (rec.get("refuse") and not _is_open(rec)):
        return None
    keys = ("system", "engine", "engine_version", "precision", "isl", "osl")
    clients = stated_clients(row) if mode == "disagg" else rec.get("concurrency")
    return (mode, *(rec.get(k) for k in keys), clients, _gpus(rec) if mode == "agg" else 0, t)


def _disagg_launch(rec: dict) -> tuple:
    """A disaggregated launch as its siblings compare it: its pools (aic_recipes.POOL_COLUMNS) and
    whether it drafts (MTP); a row that records its pools runs none (aic_recipes.recorded_settings)."""
    mtp = bool(rec.get("decode_mtp") or rec.get("prefill_mtp"))
    return (*(rec.get(k) for k in aic_recipes.POOL_COLUMNS), mtp)


def _settled(recs: List[tuple], keys: List[tuple]) -> dict:
    """{run key: {(twin_key, launch)}}: the rows one launch settles (`keys`: each row's run key and
    twin key): an aggregated row where one entry fits or a copy's config_id picks one
    (aic_rows.same_run), a disaggregated one that runs (its recorded pools, or the one recipe of pools
    and MTP it matches: `_disagg_launch`). A run measures each launch it swept once at a setting, so a
    sibling row there (another measurement, the same run key) ran another."""
    out: dict = {}
    for (rec, row), (key, own) in zip(recs, keys):
        if key is None or (rec["mode"] == "disagg" and rec.get("refuse")):
            continue
        if rec["mode"] == "disagg":
            launch = _disagg_launch(rec)
        else:
            found = aic_launches.launches_of(row, _gpus(rec), rec.get("concurrency"))
            if len(found) != 1:
                continue
            launch = found[0]["launch"]
        out.setdefault(key, set()).add((own, launch))
    return out


def expand(rec: dict, row, twin, others=frozenset()) -> List[dict]:
    """`rec` (aic_rows.to_row of CSV row `row`) as one row per candidate launch, or [rec]; `others`:
    the launches other measurements of its run at its setting settle (expand_all), not its own."""
    if rec.get("mode") == "agg" and not rec.get("refuse"):
        found = aic_launches.open_launches(row, _gpus(rec), rec.get("concurrency"))
        return _records(rec, found, others, lambda c: c["launch"], lambda c: {})
    if not _is_open(rec):
        return [rec]
    model, _ = aic_rows.model_of(aic_rows.cell(row, "model_path"))
    found = aic_recipes.candidates(row, aic_rows.twin_pools(twin, model))
    return _records(rec, found, others, _disagg_launch, lambda c: {"tp": c["decode_tp"], "refuse": ""})


def _records(rec: dict, found: List[dict], others, launch, extra) -> List[dict]:
    """`rec` with each launch of `found` whose `launch(c)` is not in `others` (every one where all
    are), plus `extra(c)`: one settled launch as the row itself, several as candidates "i/k"; [rec]
    where `found` is empty."""
    left = [c for c in found if launch(c) not in others] or found
    if len(left) == 1:
        return [{**rec, **left[0], **extra(left[0])}]
    k = len(left)
    return [{**rec, **c, **extra(c), "candidate": f"{i}/{k}"} for i, c in enumerate(left, start=1)] or [rec]


def _merged(g) -> dict:
    """One validation record for the candidate records `g` of one CSV row."""
    ok = g[g["status"] == "ok"]
    out = (ok if len(ok) else g).iloc[0].to_dict()
    if out.get("mode") == "agg":  # candidates of one run's configs (aic_launches.launches_of)
        out["launch"] = " | ".join(str(r) for r in g["launch"])
    else:
        out["recipe"] = " | ".join(str(r) for r in g["recipe"])
    out["candidate"] = f"{len(ok)} of {len(g)}"
    if not len(ok):
        return out
    for q in ("ttft", "tpot"):
        out[f"{q}_pred"] = float(ok[f"{q}_pred"].mean())
    out["tput_pred"] = float(output_rate(out["concurrency"], out["osl"], out["ttft_pred"], out["tpot_pred"]))
    for q in ("ttft", "tpot", "tput"):
        out[f"{q}_err_pct"] = 100.0 * (out[f"{q}_pred"] / out[f"{q}_meas"] - 1.0)
    t, p = ok["ttft_pred"], ok["tpot_pred"]
    out["reason"] = (
        f"the mean of {len(ok)} candidate launches (TTFT {t.min():.0f}-{t.max():.0f} ms, TPOT "
        f"{p.min():.2f}-{p.max():.2f} ms)"
        + (
            f"; {len(g) - len(ok)} not run: {g[g['status'] != 'ok']['reason'].iloc[0]}"
            if len(ok) < len(g)
            else ""
        )
    )
    return out


def is_mean(candidate) -> bool:
    """Whether a record's `candidate` marks a row reported as its candidates' mean (_merged: "k of n")."""
    return " of " in str(candidate)


def combine(df):
    """The validation table with each expanded row's candidate records merged into one (_merged),
    in CSV row order; a table without candidates as it is."""
    import pandas as pd

    if "candidate" not in df.columns:
        return df
    cand = df["candidate"].astype(str).str.contains("/", regex=False)
    if not cand.any():
        return df
    merged = pd.DataFrame([_merged(g) for _, g in df[cand].groupby("row", sort=False)])
    out = pd.concat([df[~cand], merged], ignore_index=True)
    order = np.argsort(out["row"].to_numpy(), kind="stable")
    return out.iloc[order].reset_index(drop=True)

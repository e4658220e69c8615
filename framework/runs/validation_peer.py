"""Another predictor's numbers beside decodelab's on the same rows (`decodelab validate --peer
FILE`; docs/validation.md "Reading AIConfigurator's silicon rows").

The peer CSV names each row by `row`, the 1-based data row of the measured CSV (its line number
after the header, comment lines not counted; the `row` column of validate's table), or by `id`,
AIConfigurator's row id, when the measured CSV has one and the ids are unique. Its predictions are
`ttft_ms` and / or `tpot_ms` (a `peer_` or `pred_` prefix is accepted too). A peer MAPE is taken
on the rows both decodelab and the peer predict, beside decodelab's own MAPE on those same rows."""

from __future__ import annotations

from pathlib import Path
from typing import List

METRICS = ("ttft", "tpot")
PREFIXES = ("", "peer_", "pred_", "predicted_")


def read_peer(path: Path, df):
    """`df` (a validation table with `row`, maybe `id`) with `ttft_peer` / `tpot_peer` columns from
    the peer CSV (NaN where the peer has no number). A bad file is one ValueError naming it."""
    import pandas as pd

    try:
        peer = pd.read_csv(path)
    except (OSError, pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ValueError(f"--peer {path}: not a readable CSV ({type(e).__name__})")
    key = "row" if "row" in peer.columns else "id" if "id" in peer.columns else None
    if key is None:
        raise ValueError(f"--peer {path}: needs a `row` (data row of the measured CSV) or `id` column")
    if key == "id" and ("id" not in df.columns or not df["id"].is_unique):
        raise ValueError(
            f"--peer {path}: keyed by `id`, but the measured CSV's ids are missing or not unique"
        )
    cols = {}
    for m in METRICS:
        got = [p + f"{m}_ms" for p in PREFIXES if p + f"{m}_ms" in peer.columns]
        if got:
            cols[got[0]] = f"{m}_peer"
    if not cols:
        raise ValueError(f"--peer {path}: needs a ttft_ms or tpot_ms column (the peer's predictions)")
    if peer[key].duplicated().any():
        raise ValueError(f"--peer {path}: {key} {peer[key][peer[key].duplicated()].iloc[0]} appears twice")
    peer = peer[[key, *cols]].rename(columns=cols)
    if key == "row":
        peer["row"] = pd.to_numeric(peer["row"], errors="coerce")
    else:
        peer["id"] = peer["id"].astype(str)
    for c in cols.values():
        peer[c] = pd.to_numeric(peer[c], errors="coerce")
    left = df.drop(columns=[c for c in cols.values() if c in df.columns])
    if key == "id":
        left = left.assign(_key=left["id"].astype(str))
        out = left.merge(peer.rename(columns={"id": "_key"}), on="_key", how="left").drop(columns="_key")
    else:
        out = left.merge(peer, on="row", how="left")
    for m in METRICS:
        if f"{m}_peer" not in out.columns:
            out[f"{m}_peer"] = float("nan")
    return out


def peer_stats(d) -> dict:
    """Per metric: rows both predict, decodelab's MAPE and the peer's MAPE on those rows."""
    out = {}
    for m in METRICS:
        both = d[d[f"{m}_pred"].notna() & d[f"{m}_peer"].notna() & (d["status"] == "ok")]
        ours = (both[f"{m}_pred"] / both[f"{m}_meas"] - 1.0).abs().mean() * 100.0
        theirs = (both[f"{m}_peer"] / both[f"{m}_meas"] - 1.0).abs().mean() * 100.0
        out.update({f"{m}_both": len(both), f"{m}_mape_both": ours, f"{m}_peer_mape": theirs})
    return out


def peer_summary(df, groups: List[str]):
    """One row per group value (and `all`): peer_stats of its rows."""
    import pandas as pd

    recs = [{"group": "all", "value": "all", **peer_stats(df)}]
    for g in groups:
        for v, d in df.groupby(g, sort=True):
            recs.append({"group": g, "value": str(v), **peer_stats(d)})
    return pd.DataFrame(recs)

"""Another predictor's numbers beside decodelab's on the same rows (`decodelab validate --peer
FILE`; docs/validation.md "Reading AIConfigurator's silicon rows").

The peer CSV names each row by `row`, the 1-based data row of the measured CSV (its line number
after the header, comment lines not counted; the `row` column of validate's table), or by `id`,
AIConfigurator's row id, when the measured CSV has one and the ids are unique. Its predictions are
`ttft_ms` and / or `tpot_ms` (a `peer_` or `pred_` prefix is accepted too), numbers > 0 or empty (no
prediction). A peer file may name rows the measured CSV lacks (one of a whole file's ids beside a
part of it), but not only such rows. A peer MAPE is taken on the rows both decodelab and the peer
predict, beside decodelab's own MAPE on those same rows."""

from __future__ import annotations

import numbers
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
    peer = _checked(path, peer[[key, *cols]].rename(columns=cols), key, list(cols.values()))
    known = set(df[key].astype(str) if key == "id" else pd.to_numeric(df["row"], errors="coerce"))
    if not peer[key].isin(known).any():
        raise ValueError(f"--peer {path}: no {key} of it is a row of the measured CSV")
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


def _checked(path: Path, peer, key: str, metrics: List[str]):
    """The peer table with its keys and predictions as numbers (ids as text); a `row` that is no
    positive integer or a prediction that is no number > 0 is one ValueError naming it (an empty
    prediction cell: the peer has none for that row)."""
    import pandas as pd

    if key == "row":
        rows = pd.to_numeric(peer["row"], errors="coerce")
        bad = ~((rows > 0) & (rows == rows.round()))
        if bad.any():
            raise ValueError(
                f"--peer {path}: row={_shown(peer['row'][bad].iloc[0])} must be a positive integer"
            )
        peer = peer.assign(row=rows)
    else:
        peer = peer.assign(id=peer["id"].astype(str))
    for c in metrics:
        v = pd.to_numeric(peer[c], errors="coerce")
        bad = peer[c].notna() & ~(v > 0)
        if bad.any():
            at = bad.to_numpy().argmax()
            raise ValueError(
                f"--peer {path}: {key} {_shown(peer[key].iloc[at])}: {c.replace('_peer', '_ms')}={_shown(peer[c].iloc[at])} "
                "must be a number > 0 (an empty cell: no prediction for that row)"
            )
        peer = peer.assign(**{c: v})
    return peer


def _shown(v) -> str:
    """A cell as written: a number plainly (-5, 2.5), text quoted."""
    return f"{float(v):g}" if isinstance(v, numbers.Number) else repr(v)


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

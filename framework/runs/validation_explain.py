"""One row of a measured serving CSV explained (decodelab validate --explain ROW; docs/validation.md).

The row is run exactly as `decodelab validate` runs it (validation.read_rows, validation_predict:
the same engine file, launch, workload and overrides), once per launch it may have run as (a row
of aic_candidates: each candidate, not their mean), and its whole result is kept: the record the
validation table shows, every metric of the serving run (TTFT and TPOT percentiles, the mean
request's decode time by cause, queueing, batch, KV and, for a disaggregated row, the pools'
queues, KV transfer and busy shares) and the simulation's notes. `parts` picks from the metrics
what splits TTFT and TPOT; the command prints them (apps/validate_explain.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

from decodelab.config import compose as C
from decodelab.kernel_layout import CAUSES
from decodelab.runs import validation_predict as P
from decodelab.runs.validation import read_rows

# The metrics that say where a row's time went, in print order: (label, metric, unit); absent
# ones (another mode's) are left out. Aggregated runs report queue_ms (send -> first step that
# holds the request); disaggregated ones the pools' queues and the KV transfer.
STEP_METRICS = (
    ("mean batch (sequences per step)", "batch_mean", ""),
    ("largest batch", "batch_max", ""),
    ("steps with prefill work, share of busy time", "mixed_step_time_pct", "%"),
    ("steps with prefill work, mean", "prefill_step_ms", "ms"),
    ("decode-only steps, mean", "decode_step_ms", "ms"),
    ("engine busy, share of the run", "busy_pct", "%"),
    ("waiting requests per step (mean)", "queue_len_mean", ""),
    ("preemptions", "n_preemptions", ""),
    ("KV cache peak, share of the pool", "kv_mem_max_pct", "%"),
)
TTFT_METRICS = (
    ("mean", "ttft_ms", "ms"),
    ("p50", "ttft_p50_ms", "ms"),
    ("p90", "ttft_p90_ms", "ms"),
    ("p99", "ttft_p99_ms", "ms"),
    ("first wave (requests sent together at the start), share", "first_wave_share_pct", "%"),
    ("first wave, mean", "ttft_first_wave_ms", "ms"),
    ("after the first wave, mean", "ttft_after_first_wave_ms", "ms"),
    ("queued before its steps (mean; disaggregated: both pools)", "queue_ms", "ms"),
    ("prefill pool: waiting (mean)", "prefill_queue_ms", "ms"),
    ("prefill end (mean)", "prefill_ttft_ms", "ms"),
    ("KV transfer (mean)", "kv_transfer_ms", "ms"),
    ("decode pool: waiting (mean)", "decode_queue_ms", "ms"),
)
POOL_METRICS = (
    ("prefill pool busy", "prefill_busy_pct", "%"),
    ("decode pool busy", "decode_busy_pct", "%"),
    ("decode mean batch", "decode_batch_mean", ""),
    ("fixed-point rounds", "disagg_rounds", ""),
)


def matching(items: Sequence[P.Item], ident: str) -> List[P.Item]:
    """The items of the row named `ident`: its 1-based data row number (the table's `row`) or its
    `id` text; every candidate launch of it."""
    ident = str(ident).strip()
    out = []
    for it in items:
        row = it[2]
        if ident in (str(row.get("row", it[0])), str(row.get("id", ""))):
            out.append(it)
    return out


def select(csv: Path, ident: str, static: bool = False, ckpt: Optional[str] = None) -> List[P.Item]:
    """The row's items of `csv`; ValueError (one line) when no row is named `ident`."""
    _, items = read_rows(csv, static, ckpt)
    found = matching(items, ident)
    if not found:
        rows = max((int(it[2].get("row", it[0])) for it in items), default=0)  # candidates share a row
        raise ValueError(f"--explain {ident}: no row of {csv.name} has that row number (1-{rows}) or id")
    return found


def parts(metrics: Dict[str, float]) -> Dict[str, List[tuple]]:
    """The metrics that split the row's time, by section: (label, value, unit) each; the TPOT
    section is the mean request's decode time per output token by cause, and `other` what its
    TPOT holds beyond them (time between steps: an idle engine, a late send)."""

    def pick(table):
        return [(lab, float(metrics[k]), u) for lab, k, u in table if k in metrics]

    causes = [(c, float(metrics[f"tpot_{c}_ms"]), "ms") for c in CAUSES if f"tpot_{c}_ms" in metrics]
    if causes and "tpot_ms" in metrics:
        causes.append(("other", float(metrics["tpot_ms"]) - sum(v for _, v, _ in causes), "ms"))
    return {
        "ttft": pick(TTFT_METRICS),
        "tpot": causes,
        "steps": pick(STEP_METRICS),
        "pools": pick(POOL_METRICS),
    }


def explain(
    items: Sequence[P.Item], overrides: List[str], static: bool = False, launch: str = "auto"
) -> List[dict]:
    """Per item: {"record": the validation table's row and its `config` (the design's overrides),
    "metrics", "notes", "parts"}. A config that does not compose is a ValueError (one line), as in
    predict_rows."""
    pinned = P.pinned_keys(overrides)
    out = []
    with C.context():
        for n, key, row in items:
            res = P.row_result({}, key, row, overrides, pinned, static, launch)
            metrics = {k: float(v) for k, v in res["metrics"].items() if isinstance(v, (int, float))}
            rec = {"row": row.get("row", n), **P.record(row, key, res, launch)}
            # the composition the row runs as (before its workload and per-row engine values)
            rec["config"] = " ".join(key) if key[0] != P.UNMAPPED else ""
            out.append({"record": rec, "metrics": metrics, "notes": list(res.notes), "parts": parts(metrics)})
    return out

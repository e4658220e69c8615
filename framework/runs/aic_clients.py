"""Which benchmark client measured a row of AIConfigurator's schema, and which rows measured another
setting than they state (framework/data/validation/aic_mapping.yaml `clients`, `not_as_stated`;
framework/runs/aic_rows.py to_row uses them).

A row's client sets its workload in decodelab validate (validation_predict.row_workload): the
length draw (`range_ratio`: uniform integers in [int(L x ratio), L], 1 = fixed lengths), measured
and warm-up requests per client, the prompt text's bytes per token, and `ttft_ok` (False: the
row's TTFT holds more than the serving, `ttft_note` says what; validate prints TTFT over the
ttft_ok rows and over all)."""

from __future__ import annotations

from decodelab.runs.aic_mapping import MEASURED, cell, fits, mapping

# The columns client_of gives every row; a row no client describes keeps validate's client
# (validation_predict.row_workload)
NO_CLIENT = {
    "client": "",
    "range_ratio": float("nan"),
    "requests_per_client": float("nan"),
    "warmup_per_client": float("nan"),
    "prompt_bytes_per_token": float("nan"),
    "ttft_ok": True,
    "ttft_note": "",
}


def not_as_stated(row, gpus, concurrency) -> str:
    """'' or why a row measured another setting than it states (aic_mapping.yaml `not_as_stated`)."""
    for e in mapping().get("not_as_stated") or []:
        if fits(e["match"], row, gpus, concurrency):
            return str(e["why"])
    return ""


def client_of(row) -> dict:
    """The row's client (NO_CLIENT's columns): the first `clients` entry of the row's mode (an
    entry's `mode`, default agg) whose markers are in its silicon_data_source (an entry without
    markers: any); its warm-up the first `warmups` entry whose `before` date is after the row's
    measured= date (or has no `before`)."""
    mode = cell(row, "mode").lower() or "agg"
    source = cell(row, "silicon_data_source")
    for c in mapping().get("clients") or []:
        if str(c.get("mode", "agg")) != mode:
            continue
        if c.get("markers") and not any(m in source for m in c["markers"]):
            continue
        m = MEASURED.search(source)
        day = m.group(1) if m else ""
        w = next(w for w in c["warmups"] if "before" not in w or (day and day < str(w["before"])))
        return {
            "client": str(c["name"]),
            "range_ratio": float(c["range_ratio"]),
            "requests_per_client": int(c["requests_per_client"]),
            "warmup_per_client": int(w["per_client"]),
            "prompt_bytes_per_token": float(c.get("prompt_bytes_per_token", "nan")),
            "ttft_ok": bool(w.get("ttft_ok", True)),
            "ttft_note": str(w.get("why", "")),
        }
    return dict(NO_CLIENT)

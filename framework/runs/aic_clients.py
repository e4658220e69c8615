"""Which benchmark client measured a row of AIConfigurator's schema, and which rows measured another
setting than they state (framework/data/validation/aic_mapping.yaml `clients`, `not_as_stated`, and
the `match` rule its `launches` share; framework/runs/aic_rows.py to_row uses them).

A row's client sets its workload in decodelab validate (validation_predict.row_workload): the
length draw (`range_ratio`: uniform integers in [int(L x ratio), L], 1 = fixed lengths), measured
and warm-up requests per client, and `ttft_ok` (False: the row's TTFT holds more than the serving,
`ttft_note` says what; validate prints TTFT over the ttft_ok rows and over all)."""

from __future__ import annotations

import functools
import re

from decodelab.paths import VALIDATION_DIR

MEASURED = re.compile(r"measured=(\d{4}-\d\d-\d\d)")
# The columns client_of gives every row; a row no client describes (a disaggregated one, whose
# sources' clients are not read) keeps validate's client (validation_predict.row_workload)
NO_CLIENT = {
    "client": "",
    "range_ratio": float("nan"),
    "requests_per_client": float("nan"),
    "warmup_per_client": float("nan"),
    "ttft_ok": True,
    "ttft_note": "",
}


@functools.lru_cache(maxsize=None)
def _mapping() -> dict:
    import yaml

    return yaml.safe_load((VALIDATION_DIR / "aic_mapping.yaml").read_text()) or {}


def cell(row, col: str) -> str:
    v = row.get(col, "")
    return "" if v is None else str(v).strip()


def _one_of(match: dict, key: str, value) -> bool:
    """Whether `value` is the match's `key` (a value or a list of them; absent: any)."""
    want = match.get(key)
    return want is None or str(value) in [str(v) for v in (want if isinstance(want, list) else [want])]


def fits(match: dict, row, gpus=None, concurrency=None) -> bool:
    """Whether an aic_mapping.yaml `match` fits an aggregated row: backend, versions, model (a
    substring), system, precision, measured (date prefixes), and where given the replica's GPUs
    (tp x attention DP) and clients (concurrency)."""
    m = MEASURED.search(cell(row, "silicon_data_source"))
    return (
        cell(row, "mode").lower() in ("", "agg")  # the entries describe single-node aggregated runs
        and _one_of(match, "backend", cell(row, "backend"))
        and _one_of(match, "versions", cell(row, "backend_version"))
        and str(match.get("model", "")).lower() in cell(row, "model_path").lower()
        and _one_of(match, "system", cell(row, "system"))
        and _one_of(match, "precision", cell(row, "precision").lower())
        and ("gpus" not in match or _one_of(match, "gpus", gpus))
        and ("concurrency" not in match or _one_of(match, "concurrency", concurrency))
        and any((m.group(1) if m else "").startswith(str(d)) for d in match.get("measured", [""]))
    )


def not_as_stated(row, gpus, concurrency) -> str:
    """'' or why a row measured another setting than it states (aic_mapping.yaml `not_as_stated`)."""
    for e in _mapping().get("not_as_stated") or []:
        if fits(e["match"], row, gpus, concurrency):
            return str(e["why"])
    return ""


def client_of(row) -> dict:
    """The row's client (NO_CLIENT's columns): the first `clients` entry whose markers are in its
    silicon_data_source (an entry without markers: any), for aggregated rows; its warm-up the first
    `warmups` entry whose `before` date is after the row's measured= date (or has no `before`)."""
    if cell(row, "mode").lower() not in ("", "agg"):
        return dict(NO_CLIENT)
    source = cell(row, "silicon_data_source")
    for c in _mapping().get("clients") or []:
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
            "ttft_ok": bool(w.get("ttft_ok", True)),
            "ttft_note": str(w.get("why", "")),
        }
    return dict(NO_CLIENT)

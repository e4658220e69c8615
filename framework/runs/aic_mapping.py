"""framework/data/validation/aic_mapping.yaml, read once, and what the readers of AIConfigurator's
rows share about it (aic_rows, aic_parallel, aic_recipes, aic_clients): a row's text cell, the
clients its source records and the `match` rule of its `launches`, `not_as_stated` and
`expert_parallel_launched` entries."""

from __future__ import annotations

import functools
import re
from typing import Optional

from decodelab.paths import VALIDATION_DIR

MEASURED = re.compile(r"measured=(\d{4}-\d\d-\d\d)")
CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")


@functools.lru_cache(maxsize=None)
def mapping() -> dict:
    """The whole aic_mapping.yaml (each rule with its sources in comments there)."""
    import yaml

    return yaml.safe_load((VALIDATION_DIR / "aic_mapping.yaml").read_text()) or {}


def cell(row, col: str) -> str:
    """A row's cell as stripped text ('' when absent or empty)."""
    v = row.get(col, "")
    return "" if v is None else str(v).strip()


def stated_clients(row) -> Optional[int]:
    """The clients (silicon_concurrency) a row's silicon_data_source records, or None."""
    m = CONCURRENCY.search(cell(row, "silicon_data_source"))
    return int(m.group(1)) if m else None


def _one_of(match: dict, key: str, value) -> bool:
    """Whether `value` is the match's `key` (a value or a list of them; absent: any)."""
    want = match.get(key)
    return want is None or str(value) in [str(v) for v in (want if isinstance(want, list) else [want])]


def swept(sweep, row, gpus, concurrency) -> bool:
    """Whether a `match`'s `sweep` (absent: any row) holds the row's setting: an item with its isl,
    osl and replica GPUs whose `clients` [first, last] range holds its clients."""
    if sweep is None:
        return True
    if concurrency is None or concurrency != concurrency:  # no clients (None, NaN): in no sweep
        return False

    def holds(s) -> bool:
        first, last = s["clients"]
        return (
            cell(row, "isl") == str(s["isl"])
            and cell(row, "osl") == str(s["osl"])
            and str(gpus) == str(s["gpus"])
            and int(first) <= int(concurrency) <= int(last)
        )

    return any(holds(s) for s in sweep)


def fits(match: dict, row, gpus=None, concurrency=None) -> bool:
    """Whether an aic_mapping.yaml `match` fits an aggregated row: backend, versions, model (a
    substring; none of model_not's), system, precision, measured (date prefixes), and where given the replica's GPUs
    (tp x attention DP), clients (concurrency), the settings a launch swept (`sweep`, swept) and no
    `source_not` text in its silicon_data_source."""
    m = MEASURED.search(cell(row, "silicon_data_source"))
    return (
        cell(row, "mode").lower() in ("", "agg")  # the entries describe single-node aggregated runs
        and _one_of(match, "backend", cell(row, "backend"))
        and _one_of(match, "versions", cell(row, "backend_version"))
        and str(match.get("model", "")).lower() in cell(row, "model_path").lower()
        and not any(str(x).lower() in cell(row, "model_path").lower() for x in match.get("model_not", []))
        and _one_of(match, "system", cell(row, "system"))
        and _one_of(match, "precision", cell(row, "precision").lower())
        and ("gpus" not in match or _one_of(match, "gpus", gpus))
        and ("concurrency" not in match or _one_of(match, "concurrency", concurrency))
        and any((m.group(1) if m else "").startswith(str(d)) for d in match.get("measured", [""]))
        and not any(str(x) in cell(row, "silicon_data_source") for x in match.get("source_not", []))
        and swept(match.get("sweep"), row, gpus, concurrency)
    )

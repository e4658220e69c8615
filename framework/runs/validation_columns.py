"""The optional columns of a measured serving CSV that say how a row was measured (docs/validation.md
"The CSV"), checked where validate reads them, so that a bad cell is one error naming its data row
rather than a silent default:

- `kv_dtype`: the KV cache dtype the engine ran (a workload dtype);
- the benchmark client (validation_predict.row_workload): `range_ratio` (lengths uniform in
  [int(L x ratio), L]; 1 = fixed), `requests_per_client`, `warmup_per_client`,
  `prompt_bytes_per_token`;
- `launch` (plain CSVs): `auto` or empty, `aic`, `defaults`, or the name of an
  aic_mapping.yaml `launches` entry, whose engine file, engine overrides, max_num_tokens rule and
  per-row values the row then runs with (`named_launches`; AIConfigurator's schema fills those
  columns itself, runs/aic_launches.py).

An empty cell keeps the column's default."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, Tuple

from decodelab.core.checks import DTYPE_BYTES
from decodelab.runs import aic_launches
from decodelab.runs.aic_mapping import mapping

# column -> (what a cell must be, the test of its number)
CLIENT_COLUMNS: Dict[str, Tuple[str, Callable[[float], bool]]] = {
    "range_ratio": ("a number in (0, 1]", lambda v: 0 < v <= 1),
    "requests_per_client": ("a positive integer", lambda v: v > 0 and v == round(v)),
    "warmup_per_client": ("an integer >= 0", lambda v: v >= 0 and v == round(v)),
    "prompt_bytes_per_token": ("a number > 0", lambda v: v > 0),
}
LAUNCHES = ("auto", "aic", "defaults")  # validate --launch's values, also a cell's


def _cells(df, col: str):
    """(position, data row, cell text) of the column's non-empty cells."""
    for at, (i, v) in enumerate(zip(df.index, df[col])):
        if v is None or (isinstance(v, float) and v != v):
            continue
        text = f"{v:g}" if isinstance(v, (int, float)) else str(v).strip()  # as written: -3, not -3.0
        if text:
            yield at, i + 1, text


def check_optional(df, csv: Path) -> None:
    """One ValueError naming the first bad cell of the optional columns `kv_dtype` and
    CLIENT_COLUMNS (module docstring)."""
    for col, (what, ok) in CLIENT_COLUMNS.items():
        if col not in df.columns:
            continue
        for _, n, text in _cells(df, col):
            try:
                good, shown = ok(float(text)), text
            except ValueError:
                good, shown = False, repr(text)
            if not good:
                raise ValueError(f"{csv.name} data row {n}: {col}={shown} must be {what}")
    if "kv_dtype" in df.columns:
        for _, n, text in _cells(df, "kv_dtype"):
            if text not in DTYPE_BYTES:
                raise ValueError(
                    f"{csv.name} data row {n}: kv_dtype={text!r} is not one of: {', '.join(DTYPE_BYTES)}"
                )


def named_launches(df, csv: Path):
    """A plain CSV with its `launch` column resolved (module docstring): each row's launch columns
    (aic_launches.NO_LAUNCH's) from the entry it names; `auto` reads as empty. A name that is no
    mode and no entry is a ValueError naming the row and the allowed values."""
    if "launch" not in df.columns:
        return df
    entries = {str(e["name"]): e for e in mapping().get("launches") or []}
    rows = [dict(aic_launches.NO_LAUNCH) for _ in range(len(df))]
    for at, n, text in _cells(df, "launch"):
        if text in entries:
            rows[at] = aic_launches.described(entries[text])
        elif text in LAUNCHES:
            rows[at]["launch"] = "" if text == "auto" else text
        else:
            raise ValueError(
                f"{csv.name} data row {n}: launch={text!r} is not one of: {', '.join(LAUNCHES)}, "
                f"or a `launches` entry of aic_mapping.yaml ({', '.join(entries)})"
            )
    return df.assign(**{k: [r[k] for r in rows] for k in aic_launches.NO_LAUNCH})

"""A `decodelab validate --out` rows file (DIR/<csv>_rows.csv) for the tools that tabulate one
(ttft_floor.py, ttft_gap.py): reading it with one error line, keeping the rows whose TTFT is a
serving measurement, printing a table of it."""

from __future__ import annotations

from typing import Iterable, Optional, Tuple

import numpy as np
import pandas as pd

from decodelab.output.report import md_table


def read_rows(path: str, needed: Iterable[str], hint: str = "") -> Tuple[Optional[pd.DataFrame], str]:
    """(the rows, "") or (None, the error line): a file that does not read, or lacks a needed column
    (`hint` says which option names columns, if one does)."""
    try:
        rows = pd.read_csv(path)
    except (OSError, ValueError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return None, f"rows: cannot read {path} ({why}); give the rows file `decodelab validate --out` writes"
    missing = set(needed) - set(rows.columns)
    if missing:
        return (
            None,
            f"rows: {path} has no column {', '.join(sorted(missing))}: not a validate rows file{hint}",
        )
    return rows, ""


def serving_ttft(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows whose TTFT is a serving measurement (`ttft_ok`), every row where the file has no
    such column."""
    return rows[rows["ttft_ok"].astype(str) == "True"] if "ttft_ok" in rows else rows


def print_table(table: pd.DataFrame, digits: int = 0) -> None:
    """The table as Markdown, numbers right-aligned: a count as it is, others to `digits` decimals
    (none: whole units), a missing number blank."""

    def cell(v) -> str:
        if isinstance(v, str) or isinstance(v, (int, np.integer)):
            return str(v)
        return "" if pd.isna(v) else f"{v:.{digits}f}"

    cells = [[cell(v) for v in row] for row in table.itertuples(index=False)]
    print(
        md_table(list(table.columns), cells, [pd.api.types.is_numeric_dtype(table[c]) for c in table.columns])
    )

"""Reading measured operator tables (CSV or Parquet, the operator-CSV schema of decodelab
fit-hardware) and the kernel's form of a measured latency curve over tokens, shared by the families'
table readers; every reader caches per path and per file content (opcost/tablecache.py)."""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from decodelab.paths import resolve_user_path
from decodelab.kernel_layout import M_GRID, Law, Lin
from decodelab.opcost.base import Price, Step


class TableError(ValueError):
    """A table that cannot be used (one line: the file and the problem)."""


def read(path: str, columns, kind: str, dtype_col: str, dtypes: dict, need: str):
    """The rows of a table at `path` whose `dtype_col` is one of `dtypes`, latency_ms numeric;
    TableError (one line) for a missing or unreadable file, missing columns or no usable rows."""
    import pandas as pd  # heavy: on use

    p = resolve_user_path(path)
    if not p.is_file():
        raise TableError(f"{path}: no such file")
    try:
        df = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    except Exception as e:  # unreadable
        raise TableError(f"{path}: cannot read ({type(e).__name__}: {e})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise TableError(f"{path}: not {kind} table (misses column(s) {', '.join(missing)})")
    df = df[df[dtype_col].map(dtypes).notna()]
    lat = pd.to_numeric(df.latency_ms, errors="coerce")
    if df.empty or not (lat > 0).all():
        raise TableError(f"{path}: needs {need} with latency_ms > 0")
    return df.assign(latency_ms=lat)


def problem(reader: Callable, path: str) -> Optional[str]:
    """The problem `reader(path)` finds in the table at `path` (one line), or None."""
    try:
        reader(path)
    except TableError as e:
        return str(e)
    return None


def grid_row(m: np.ndarray, t: np.ndarray) -> np.ndarray:
    """A measured latency curve (tokens m ascending, seconds t) at the kernel's M_GRID token counts,
    made non-decreasing and read-only (a GEMM table's curve at a shape; an MoE table's block)."""
    from scipy.optimize import isotonic_regression  # heavy: on use

    grid = np.asarray(M_GRID)  # inside the fit rows' m range [1, 16384]
    # Measured curves are not monotone in m: kernel selection gives neighbouring m 3-6% apart and
    # block-scaled FP8 a sawtooth of tile boundaries (H100, n = k = 5120: 15.5 us at m = 64, 24.6
    # at 65, 17.4 at 128, 31.4 at 129). The least-squares non-decreasing fit of log latency
    # (isotonic regression) pools each such stretch at its geometric mean: a step of more tokens
    # never costs less, and a stretch of m costs its average, neither its best nor its worst call.
    smooth = np.exp(isotonic_regression(np.log(t)).x)
    at = np.interp(grid, m, smooth)
    # beyond the largest measured m (a table measured up to 8192 tokens), linear in m along the
    # last segment, as table_time does beyond the grid: a compute-bound GEMM's time grows with m
    big = grid > m[-1]
    if big.any() and len(m) > 1:
        slope = max((smooth[-1] - smooth[-2]) / (m[-1] - m[-2]), 0.0)
        at[big] = smooth[-1] + slope * (grid[big] - m[-1])
    at.setflags(write=False)
    return at


def table_time(t0: float, beyond: np.ndarray, m):
    """Seconds of a tabulated op at m tokens, in natural form (the reference's twin of the kernel's
    interpolation, kernel_lookup._table: linear between the M_GRID points, along the end segments
    beyond them); `beyond`: its times beyond t0 at M_GRID."""
    grid = np.asarray(M_GRID)
    m = np.asarray(m, float)
    j = np.clip(np.searchsorted(grid, m, side="left") - 1, 0, len(grid) - 2)
    a, b = beyond[j], beyond[j + 1]
    return t0 + a + (m - grid[j]) * (b - a) / (grid[j + 1] - grid[j])


def curve_price(family: str, at: np.ndarray) -> Price:
    """The price of an op costed alone by a measured curve `at` (M_GRID seconds) at its path's tokens: t0 its
    fastest call, the rest beyond it (a kernel table of one op: opcost.linear_attn, opcost.mhc)."""
    t0 = float(at.min())
    return Price(
        family, Law.GEMM, {Lin.T0: t0, Lin.G_P: 1.0}, at - t0, Lin.G_TAB, whole=True, law=(t0, at - t0)
    )


def first_curve(paths, curves: Callable, key):
    """The curve of `key` in the first of `paths` (an engine's own table, then the chip's) whose
    `curves(path)` holds it; None where none does."""
    for path in paths:
        got = curves(path).get(key)
        if got is not None:
            return got
    return None


def curve_reference(p: Price, step: Step):
    """(seconds beyond t0, t0, collective seconds) of a curve_price op at `step`, in natural form."""
    t0, beyond = p.law
    return float(table_time(t0, beyond, step.tokens)) - t0, t0, 0.0

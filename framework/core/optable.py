"""GEMM costs at a design's own shapes from a table of GEMM microbenchmarks
(`hardware.op_tables.gemm`, with hardware.op_model=fitted; docs/model.md "Per-shape operator laws").

One GEMM law per weight dtype (`op_fit.gemm`, fitted over all shapes of a chip) is a compromise
across shapes, and its form misses the block-scaled FP8 kernels' curve (flat up to m ~ 256, then
rising): on the H100 table that class is 15.7% off on average and 15-50% slow at m = 64-256, the
token counts of a serving decode step. With a table, a GEMM op whose (dtype, n, k) lies inside
the table's (n, k) grid is costed by the table itself:
  1. the measured latency curve over m at the op's (n, k): the table's curves at the nearest grid
     values of n and k around it (exact where the grid has them), interpolated bilinearly in
     (log n, log k) on log latency, 1 <= m <= 16384 (the fit rows of decodelab fit-hardware);
  2. that curve made non-decreasing in m (isotonic regression of log latency: a stretch where
     the measured kernels dip costs its geometric mean), at the kernel's token grid
     (kernel_layout.M_GRID), linear in m between grid points and along the end segments beyond
     them (a prefill chunk above 16384 tokens).
An op outside the grid, a dtype the table lacks, or a corner the table does not hold keeps the
class law. On a chip whose HBM bandwidth or peaks differ from those the table was measured with
(hardware.op_tables' own fields; a user chip that inherits a chip file and changes them), each
time is scaled by the class law's time on this chip over its time on the measured one: the table
keeps its shape-by-shape correction of the law, and the law carries the chip's rates. The kernel
and the Python reference (table_time, the same interpolation) take the same values
(core/oplaw.py laws_of / law_columns). Tables are in the operator-CSV schema of
decodelab fit-hardware (gemm_dtype, m, n, k, latency_ms; CSV or Parquet).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from decodelab.core import kernel_layout as K
from decodelab.paths import resolve_user_path
from decodelab.core.tablecache import table_cache

COLUMNS = ("gemm_dtype", "m", "n", "k", "latency_ms")
DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block"}
M_MIN, M_MAX = 1, 16384  # the fit rows of decodelab fit-hardware (m > 16k runs 5-10% slower)
MIN_POINTS = 8  # fewer m points at a shape: the class law


class TableError(ValueError):
    """A GEMM table that cannot be used (one line: the file and the problem)."""


def _read(path: str, columns, kind: str, dtype_col: str, dtypes: dict, need: str):
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


@table_cache(maxsize=8)
def curves(path: str) -> Dict[str, Tuple[np.ndarray, np.ndarray, np.ndarray, Dict]]:
    """cube(...) of the table at `path` (cached per path)."""
    return cube(_read(path, COLUMNS, "a GEMM", "gemm_dtype", DTYPES, f"rows of {', '.join(DTYPES)}"))


def cube(df) -> Dict[str, Tuple[np.ndarray, np.ndarray, np.ndarray, Dict]]:
    """dtype -> (n grid, k grid, m grid, {(n, k): log latency in s over the m grid, NaN where
    not measured}) of a GEMM table's rows with 1 <= m <= 16384."""
    df = df[(df.m >= M_MIN) & (df.m <= M_MAX)]
    out = {}
    for dt, d in df.groupby(df.gemm_dtype.map(DTYPES)):
        piv = d.pivot_table(index=["n", "k"], columns="m", values="latency_ms", aggfunc="mean")
        ms = piv.columns.to_numpy(float)
        logt = np.log(piv.to_numpy(float) * 1e-3)
        table = {(float(n), float(k)): logt[i] for i, (n, k) in enumerate(piv.index)}
        ns = np.unique([nk[0] for nk in table])
        ks = np.unique([nk[1] for nk in table])
        out[dt] = (ns, ks, ms, table)
    return out


def leave_one_out(df, min_nk: float = 256.0) -> Dict[str, Dict[str, Tuple[int, float, float]]]:
    """How well the table stands for shapes it does not hold: each interior grid value of n (of
    k) predicted from its two grid neighbours by the log-bilinear interpolation, at every other
    grid value >= min_nk and every m. dtype -> {"n" | "k": (points, mean, median |error| in %)}."""
    out = {}
    for dt, (ns, ks, _, table) in cube(df).items():
        res = {}
        for axis, grid, other in (("n", ns, ks), ("k", ks, ns)):
            errs = []
            for i in range(1, len(grid) - 1):
                lo, x, hi = grid[i - 1], grid[i], grid[i + 1]
                if lo < min_nk:
                    continue
                w = _log_weight(lo, x, hi)
                for o in other[other >= min_nk]:
                    keys = [(v, o) if axis == "n" else (o, v) for v in (lo, x, hi)]
                    if not all(k in table for k in keys):
                        continue
                    a, mid, b = (table[k] for k in keys)
                    e = np.abs(np.exp((1.0 - w) * a + w * b - mid) - 1.0)
                    errs.append(e[np.isfinite(e)])
            e = np.concatenate(errs) if errs else np.zeros(0)
            res[axis] = (
                int(e.size),
                float(100 * e.mean()) if e.size else 0.0,
                float(100 * np.median(e)) if e.size else 0.0,
            )
        out[dt] = res
    return out


def bracket(grid: np.ndarray, x: float):
    """[(grid value, weight)] that interpolates x linearly in log x: one exact point or the two
    neighbours; None outside the grid."""
    if x < grid[0] or x > grid[-1]:
        return None
    i = int(np.searchsorted(grid, x))
    if grid[i] == x:
        return [(float(x), 1.0)]
    lo, hi = float(grid[i - 1]), float(grid[i])
    w = _log_weight(lo, x, hi)
    return [(lo, 1.0 - w), (hi, w)]


def _log_weight(lo: float, x: float, hi: float) -> float:
    """The weight of `hi` that interpolates x between lo and hi linearly in log x."""
    return float((np.log(x) - np.log(lo)) / (np.log(hi) - np.log(lo)))


def curve(path: str, dtype: str, n: float, k: float):
    """(m, seconds) of the table's GEMM latency at (n, k), interpolated; None where it has none."""
    by = curves(path).get(dtype)
    if by is None:
        return None
    ns, ks, ms, table = by
    bn, bk = bracket(ns, n), bracket(ks, k)
    if bn is None or bk is None:
        return None
    logt = np.zeros_like(ms)
    for nn, wn in bn:
        for kk, wk in bk:
            row = table.get((nn, kk))
            if row is None:
                return None
            logt = logt + wn * wk * row
    ok = np.isfinite(logt)
    if ok.sum() < MIN_POINTS:
        return None
    return ms[ok], np.exp(logt[ok])


@table_cache(maxsize=4096)
def measured_row(path: str, dtype: str, n: float, k: float):
    """The table's GEMM time in seconds at (n, k) at the kernel's M_GRID token counts (read-only),
    or None where the table has no curve (the class law applies)."""
    c = curve(path, dtype, float(n), float(k))
    return None if c is None else grid_row(*c)


def grid_row(m: np.ndarray, t: np.ndarray) -> np.ndarray:
    """A measured latency curve (tokens m ascending, seconds t) at the kernel's M_GRID token counts,
    made non-decreasing and read-only (measured_row; core/moetable.py's MoE blocks too)."""
    from scipy.optimize import isotonic_regression  # heavy: on use

    grid = np.asarray(K.M_GRID)  # inside the fit rows' m range [1, 16384]
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


def gemm_row(at: np.ndarray, t0_s: float, ratio=None):
    """The kernel's form of a measured row `at` (M_GRID times): (t0, times beyond t0), t0 = min(the
    class law's t0, the fastest call). `ratio` (per M_GRID point): the chip differs from the one
    the table was measured on; each time is scaled by the class law's time here over its time
    there, and kept non-decreasing in m."""
    if ratio is not None:
        at = np.maximum.accumulate(at * ratio)
    t0 = min(float(t0_s), float(at.min()))
    return t0, at - t0


def table_time(t0: float, beyond: np.ndarray, m):
    """Seconds of a tabulated GEMM at m tokens, in natural form (the reference's twin of the
    kernel's interpolation: linear between the M_GRID points, along the end segments beyond)."""
    grid = np.asarray(K.M_GRID)
    m = np.asarray(m, float)
    j = np.clip(np.searchsorted(grid, m, side="left") - 1, 0, len(grid) - 2)
    a, b = beyond[j], beyond[j + 1]
    return t0 + a + (m - grid[j]) * (b - a) / (grid[j + 1] - grid[j])


def check(path: str, kind: str = "gemm") -> Optional[str]:
    """The problem of the `kind` (gemm | all_reduce) table at `path` (one line), or None."""
    try:
        (curves if kind == "gemm" else collective_curves)(path)
    except TableError as e:
        return str(e)
    return None


AR_COLUMNS = ("allreduce_dtype", "num_gpus", "message_size", "latency_ms")
AR_BYTES = {"bfloat16": 2.0, "bf16": 2.0, "float16": 2.0, "half": 2.0}


@table_cache(maxsize=8)
def collective_curves(path: str) -> Dict[int, Tuple[np.ndarray, np.ndarray]]:
    """num_gpus -> (bytes of the whole per-rank tensor, seconds) of an all-reduce table in the
    operator-CSV schema (allreduce_dtype, num_gpus, message_size = elements, latency_ms; 16-bit
    rows), made non-decreasing in size by isotonic regression of log latency."""
    from scipy.optimize import isotonic_regression  # heavy: on use

    df = _read(path, AR_COLUMNS, "an all-reduce", "allreduce_dtype", AR_BYTES, "16-bit rows")
    df = df.assign(b=df.message_size * df.allreduce_dtype.map(AR_BYTES))
    out = {}
    for n, d in df.groupby("num_gpus"):
        d = d.groupby("b").latency_ms.mean().sort_index()
        t = np.exp(isotonic_regression(np.log(d.to_numpy(float) * 1e-3)).x)
        out[int(n)] = (d.index.to_numpy(float), t)
    return out


@table_cache(maxsize=4096)
def collective_row(path: str, n_gpus: int, bytes_per_token: float):
    """An all-reduce's seconds at the kernel's M_GRID token counts, the message being M_GRID x
    `bytes_per_token` bytes: log-log interpolation between the measured sizes, the smallest
    size's time below them and the largest size's time per byte above (read-only); None where the
    table has no row at this GPU count."""
    c = collective_curves(path).get(int(n_gpus))
    if c is None or bytes_per_token <= 0:
        return None
    b, t = c
    s = np.asarray(K.M_GRID) * bytes_per_token
    at = np.exp(np.interp(np.log(s), np.log(b), np.log(t)))
    big = s > b[-1]
    at[big] = t[-1] * s[big] / b[-1]
    at.setflags(write=False)
    return at

"""The GEMM family (hardware.op_model=fitted; docs/model.md "Per-shape operator laws"): a plain GEMM
op (components/ops.py gemm_n x gemm_k) is costed by its weight dtype's law (`op_fit.gemm`)

    t = (Tc^p + Tm^p)^(1/p) + t0,  Tc = 2 n (k + k0) m / (P e_c),  Tm = (n k wb + m (k ab + 2 n)) / (BW e_b)

(P: the dtype's dense peak, BW: the HBM peak, m: tokens through the GEMM), or at its own shape from
a table of GEMM microbenchmarks (`hardware.op_tables.gemm`, `gemm_by_engine.<family>`; block-scaled
FP8 under engine.gemm_backend_fp8_block=trtllm from the chip's table only: gemm_tables).

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
     (M_GRID), linear in m between grid points and along the end segments beyond
     them (a prefill chunk above 16384 tokens).
An op outside the grid, a dtype the table lacks, or a corner the table does not hold keeps the
class law. On a chip whose HBM bandwidth or peaks differ from those the table was measured with
(hardware.op_tables' own fields; a user chip that inherits a chip file and changes them), each
time is scaled by the class law's time on this chip over its time on the measured one: the table
keeps its shape-by-shape correction of the law, and the law carries the chip's rates. The kernel
and the Python reference (table_time, the same interpolation) take the same values
(price, reference). Tables are in the operator-CSV schema of
decodelab fit-hardware (gemm_dtype, m, n, k, latency_ms; CSV or Parquet).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import numpy as np

from decodelab.opcost import tables
from decodelab.opcost.base import Ctx, Price, Step, check_tables, gemm_dtype, hbm_bw, op_table, peak, pnorm
from decodelab.opcost.base import engine_tables, table_mismatch, table_paths
from decodelab.opcost.tablecache import table_cache
from decodelab.kernel_layout import Law, Lin, M_GRID

NAME = "gemm"
FIT_GROUPS = ("gemm",)  # the hardware.op_fit groups of this family's laws
# Bytes per element the GEMM law streams, by weight dtype: (weight wb, activation ab per (m, k)
# element). FP8 GEMMs quantize their BF16 input first: read 2 + write 1 + GEMM read 1 = 4.
GEMM_BYTES = {"bf16": (2.0, 2.0), "fp8": (1.0, 4.0), "fp8_block": (1.0, 4.0)}  # fp8_block: 1x128 groups
COLUMNS = ("gemm_dtype", "m", "n", "k", "latency_ms")
# table gemm_dtype -> decodelab weight dtype; nvfp4 (TensorRT-LLM's FP4 Linear, activation quantization
# included) has no law (GEMM_BYTES): a chip's table costs it at the shapes it holds (table_only)
DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
M_MIN, M_MAX = 1, 16384  # the fit rows of decodelab fit-hardware (m > 16k runs 5-10% slower)
MIN_POINTS = 8  # fewer m points at a shape: the class law


def gemm_time(law, m, n, k, peak: float, bw: float, wb: float, ab: float):
    """Seconds of one GEMM of m tokens through an n x k weight (the law in its natural form)."""
    m, n, k = (np.asarray(x, float) for x in (m, n, k))
    tc = 2.0 * n * (k + law.k0) * m / (peak * law.e_c)
    tm = (n * k * wb + m * (k * ab + 2.0 * n)) / (bw * law.e_b)
    return pnorm(tc, tm, law.p) + law.t0_us * 1e-6


@table_cache(maxsize=8)
def curves(path: str) -> Dict[str, Tuple[np.ndarray, np.ndarray, np.ndarray, Dict]]:
    """cube(...) of the table at `path` (cached per path)."""
    return cube(tables.read(path, COLUMNS, "a GEMM", "gemm_dtype", DTYPES, f"rows of {', '.join(DTYPES)}"))


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
    return None if c is None else tables.grid_row(*c)


def gemm_row(at: np.ndarray, t0_s: float, ratio=None):
    """The kernel's form of a measured row `at` (M_GRID times): (t0, times beyond t0), t0 = min(the
    class law's t0, the fastest call). `ratio` (per M_GRID point): the chip differs from the one
    the table was measured on; each time is scaled by the class law's time here over its time
    there, and kept non-decreasing in m."""
    if ratio is not None:
        at = np.maximum.accumulate(at * ratio)
    t0 = min(float(t0_s), float(at.min()))
    return t0, at - t0


def matches(op) -> bool:
    return op.gemm_n > 0


def law_of(op, ctx: Ctx):
    """(law, dtype) of a GEMM op: its weight dtype's op_fit.gemm law (a chip fitted without
    block-scaled GEMMs: the per-tensor FP8 law for fp8_block), law None where the chip has none."""
    fit, dtype = ctx.hw.op_fit, gemm_dtype(op, ctx.weight_dtype)
    if not matches(op):
        return None, dtype
    if dtype in fit.gemm:
        return fit.gemm[dtype], dtype
    if dtype == "fp8_block" and "fp8" in fit.gemm:
        return fit.gemm["fp8"], dtype
    return None, dtype


def gemm_tables(ctx: Ctx, dtype: str) -> List[str]:
    """The GEMM tables of an op of weight `dtype`, first that holds it: the engine's own, then the chip's
    (base.table_paths); block-scaled FP8 under engine.gemm_backend_fp8_block=trtllm the chip's only."""
    if dtype == "fp8_block" and ctx.gemm_fp8_block == "trtllm":
        return [p for p in (op_table(ctx.hw, "gemm"),) if p]
    return table_paths(ctx, "gemm")


def table_row(op, ctx: Ctx, dtype: str, law):
    """(t0, times beyond t0 at kernel M_GRID) of the op's GEMM from the engine's own table (of its
    release: base.op_table) where it holds the dtype and shape, else from
    hardware.op_tables.gemm (gemm_tables), scaled to this chip where it differs from the measured
    one, or None."""
    hw = ctx.hw
    paths = gemm_tables(ctx, dtype)  # scaled below where the chip differs
    n, k = float(op.gemm_n), float(op.gemm_k)
    at = None
    for path in paths:
        at = measured_row(path, dtype, n, k)
        if at is not None:  # the engine's own table where it has the dtype and shape
            break
    if at is None:
        return None
    ratio = None
    if table_mismatch(hw):
        t = hw.op_tables
        there = SimpleNamespace(
            peak_tflops_bf16=float(t.peak_tflops_bf16 or hw.peak_tflops_bf16),
            peak_tflops_fp8=float(t.peak_tflops_fp8 or hw.peak_tflops_fp8),
        )
        bw_there = float(t.hbm_gb_s or hw.memory["hbm"].bandwidth_gb_s) * 1e9
        wb, ab = GEMM_BYTES[dtype]
        m = np.asarray(M_GRID)
        here = gemm_time(law, m, n, k, peak(hw, dtype), hbm_bw(hw), wb, ab)
        ratio = here / gemm_time(law, m, n, k, peak(there, dtype), bw_there, wb, ab)
    return gemm_row(at, law.t0_us * 1e-6, ratio)


def table_only(op, ctx: Ctx, dtype: str) -> Optional[Price]:
    """The price of a GEMM whose dtype has no law (NVFP4): the measured table's row at the op's own
    shape, the engine's table first, t0 0 (the whole time is the table's); None where no table holds
    the dtype and shape, or the table was measured on another chip (no law to carry it here)."""
    if not matches(op):
        return None
    for path in engine_tables(ctx, "gemm"):  # none on another chip
        at = measured_row(path, dtype, float(op.gemm_n), float(op.gemm_k))
        if at is not None:
            row = (0.0, at)
            return Price(NAME, Law.GEMM, {Lin.T0: 0.0, Lin.G_P: 1.0}, at, Lin.G_TAB, law=(None, dtype, row))
    return None


def price(op, ctx: Ctx) -> Optional[Price]:
    """The law's constants (A_c s per token, C_m s, A_m s per token), or the measured table's row."""
    g, dtype = law_of(op, ctx)
    if g is None:
        return table_only(op, ctx, dtype)
    (wb, ab), bw = GEMM_BYTES[dtype], hbm_bw(ctx.hw)
    n, k, pk = op.gemm_n, op.gemm_k, peak(ctx.hw, dtype)
    cols = {
        Lin.T0: g.t0_us * 1e-6,
        Lin.G_AC: 2.0 * n * (k + g.k0) / (pk * g.e_c),  # s per token
        Lin.G_CM: n * k * wb / (bw * g.e_b),  # s
        Lin.G_AM: (k * ab + 2.0 * n) / (bw * g.e_b),  # s per token
        Lin.G_P: g.p,
    }
    row = table_row(op, ctx, dtype, g)  # the measured table at the op's own shape, where it has one
    if row is not None:
        cols[Lin.T0] = row[0]
    tab = None if row is None else row[1]
    return Price(NAME, Law.GEMM, cols, tab, Lin.G_TAB, law=(g, dtype, row))


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    """(seconds beyond t0, t0, collective seconds) of the op at `step` in natural form."""
    g, dtype, row = p.law
    if row is not None:
        t0, beyond = row
        return float(tables.table_time(t0, beyond, step.tokens)) - t0, t0, 0.0
    wb, ab = GEMM_BYTES[dtype]
    t = gemm_time(g, step.tokens, op.gemm_n, op.gemm_k, peak(ctx.hw, dtype), hbm_bw(ctx.hw), wb, ab)
    return float(t) - g.t0_us * 1e-6, g.t0_us * 1e-6, 0.0


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    """Why a GEMM op (not an MoE block: opcost.moe) has the roofline law, where no family costs it."""
    if op.kind != "gemm" or getattr(op, "moe_block", ()) or any(f != "collectives" for f in priced):
        return None
    return f"no gemm.{gemm_dtype(op, ctx.weight_dtype)} law" if op.gemm_n > 0 else "not a plain GEMM"


def problem(path: str) -> Optional[str]:
    """The problem of the GEMM table at `path` (one line), or None."""
    return tables.problem(curves, path)


def check(hw) -> List[str]:
    """Keys of op_fit.gemm and the chip's (and engines') GEMM tables."""
    e = [
        f"hardware.op_fit.gemm.{key}: the key must be one of: {', '.join(GEMM_BYTES)}"
        for key in hw.op_fit.gemm
        if key not in GEMM_BYTES
    ]
    return e + check_tables(hw, "gemm", problem)


def note(ctx: Ctx, op=None, p: Optional[Price] = None) -> Optional[str]:
    """The design's notes of a GEMM table measured on another chip (its times scaled by the laws'
    ratio) and of block-scaled FP8 GEMMs read from the chip's table (kernel_note); nothing per op."""
    if op is not None:
        return None
    notes = [n for n in (mismatch_note(ctx), kernel_note(ctx)) if n]
    return "; ".join(notes) or None


def kernel_note(ctx: Ctx) -> Optional[str]:
    """engine.gemm_backend_fp8_block=trtllm on a design of block-scaled FP8 whose engine has a table."""
    own = op_table(ctx.hw, "gemm", ctx.engine, ctx.engine_version) if ctx.engine else ""
    if ctx.gemm_fp8_block != "trtllm" or ctx.weight_dtype != "fp8_block" or not own:
        return None
    return (
        f"engine.gemm_backend_fp8_block=trtllm: block-scaled FP8 GEMMs read hardware.op_tables.gemm "
        f"({op_table(ctx.hw, 'gemm')}), not {ctx.engine}'s table"
    )


def mismatch_note(ctx: Ctx) -> Optional[str]:
    """The note of a GEMM table measured on another chip."""
    hw = ctx.hw
    mismatch = table_mismatch(hw) if op_table(hw, "gemm") else []
    if not mismatch:
        return None
    return (
        "hardware.op_tables.gemm was measured on another chip ("
        + ", ".join(mismatch)
        + "): its GEMM times are scaled by the op_fit.gemm laws' ratio of this chip to that one"
        + (
            "; its decode attention tables are not used (op_fit.attention_decode)"
            if op_table(hw, "attention_decode")
            else ""
        )
    )

"""The decode attention family (hardware.op_model=fitted; docs/model.md, "Per-shape operator laws"):
the decoding sequences' part of a GQA/MHA attention call (components/ops.py attn_heads,
attn_kv_heads, attn_head_dim) is costed by the law of its class
(`op_fit.attention_decode.<kv dtype>_hd<head dim>`; the call is law-costed where the chip also has
the class's prefill law, opcost.attention_prefill)

    t = t0 + ((c_sk seqs kvh)^p + (B_kv / BW_kv)^p)^(1/p),  B_kv = KV bytes read,

or at its own shape from a table of attention microbenchmarks (`hardware.op_tables.attention_decode`,
`attention_decode_by_engine.<family>`); MLA's latent attention reads the same kind of table
(opcost.mla).

One decode-attention law per (KV dtype, head dim) (`op_fit.attention_decode`, fitted over every
head count, batch and context of a chip) is a compromise across shapes: against H100 TensorRT-LLM
1.3.0rc20's table at serving-step shapes (8-128 sequences of 1-4k tokens, Qwen3-32B's heads at
TP1-8) it is 8-19% fast (median) below 50 MB of KV per call, where the kernels' fixed cost and
latency-bound ramp dominate, and 7-23% slow above 300 MB, where it charges one fitted 2.4-2.8
TB/s and the measured kernels sustain 2.9-3.1 TB/s. With a
table, a decode attention op whose (query heads, KV heads, head dim, KV dtype) per chip the table
holds is costed from it:
  1. the measured latency over (sequences, KV tokens per sequence) at the op's heads, on the
     kernel's grid (B_GRID x C_GRID, powers of two; a cell the table lacks: below a
     row's first measured context that time, between two measured ones log-interpolated, beyond
     its last linear in the KV read), made non-decreasing in both axes; log-bilinear between grid points, linear in the KV read beyond
     the grid;
  2. never below the KV read at the chip's HBM peak: a row faster than that did not read its KV
     from HBM (TensorRT-LLM 1.2.0rc5's table, collected with a K-only cache pool, reached 4.9
     TB/s; the shipped tables never beat the peak, so this only guards a user's table).
An op whose heads no table holds, or a chip the tables were not measured on (op_tables' chip
fields), keeps the class law. The kernel (kernel_lookup._attn_table) and the Python reference
(table_time) take the same values. Tables are in the operator-CSV schema of decodelab
fit-hardware (batch_size, num_heads, num_key_value_heads, head_dim, window_size, kv_cache_dtype,
step, latency_ms; `step` tokens already cached, so a sequence reads step + 1; CSV or Parquet).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from decodelab.opcost import tables
from decodelab.opcost.base import ATTN_DTYPES, ATTN_KEY, Ctx, Price, Step, attention_fitted, attention_key
from decodelab.opcost.base import check_tables, engine_tables, gqa_attention, hbm_bw, pnorm
from decodelab.opcost.tablecache import table_cache
from decodelab.kernel_layout import B_GRID, C_GRID, Law, Lin

NAME = "attention_decode"
FIT_GROUPS = ("attention_decode",)

COLUMNS = (
    "batch_size",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "window_size",
    "kv_cache_dtype",
    "step",
    "latency_ms",
)
KV_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "bf16", "fp8": "fp8"}


@table_cache(maxsize=8)
def shapes(path: str) -> Dict[Tuple[str, int, int, int], Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(kv dtype, query heads, KV heads, head dim) -> (B_GRID index, C_GRID index, log seconds)
    of a decode attention table's full-attention rows at the kernel's grid points (mean of
    repeats; rows off the powers-of-two grid are not used)."""
    df = tables.read(path, COLUMNS, "a decode attention", "kv_cache_dtype", KV_DTYPES, "bf16 or fp8 KV rows")
    df = df[df.window_size == 0]
    if df.empty:
        raise tables.TableError(f"{path}: needs full-attention rows (window_size 0)")
    b = df.batch_size.to_numpy(float)
    c = df.step.to_numpy(float) + 1.0
    bi = np.log2(b) - np.log2(B_GRID[0])
    ci = np.log2(c) - np.log2(C_GRID[0])
    on = (bi == np.round(bi)) & (ci == np.round(ci)) & (bi >= 0) & (bi < len(B_GRID))
    on &= (ci >= 0) & (ci < len(C_GRID))
    d = df[on].assign(bi=bi[on].astype(int), ci=ci[on].astype(int), dt=df.kv_cache_dtype[on].map(KV_DTYPES))
    keys = ["dt", "num_heads", "num_key_value_heads", "head_dim"]
    g = d.groupby(keys + ["bi", "ci"], sort=True).latency_ms.mean().reset_index()
    out = {}
    for key, x in g.groupby(keys, sort=False):
        dt, h, kvh, hd = key
        logt = np.log(x.latency_ms.to_numpy(float) * 1e-3)
        out[(str(dt), int(h), int(kvh), int(hd))] = (x.bi.to_numpy(), x.ci.to_numpy(), logt)
    return out


GLITCH = 2.0  # a cell over this many times the time of each of its measured grid neighbours


def without_glitches(grid: np.ndarray) -> np.ndarray:
    """A measured grid (log s, NaN gaps) without its spikes: a cell more than GLITCH times the time
    of each of its measured neighbours (half and twice its sequences, half and twice its context),
    one of them with more work (twice the sequences or context), becomes a gap: doing more work in
    under half the time is not a kernel's behaviour but a timing glitch. TensorRT-LLM 1.3.0rc20's
    H200 MLA table has such a cell: 32 sequences of 4 tokens at 2.2 ms, where its neighbours take
    15 us; made non-decreasing it would cost every larger call 2.2 ms."""
    pad = np.full((grid.shape[0] + 2, grid.shape[1] + 2), np.nan)
    pad[1:-1, 1:-1] = grid
    larger = np.stack([pad[2:, 1:-1], pad[1:-1, 2:]])  # twice the sequences, twice the context
    near = np.concatenate([larger, [pad[:-2, 1:-1], pad[1:-1, :-2]]])
    top = np.max(np.where(np.isfinite(near), near, -np.inf), axis=0)
    g = grid.copy()
    g[np.isfinite(grid) & np.isfinite(larger).any(axis=0) & (grid > top + np.log(GLITCH))] = np.nan
    return g


def filled(grid: np.ndarray) -> Optional[np.ndarray]:
    """A measured B_GRID x C_GRID grid (log s, NaN gaps) completed and made non-decreasing:
    in each row, a gap before its first measured context takes that time, one between two
    measured contexts is interpolated in log-log, one beyond its last measured context grows
    linearly in the KV read from it; a row with no point is the row of half its sequences,
    doubled (linear in the sequences). None when fewer than half the cells were measured or the
    one-sequence row has no point."""
    g = grid.copy()
    if np.isfinite(g).sum() * 2 < g.size:
        return None
    lc = np.log(np.asarray(C_GRID))
    lb = np.log(np.asarray(B_GRID))
    for i in range(g.shape[0]):
        ok = np.flatnonzero(np.isfinite(g[i]))
        if ok.size == 0:
            continue
        first, last = ok[0], ok[-1]
        g[i, :first] = g[i, first]
        g[i, last + 1 :] = g[i, last] + lc[last + 1 :] - lc[last]
        inner = ~np.isfinite(g[i])
        if inner.any():
            g[i, inner] = np.interp(lc[inner], lc[ok], g[i, ok])
    for i in range(1, g.shape[0]):
        if not np.isfinite(g[i]).all():
            g[i] = g[i - 1] + lb[i] - lb[i - 1]
    if not np.isfinite(g).all():
        return None
    g = np.maximum.accumulate(np.maximum.accumulate(g, axis=0), axis=1)
    return g


@table_cache(maxsize=256)
def measured_grid(path: str, kv_dtype: str, heads: int, kv_heads: int, head_dim: int):
    """The table's decode attention log seconds at the kernel's grid for these heads per chip
    (flattened B_GRID-major, read-only), or None where it has no such shape."""
    at = shapes(path).get((kv_dtype, int(heads), int(kv_heads), int(head_dim)))
    if at is None:
        return None
    g = np.full((len(B_GRID), len(C_GRID)), np.nan)
    g[at[0], at[1]] = at[2]
    g = filled(without_glitches(g))
    if g is None:
        return None
    flat = g.ravel().copy()
    flat.setflags(write=False)
    return flat


def for_op(paths, kv_dtype: str, heads, kv_heads, head_dim):
    """The grid (measured_grid) of a decode attention op from the first of `paths` ("" skipped)
    whose table holds its (KV dtype, heads, KV heads, head dim) per chip, or None."""
    for path in dict.fromkeys(p for p in paths if p):
        grid = measured_grid(path, kv_dtype, int(heads), int(kv_heads), int(head_dim))
        if grid is not None:
            return grid
    return None


def table_time(logt: np.ndarray, floor_s_per_tok: float, seqs: float, kv_tokens: float) -> float:
    """Seconds of a tabulated decode attention call over `seqs` sequences reading `kv_tokens` KV
    tokens in all (the reference's twin of the kernel's _attn_table)."""
    nb, nc = len(B_GRID), len(C_GRID)
    s = max(float(seqs), 1.0)
    c = max(float(kv_tokens) / s, 1.0)
    sc = min(max(s, B_GRID[0]), B_GRID[-1])
    cc = min(max(c, C_GRID[0]), C_GRID[-1])
    x, y = np.log2(sc / B_GRID[0]), np.log2(cc / C_GRID[0])
    i, j = min(int(x), nb - 2), min(int(y), nc - 2)
    fx, fy = x - i, y - j
    v = (
        (1 - fx) * (1 - fy) * logt[i * nc + j]
        + (1 - fx) * fy * logt[i * nc + j + 1]
        + fx * (1 - fy) * logt[(i + 1) * nc + j]
        + fx * fy * logt[(i + 1) * nc + j + 1]
    )
    t = float(np.exp(v)) * max(1.0, (s * c) / (sc * cc))
    return max(t, floor_s_per_tok * float(kv_tokens))


def decode_attention_time(law, seqs, kv_tokens, kv_heads, head_dim, kv_bytes: float):
    """Seconds of one decode attention call: `seqs` sequences reading `kv_tokens` KV tokens in
    total, `kv_heads` KV heads of `head_dim` (per chip); the law in its natural form."""
    seqs, kv_tokens = np.asarray(seqs, float), np.asarray(kv_tokens, float)
    b_kv = kv_tokens * 2.0 * kv_heads * head_dim * kv_bytes
    x = law.c_sk_ns * 1e-9 * seqs * kv_heads
    return law.t0_us * 1e-6 + pnorm(x, b_kv / (law.bw_kv_tbs * 1e12), law.p)


def decode_table(op, ctx: Ctx, law_t0: float, kind: str = "attention_decode"):
    """(log seconds on the kernel's B_GRID x C_GRID, floor in s per KV token, t0) of the op's decode
    attention from the engine's own table (of its release: base.op_table) where it holds the shape,
    else from op_tables.<kind> (attention_decode: GQA/MHA; mla_decode: MLA's attention over the
    latent); t0 (the part reported as launch_sync) = min(the law's t0 `law_t0`, the fastest
    tabulated call). None: no table holds it, or the chip is not the one the tables were measured
    on. The floor: the op's KV bytes per KV token at the HBM peak."""
    if ctx.kv_dtype not in ATTN_DTYPES:
        return None
    floor = op.kv_read_per_ctx / hbm_bw(ctx.hw)
    grid = for_op(engine_tables(ctx, kind), ctx.kv_dtype, op.attn_heads, op.attn_kv_heads, op.attn_head_dim)
    return None if grid is None else (grid, floor, min(law_t0, float(np.exp(grid.min()))))


def table_price(name: str, cols: dict, table) -> Price:
    """A decode attention op's price from its measured table (decode_table) over the law columns
    `cols` (none for MLA's latent attention)."""
    grid, floor, t0 = table
    cols = {**cols, Lin.D_T0: t0, Lin.D_FLOOR: floor}
    return Price(name, Law.ATTN, cols, grid, Lin.D_TAB, law=(None, table))


def table_reference(p: Price, step: Step) -> Tuple[float, float, float]:
    """(seconds beyond t0, t0, 0) of a tabulated decode attention op's decoding sequences."""
    grid, floor, t0 = p.law[1]
    return float(table_time(grid, floor, step.dec_seqs, step.dec_kv)) - t0, t0, 0.0


matches = gqa_attention  # the same ops as the other attention family


def price(op, ctx: Ctx) -> Optional[Price]:
    if not attention_fitted(ctx, op):
        return None
    d, kvh, hd = ctx.hw.op_fit.attention_decode[attention_key(ctx, op)], op.attn_kv_heads, op.attn_head_dim
    cols = {
        Lin.D_T0: d.t0_us * 1e-6,
        Lin.D_SEQ: d.c_sk_ns * 1e-9 * kvh,
        Lin.D_CTX: 2.0 * kvh * hd * ATTN_DTYPES[ctx.kv_dtype] / (d.bw_kv_tbs * 1e12),
        Lin.D_P: d.p,
    }
    table = decode_table(op, ctx, d.t0_us * 1e-6)  # the measured table in place of the law
    if table is not None:
        return table_price(NAME, cols, table)
    return Price(NAME, Law.ATTN, cols, law=(d, None))


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    """The decoding sequences' part of the call (nothing where the op has none)."""
    if op.path == "prefill" or step.dec_tokens < 0.5:
        return 0.0, 0.0, 0.0
    d, table = p.law
    if table is not None:
        return table_reference(p, step)
    kvb = ATTN_DTYPES[ctx.kv_dtype]
    t = decode_attention_time(d, step.dec_seqs, step.dec_kv, op.attn_kv_heads, op.attn_head_dim, kvb)
    return float(t) - d.t0_us * 1e-6, d.t0_us * 1e-6, 0.0


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    """Why an attention op has the roofline law (for both attention families)."""
    if op.kind != "attention" or op.path == "decode" or NAME in priced or "attention_prefill" in priced:
        return None  # a GQA op has both laws or neither; MLA's prefill op the prefill law alone
    if op.attn_head_dim > 0:
        return f"no {ctx.kv_dtype}_hd{int(op.attn_head_dim)} laws"
    return f"no op_fit.mla_prefill.{ctx.kv_dtype} law" if op.attn_heads > 0 else "not GQA/MHA"


def check(hw) -> List[str]:
    """Keys of op_fit.attention_decode and the decode attention tables (GQA/MHA)."""
    e = [
        f"hardware.op_fit.attention_decode.{key}: the key must be <bf16|fp8>_hd<head_dim>"
        for key in hw.op_fit.attention_decode
        if not ATTN_KEY.match(key)
    ]
    return e + check_tables(hw, "attention_decode", problem)


def problem(path: str) -> Optional[str]:
    """The problem of the decode attention table at `path` (one line), or None."""
    return tables.problem(shapes, path)

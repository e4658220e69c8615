"""Per-shape operator cost laws (`hardware.op_model: fitted`, docs/model.md "Per-shape operator
laws"): which fitted law costs which op, and its reduction to a few per-op constants the kernel
evaluates with a few flops per step (the `L_*` law columns of `op_lin`, framework/core/kernel.py).
The laws in their natural form (used by the pure-Python reference and by the fit,
decodelab.calibration) are core/oplaw_eval.py, re-exported here; the engine's sampler law is
core/sampler.py.

Laws (P: the dtype's dense peak FLOP/s, BW: the HBM peak, both from the hardware YAML; m: tokens
through the GEMM):

  GEMM              t = (Tc^p + Tm^p)^(1/p) + t0,  Tc = 2 n (k + k0) m / (P e_c),
                    Tm = (n k wb + m (k ab + 2 n)) / (BW e_b)
  prefill attention t = t0 + h [pairs 4 hd / (P e_a) + tokens tau_tok + seqs tau_seq]
  decode attention  t = t0 + ((c_sk seqs kvh)^p + (B_kv / BW_kv)^p)^(1/p),  B_kv = KV bytes read
  collective        t = (S < S* ? a_lo : a_hi) + S / beta,  S = bytes of the whole per-rank tensor

Each t0 (and a_lo / a_hi) is a microbenchmark's in-graph figure: it contains the kernel boundary,
so a call costed by a law pays no `sync_us` (framework/core/build.py zeroes it); `launch_us`
(eager launches, no CUDA graph) stays. The attention microbenchmarks time TensorRT-LLM's attention
call with fused QKV input, so RoPE and the KV write are inside them: an op marked
`in_attention_call` (rope_kv_write) costs nothing when its layer's attention is law-costed.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import List

import numpy as np

from decodelab.core import kernel as K
from decodelab.core import attntable, moetable, optable
from decodelab.core.oplaw_eval import (  # noqa: F401  the laws in their natural form, re-exported
    collective_time,
    decode_attention_time,
    gemm_time,
    pnorm,
    prefill_attention_time,
)

OP_MODELS = ("roofline", "fitted")
# Bytes per element the GEMM law streams, by weight dtype: (weight wb, activation ab per (m, k)
# element). FP8 GEMMs quantize their BF16 input first: read 2 + write 1 + GEMM read 1 = 4.
GEMM_BYTES = {"bf16": (2.0, 2.0), "fp8": (1.0, 4.0), "fp8_block": (1.0, 4.0)}  # fp8_block: 1x128 groups
ATTN_DTYPES = {"bf16": 2.0, "fp8": 1.0}  # attention classes by KV dtype (its bytes per element)
_ATTN_KEY = re.compile(r"^(bf16|fp8)_hd(\d+)$")
_TP_KEY = re.compile(r"^tp(\d+)$")
_RANGES = {  # field: (low, high, low inclusive) of a physical value
    "e_c": (0.0, 1.0, False),
    "e_b": (0.0, 1.0, False),
    "e_a": (0.0, 1.0, False),
    "p": (1.0, 100.0, True),
}
COLLECTIVE_FIELDS = ("a_lo_us", "a_hi_us", "s_switch_bytes", "beta_gb_s")
_POSITIVE = ("bw_kv_tbs", "beta_gb_s")  # > 0; every other field >= 0


def _peak(hw, dtype: str) -> float:
    if dtype in ("fp8", "fp8_block", "mxfp4_w4a8") and hw.peak_tflops_fp8 > 0:
        return hw.peak_tflops_fp8 * 1e12
    return hw.peak_tflops_bf16 * 1e12


def hbm_bw(hw) -> float:
    return hw.memory["hbm"].bandwidth_gb_s * 1e9


def check(hw) -> List[str]:
    """Errors of `hardware.op_model` / `hardware.op_fit` (one line each)."""
    e = []
    if getattr(hw, "op_model", "roofline") not in OP_MODELS:
        return [f"hardware.op_model={hw.op_model!r} is not one of: {', '.join(OP_MODELS)}"]
    if hw.op_model != "fitted":
        return e
    if hw.execution == "dataflow":  # an unknown execution is reported by core.checks alone
        e.append(
            f"hardware.op_model=fitted needs hardware.execution=gpu (the laws time single GPU "
            f"kernels), got {hw.execution!r}"
        )
    fit = hw.op_fit
    for key in fit.gemm:
        if key not in GEMM_BYTES:
            e.append(f"hardware.op_fit.gemm.{key}: the key must be one of: {', '.join(GEMM_BYTES)}")
    for group in ("attention_prefill", "attention_decode"):
        for key in getattr(fit, group):
            if not _ATTN_KEY.match(key):
                e.append(f"hardware.op_fit.{group}.{key}: the key must be <bf16|fp8>_hd<head_dim>")
    for group in ("all_reduce", "all_gather"):
        for key in getattr(fit, group):
            if not _TP_KEY.match(key):
                e.append(f"hardware.op_fit.{group}.{key}: the key must be tp<number of GPUs>")
    for kind in ("gemm", "all_reduce"):  # the chip's table and each engine's own
        engines = getattr(getattr(hw, "op_tables", None), f"{kind}_by_engine", None) or {}
        for field, eng in [(kind, "")] + [(f"{kind}_by_engine.{x}", x) for x in engines]:
            path = op_table(hw, kind, eng)
            problem = optable.check(path, kind) if path else None
            if problem:
                e.append(f"hardware.op_tables.{field}: {problem}")
    engines = getattr(getattr(hw, "op_tables", None), "moe_by_engine", None) or {}
    for field, eng in [("moe", "")] + [(f"moe_by_engine.{x}", x) for x in engines]:
        problem = moetable.check(op_table(hw, "moe", eng)) if op_table(hw, "moe", eng) else None
        if problem:
            e.append(f"hardware.op_tables.{field}: {problem}")
    for kind in ("attention_decode", "mla_decode"):  # decode attention tables: GQA/MHA, MLA
        engines = getattr(getattr(hw, "op_tables", None), f"{kind}_by_engine", None) or {}
        for field, eng in [(kind, "")] + [(f"{kind}_by_engine.{x}", x) for x in engines]:
            path = op_table(hw, kind, eng)
            problem = attntable.check(path) if path else None
            if problem:
                e.append(f"hardware.op_tables.{field}: {problem}")
    laws = [
        (g, k, law)
        for g in ("gemm", "attention_prefill", "attention_decode", "all_reduce", "all_gather", "sampler")
        for k, law in getattr(fit, g).items()
    ]
    for eng, by_tp in fit.all_reduce_by_engine.items():  # untyped below the engine: checked here
        for key, law in by_tp.items():
            where = f"hardware.op_fit.all_reduce_by_engine.{eng}.{key}"
            if not _TP_KEY.match(key):
                e.append(f"{where}: the key must be tp<number of GPUs>")
            elif sorted(law) != sorted(COLLECTIVE_FIELDS):
                e.append(f"{where}: needs exactly the fields {', '.join(COLLECTIVE_FIELDS)}")
            else:
                laws.append((f"all_reduce_by_engine.{eng}", key, law))
    for group, key, law in laws:
        for name in law:
            if isinstance(law[name], str):  # a law's provenance note (SamplerLaw.caveat)
                continue
            v = float(law[name])
            lo, hi, inclusive = _RANGES.get(name, (0.0, np.inf, name not in _POSITIVE))
            ok = np.isfinite(v) and (lo <= v if inclusive else lo < v) and v <= hi
            if not ok:
                lo_s = "[" if inclusive else "("
                e.append(f"hardware.op_fit.{group}.{key}.{name}={v} must be in {lo_s}{lo}, {hi}]")
    return e


_TABLE_CHIP = (  # op_tables field: the chip's own value
    ("hbm_gb_s", lambda hw: hw.memory["hbm"].bandwidth_gb_s),
    ("peak_tflops_bf16", lambda hw: hw.peak_tflops_bf16),
    ("peak_tflops_fp8", lambda hw: hw.peak_tflops_fp8),
)


def moe_paths(hw, engine: str) -> list:
    """The MoE tables to look an engine's block up in: its own, then the chip's (none off-chip)."""
    return [] if table_mismatch(hw) else [op_table(hw, "moe", engine), op_table(hw, "moe")]


def op_table(hw, kind: str, engine: str = "") -> str:
    """hardware.op_tables.<kind> (gemm | all_reduce | attention_decode | mla_decode | moe), "" where
    the chip has none; with `engine`, that engine's own table (op_tables.<kind>_by_engine.<engine>),
    "" where it has none."""
    tables = getattr(hw, "op_tables", None)
    if engine:
        return str((getattr(tables, f"{kind}_by_engine", None) or {}).get(engine, "") or "")
    return str(getattr(tables, kind, "") or "")


def table_mismatch(hw) -> list:
    """The fields in which this chip differs from the one its op_tables were measured on."""
    t = getattr(hw, "op_tables", None)
    if t is None:
        return []
    out = []
    for name, own in _TABLE_CHIP:
        measured = float(getattr(t, name, 0.0) or 0.0)
        if measured > 0 and abs(float(own(hw)) - measured) > 1e-6 * measured:
            out.append(f"{name} {measured:g} (this chip {float(own(hw)):g})")
    return out


def _table_row(op, hw, dtype: str, law, engine: str = ""):
    """(t0, times beyond t0 at kernel M_GRID) of the op's GEMM from `engine`'s own table
    (hardware.op_tables.gemm_by_engine) where it holds the dtype and shape, else from
    hardware.op_tables.gemm, scaled to this chip where it differs from the measured one
    (core/optable.py), or None."""
    tables = [t for t in dict.fromkeys((op_table(hw, "gemm", engine), op_table(hw, "gemm"))) if t]
    if not tables:
        return None
    n, k = float(op.gemm_n), float(op.gemm_k)
    at = None
    for table in tables:
        at = optable.measured_row(table, dtype, n, k)
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
        m = np.asarray(K.M_GRID)
        here = gemm_time(law, m, n, k, _peak(hw, dtype), hbm_bw(hw), wb, ab)
        ratio = here / gemm_time(law, m, n, k, _peak(there, dtype), bw_there, wb, ab)
    return optable.gemm_row(at, law.t0_us * 1e-6, ratio)


def gemm_dtype(op, w) -> str:
    """The weight dtype of a GEMM op: its own (the LM head's 16-bit dtype under quantized weights,
    components/ops.py) or the workload's."""
    return getattr(op, "gemm_dtype", "") or w.weight_dtype


def moe_dtype(dtype: str, moe_mxfp4: str) -> str:
    """The MoE table dtype of an expert op's weights: MXFP4 experts run with MXFP8 activations
    (`w4a8`, table rows w4a8_mxfp4_mxfp8) or BF16 ones (`w4a16`) by engine.moe_mxfp4."""
    return "mxfp4_w4a8" if dtype == "mxfp4" and moe_mxfp4 == "w4a8" else dtype


def laws_of(op, hw, w, tp: int, engine: str = "", sampler=None, moe_mxfp4: str = "w4a16") -> SimpleNamespace:
    """The fitted laws that cost `op` (None where the roofline law applies): gemm, prefill and
    decode attention, collective; `skip`: the op is inside a law-costed attention call. `engine`
    (engine.family) picks that engine's own all-reduce law and tables where the chip has them.
    `gemm_table`: (t0, times beyond t0 at kernel M_GRID) from the op's GEMM table
    (op_tables.gemm_by_engine.<engine>, else op_tables.gemm) at the op's shape, which
    then costs the GEMM in place of `gemm` (core/optable.py). `sampler`: the design's sampler law
    (core/sampler.py law), which costs the sampling op where given. `moe_table`: an MoE block op's
    measured time, `moe_from`: None, or (table, measured key) where it was carried from a nearby
    block (core/moetable.py). `moe_mxfp4`: engine.moe_mxfp4."""
    out = SimpleNamespace(
        gemm=None,
        gemm_dtype="",
        gemm_table=None,
        prefill=None,
        decode=None,
        coll=None,
        coll_table=None,
        decode_table=None,
        sampler=None,
        moe_table=None,
        moe_from=None,
        skip=False,
    )
    if getattr(hw, "op_model", "roofline") != "fitted":
        return out
    if getattr(op, "moe_block", ()):  # the routed-expert block from a measured MoE table
        dt, mx = moe_dtype(gemm_dtype(op, w), moe_mxfp4), (hw.bw_eff_max, hw.compute_eff_max)
        got = moetable.lookup(op, moe_paths(hw, engine), dt, hbm_bw(hw), _peak(hw, dt), *mx)
        if got is not None:
            out.skip, out.moe_table, out.moe_from = got
            return out
    if getattr(op, "kind", "") == "sample":
        out.sampler = sampler
    fit = hw.op_fit
    dtype = out.gemm_dtype = gemm_dtype(op, w)
    if op.gemm_n > 0 and dtype in fit.gemm:
        out.gemm = fit.gemm[dtype]
    elif op.gemm_n > 0 and dtype == "fp8_block" and "fp8" in fit.gemm:
        out.gemm = fit.gemm["fp8"]  # a chip fitted without block-scaled GEMMs: the per-tensor FP8 law
    if out.gemm is not None:  # the measured table at the op's own shape, where it has one
        out.gemm_table = _table_row(op, hw, dtype, out.gemm, engine)
    key = f"{w.kv_dtype}_hd{int(op.attn_head_dim)}"
    attn_fitted = key in fit.attention_prefill and key in fit.attention_decode
    if op.in_attention_call:
        out.skip = attn_fitted
    elif op.attn_head_dim > 0 and op.path == "decode":  # MLA's latent attention: its table alone
        out.decode_table = _decode_table(op, hw, w, np.inf, engine, "mla_decode")
    elif op.attn_head_dim > 0 and attn_fitted:
        out.prefill, out.decode = fit.attention_prefill[key], fit.attention_decode[key]
        out.decode_table = _decode_table(op, hw, w, out.decode.t0_us * 1e-6, engine)
    group = {"all_reduce": fit.all_reduce, "all_gather": fit.all_gather}.get(op.coll_kind, {})
    own = fit.all_reduce_by_engine.get(engine, {}) if op.coll_kind == "all_reduce" else {}
    if f"tp{tp}" in own:
        group = own
    if f"tp{tp}" in group and op.coll_bytes_per_token > 0:
        out.coll = group[f"tp{tp}"]
    # the all-reduce from the measured table of the kernel its law describes, where the chip has
    # one: TensorRT-LLM's (op_tables.all_reduce) or the engine's own (all_reduce_by_engine); only
    # for an op that is the collective alone (its time then fills the table columns)
    ar_table = ""
    if op.coll_kind == "all_reduce" and out.coll is not None:
        ar_table = op_table(hw, "all_reduce", engine if group is own else "")
    if ar_table and out.gemm is None and out.prefill is None:
        out.coll_table = optable.collective_row(ar_table, tp, float(op.coll_bytes_per_token))
    return out


def _decode_table(op, hw, w, law_t0: float, engine: str = "", kind: str = "attention_decode"):
    """(log seconds on the kernel's B_GRID x C_GRID, floor in s per KV token, t0) of the op's decode
    attention (core/attntable.py) from `engine`'s own table (op_tables.<kind>_by_engine) where it
    holds the shape, else from op_tables.<kind> (attention_decode: GQA/MHA; mla_decode: MLA's
    attention over the latent); t0 (the part reported as launch_sync) = min(the law's t0 `law_t0`,
    the fastest tabulated call). None: no table holds it, or the chip is not the one the tables were
    measured on. The floor: the op's KV bytes per KV token at the HBM peak."""
    if w.kv_dtype not in ATTN_DTYPES or table_mismatch(hw):
        return None
    paths = (op_table(hw, kind, engine), op_table(hw, kind))
    floor = op.kv_read_per_ctx / hbm_bw(hw)
    grid = attntable.for_op(paths, w.kv_dtype, op.attn_heads, op.attn_kv_heads, op.attn_head_dim)
    return None if grid is None else (grid, floor, min(law_t0, float(np.exp(grid.min()))))


def fitted(laws) -> bool:
    return laws.skip or any(
        x is not None
        for x in (laws.gemm, laws.prefill, laws.decode_table, laws.coll, laws.sampler, laws.moe_table)
    )


# ---- the laws in natural form: core/oplaw_eval.py (re-exported above)


# ---- the kernel's per-op constants


def law_columns(op, hw, w, tp: int, engine: str = "", sampler=None, moe_mxfp4: str = "w4a16") -> np.ndarray:
    """The op's law columns of `op_lin` (kernel.L_LAW ...; all 0: the roofline law)."""
    row = np.zeros(K.N_LIN - K.L_LAW)
    laws = laws_of(op, hw, w, tp, engine, sampler, moe_mxfp4)

    def put(col, v):
        row[col - K.L_LAW] = v

    bw = hbm_bw(hw)
    if laws.skip:
        put(K.L_LAW, K.LAW_SKIP)
        return row
    if laws.moe_table is not None:  # an MoE block's measured time (core/moetable.py)
        put(K.L_LAW, K.LAW_GEMM)
        put(K.L_T0, laws.moe_table[0])
        put(K.L_G_TAB, 1.0)
        row[K.L_TAB - K.L_LAW : K.L_TAB - K.L_LAW + K.N_MGRID] = laws.moe_table[1]
        return row
    if laws.sampler is not None:  # a GEMM law without its compute term: t0 + s_per_tok x tokens
        put(K.L_LAW, K.LAW_GEMM)
        put(K.L_T0, laws.sampler.t0)
        put(K.L_G_AM, laws.sampler.s_per_tok)
        put(K.L_G_P, 1.0)
        return row
    if laws.gemm is not None:
        g, (wb, ab) = laws.gemm, GEMM_BYTES[laws.gemm_dtype]
        n, k, peak = op.gemm_n, op.gemm_k, _peak(hw, laws.gemm_dtype)
        put(K.L_LAW, K.LAW_GEMM)
        put(K.L_T0, g.t0_us * 1e-6)
        put(K.L_G_AC, 2.0 * n * (k + g.k0) / (peak * g.e_c))  # s per token
        put(K.L_G_CM, n * k * wb / (bw * g.e_b))  # s
        put(K.L_G_AM, (k * ab + 2.0 * n) / (bw * g.e_b))  # s per token
        put(K.L_G_P, g.p)
        if laws.gemm_table is not None:  # the measured table (core/optable.py) in place of the law
            t0, beyond = laws.gemm_table
            put(K.L_T0, t0)
            put(K.L_G_TAB, 1.0)
            row[K.L_TAB - K.L_LAW : K.L_TAB - K.L_LAW + K.N_MGRID] = beyond
    elif laws.prefill is not None:
        a, d = laws.prefill, laws.decode
        h, kvh, hd = op.attn_heads, op.attn_kv_heads, op.attn_head_dim
        put(K.L_LAW, K.LAW_ATTN)
        put(K.L_T0, a.t0_us * 1e-6)
        put(K.L_A_PAIR, 4.0 * h * hd / (_peak(hw, w.kv_dtype) * a.e_a))
        put(K.L_A_TOK, h * a.tau_tok_ns * 1e-9)
        put(K.L_A_SEQ, h * a.tau_seq_ns * 1e-9)
        put(K.L_D_T0, d.t0_us * 1e-6)
        put(K.L_D_SEQ, d.c_sk_ns * 1e-9 * kvh)
        put(K.L_D_CTX, 2.0 * kvh * hd * ATTN_DTYPES[w.kv_dtype] / (d.bw_kv_tbs * 1e12))
        put(K.L_D_P, d.p)
    if laws.decode_table is not None:  # the measured table (core/attntable.py) in place of the law
        grid, floor, t0 = laws.decode_table  # (MLA's decode-only attention: the table alone)
        put(K.L_LAW, K.LAW_ATTN)
        put(K.L_D_T0, t0)
        put(K.L_D_TAB, 1.0)
        put(K.L_D_FLOOR, floor)
        row[K.L_TAB - K.L_LAW : K.L_TAB - K.L_LAW + grid.size] = grid
    if laws.coll is not None:
        c = laws.coll
        if laws.gemm is None and laws.prefill is None:
            put(K.L_LAW, K.LAW_COLL)
        put(K.L_C_BYTES, op.coll_bytes_per_token)
        put(K.L_C_LO, c.a_lo_us * 1e-6)
        put(K.L_C_HI, c.a_hi_us * 1e-6)
        put(K.L_C_SW, c.s_switch_bytes)
        put(K.L_C_INV_BW, 1.0 / (c.beta_gb_s * 1e9))
        if laws.coll_table is not None:  # the op is the collective alone (laws_of)
            put(K.L_G_TAB, 1.0)
            row[K.L_TAB - K.L_LAW : K.L_TAB - K.L_LAW + K.N_MGRID] = laws.coll_table
    return row

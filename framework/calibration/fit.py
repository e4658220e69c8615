"""Fit the per-shape operator laws (decodelab.opcost) to operator microbenchmarks and write
them as a hardware YAML fragment (`hardware.op_model: fitted` + `hardware.op_fit`), each value
commented with the file and rows it was fitted to and the class's fit error.

Fits: least squares on log latency (scipy.optimize.least_squares, soft-L1 loss with f_scale
0.05: a few single-sample outliers do not pull the law), physical bounds (efficiencies in (0, 1],
the KV read bandwidth at most the HBM peak, p in [1, 20]); parameters rounded to 4 significant
figures, and every error is computed with the rounded values. The roofline columns are today's
law (hardware.op_model=roofline) with the same hardware's constants, for comparison.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Dict, List

import numpy as np

from decodelab.calibration import operators as O
from decodelab.opcost import attention_decode, attention_prefill, collectives, gemm, sampler
from decodelab.opcost import base
from decodelab.opcost.base import ATTN_DTYPES, hbm_bw

GEMM_FIELDS = ("e_c", "k0", "e_b", "t0_us", "p")
PREFILL_FIELDS = ("e_a", "tau_tok_ns", "tau_seq_ns", "t0_us")
DECODE_FIELDS = ("c_sk_ns", "bw_kv_tbs", "t0_us", "p")
COLL_FIELDS = collectives.COLLECTIVE_FIELDS
SAMPLER_FIELDS = ("t0_us", "ns_per_elem")
MIN_ROWS = 8  # fewer rows than this: the class is not fitted


def _round(x: float) -> float:
    return 0.0 if abs(x) < 1e-9 else float(f"{x:.4g}")  # a parameter at its bound 0 is 0


def _law(fields, values) -> SimpleNamespace:
    return SimpleNamespace(**{f: _round(v) for f, v in zip(fields, values)})


def errors(pred, meas) -> Dict[str, float]:
    ape = np.abs(np.asarray(pred, float) / np.asarray(meas, float) - 1.0) * 100.0
    return {
        "n": int(ape.size),
        "mape": float(ape.mean()),
        "median": float(np.median(ape)),
        "max": float(ape.max()),
    }


def _least_squares(fun, x0, lo, hi, t):
    from scipy.optimize import least_squares  # heavy: on use

    logt = np.log(t)
    r = least_squares(
        lambda th: np.log(fun(th)) - logt,
        x0,
        bounds=(lo, hi),
        loss="soft_l1",
        f_scale=0.05,
        x_scale="jac",
        max_nfev=4000,
    )
    return r.x


# ---- today's roofline law for the same calls (hardware.op_model=roofline), for comparison


def _roofline(hw, bytes_, flops, peak, attn_flops=0.0):
    bw = hbm_bw(hw)
    mem = (np.asarray(bytes_, float) + hw.bw_half_mb * 1e6) / (bw * hw.bw_eff_max)
    attn_eff = hw.attn_compute_eff_max or hw.compute_eff_max
    work = np.asarray(flops, float) + np.asarray(attn_flops, float) * hw.compute_eff_max / attn_eff
    comp = (work + hw.compute_half_gflop * 1e9) / (peak * hw.compute_eff_max)
    comp = np.where(np.asarray(flops) + np.asarray(attn_flops) > 0, comp, 0.0)
    return np.maximum(mem, comp) + hw.sync_us * 1e-6


def roofline_gemm(hw, m, n, k, dtype):
    wb = gemm.GEMM_BYTES[dtype][0]
    return _roofline(hw, n * k * wb + m * (k + n) * 2.0, 2.0 * m * n * k, base.peak(hw, dtype))


def roofline_attention(hw, tokens, kv_read, pairs, h, kvh, hd, kv_dtype):
    """rope_kv_write + attention (components/models/dense.py): what the benchmarked call covers."""
    kv_tok = 2.0 * kvh * hd * ATTN_DTYPES[kv_dtype]
    peak = base.peak(hw, "bf16")
    rope = _roofline(
        hw, tokens * (2.0 * (h + 2 * kvh) * hd * 2.0 + kv_tok), tokens * 6.0 * (h + kvh) * hd, peak
    )
    attn = _roofline(hw, kv_read * kv_tok + tokens * 2.0 * h * hd * 2.0, 0.0, peak, pairs * 4.0 * h * hd)
    return rope + attn


def roofline_collective(hw, s_bytes, n, op):
    f = 2.0 * (n - 1) / n if op.startswith("all_reduce") else (n - 1) / n
    return hw.collective_latency_us * 1e-6 + f * np.asarray(s_bytes, float) / (hw.link_bw_gb_s * 1e9)


# ---- one fit per class


def fit_gemm(d, dtype, hw):
    peak, bw = base.peak(hw, dtype), hbm_bw(hw)
    wb, ab = gemm.GEMM_BYTES[dtype]
    m, n, k, t = (d[c].to_numpy(float) for c in ("m", "n", "k", "t"))

    def f(th):
        return gemm.gemm_time(SimpleNamespace(**dict(zip(GEMM_FIELDS, th))), m, n, k, peak, bw, wb, ab)

    th = _least_squares(
        f, (0.75, 100.0, 0.85, 4.0, 3.0), [0.05, 0.0, 0.05, 0.0, 1.0], [1.0, 5000.0, 1.0, 200.0, 20.0], t
    )
    law = _law(GEMM_FIELDS, th)
    return law, gemm.gemm_time(law, m, n, k, peak, bw, wb, ab), roofline_gemm(hw, m, n, k, dtype)


def _pairs(s):
    return s * (s + 1.0) / 2.0


def _prefill_law(b, s, h, hd, peak, t):
    """The prefill attention law (opcost.attention_prefill) fitted to rows of b sequences of s tokens at
    h heads of head dim hd (seconds t), and its times on them."""

    def f(law):
        return attention_prefill.prefill_attention_time(law, b * _pairs(s), b * s, b, h, hd, peak)

    th = _least_squares(
        lambda x: f(SimpleNamespace(**dict(zip(PREFILL_FIELDS, x)))),
        (0.6, 0.05, 1.0, 10.0),
        [0.05, 0.0, 0.0, 0.0],
        [1.0, 100.0, 1e4, 200.0],
        t,
    )
    law = _law(PREFILL_FIELDS, th)
    return law, f(law)


def fit_prefill(d, dtype, hw):
    b, s, h, kvh, hd, t = (
        d[c].to_numpy(float)
        for c in ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "t")
    )
    law, pred = _prefill_law(b, s, h, hd, base.peak(hw, dtype), t)
    return law, pred, roofline_attention(hw, b * s, b * s, b * _pairs(s), h, kvh, hd, dtype)


# DeepSeek's MLA dims, which AIConfigurator's context_mla_perf tables time (collector/*/collect_mla.py): the
# law's hd is the mean of the qk (128 + 64) and v (128) head dims, 2 h (qk + v) = 4 h hd FLOPs a pair
MLA_PREFILL_HD = (128 + 64 + 128) / 2.0


def fit_mla_prefill(d, kv_dtype, hw):
    """The prefill law of MLA's prefill attention (opcost.attention_prefill) on context_mla rows, and the
    roofline of the same calls (the decompressed q, k, v read, the pairs' FLOPs)."""
    b, s, h, t = (d[c].to_numpy(float) for c in ("batch_size", "isl", "num_heads", "t"))
    hd = MLA_PREFILL_HD
    law, pred = _prefill_law(b, s, h, hd, base.peak(hw, kv_dtype), t)
    pairs = b * _pairs(s)
    old = _roofline(hw, b * s * h * (3 * hd) * 2.0, 0.0, base.peak(hw, "bf16"), pairs * 4.0 * h * hd)
    return law, pred, old


def _fit_mla(data, hw, add) -> None:
    """The MLA prefill laws of TensorRT-LLM's table (mla_prefill) and of engines' own (mla_prefill_by_engine)."""
    for kind in sorted(k for k in data if k.split(":")[0] == "context_mla"):
        df, fname = data[kind]
        engine = kind.split(":", 1)[1] if ":" in kind else ""
        for kv in ATTN_DTYPES:
            d = O.mla_context_rows(df, kv)
            if len(d) >= MIN_ROWS:
                law, pred, old = fit_mla_prefill(d, kv, hw)
                rule = f"kv_cache_dtype={kv}, heads per GPU>=2, batch*isl<=16384"
                group, key = ("mla_prefill_by_engine", f"{engine}.{kv}") if engine else ("mla_prefill", kv)
                add(group, key, PREFILL_FIELDS, law, pred, old, d.t, fname, rule)


def fit_decode(d, kv_dtype, hw):
    b, step, h, kvh, hd, t = (
        d[c].to_numpy(float)
        for c in ("batch_size", "step", "num_heads", "num_key_value_heads", "head_dim", "t")
    )
    kvb = ATTN_DTYPES[kv_dtype]
    bw_max = hbm_bw(hw) / 1e12  # a KV read cannot beat the HBM peak

    def f(law):
        return attention_decode.decode_attention_time(law, b, b * (step + 1.0), kvh, hd, kvb)

    th = _least_squares(
        lambda x: f(SimpleNamespace(**dict(zip(DECODE_FIELDS, x)))),
        (20.0, 0.9 * bw_max, 8.0, 3.0),
        [0.0, 0.1, 0.0, 1.0],
        [1e4, bw_max, 200.0, 20.0],
        t,
    )
    law = _law(DECODE_FIELDS, th)
    return law, f(law), roofline_attention(hw, b, b * (step + 1.0), b * (step + 1.0), h, kvh, hd, kv_dtype)


def fit_collective(s, t):
    """Scan the switch size S* over the geometric midpoints of the measured sizes (and no
    switch); fit (a_lo, a_hi, beta) for each; keep the least absolute log error."""
    sizes = np.unique(s)
    best = None
    for sw in list(np.sqrt(sizes[1:] * sizes[:-1])) + [np.inf]:

        def f(x, sw=sw):
            a_hi = x[1] if np.isfinite(sw) else x[0]
            return collectives.collective_time(
                SimpleNamespace(a_lo_us=x[0], a_hi_us=a_hi, s_switch_bytes=sw, beta_gb_s=x[2]), s
            )

        x = _least_squares(f, (5.0, 10.0, 200.0), [0.0, 0.0, 1.0], [1e3, 1e3, 5e3], t)
        cost = float(np.sum(np.abs(np.log(f(x) / t))))
        if best is None or cost < best[0]:
            big = float(sizes.max()) * 2.0 if not np.isfinite(sw) else sw
            a_hi = x[1] if np.isfinite(sw) else x[0]
            best = (cost, (x[0], a_hi, big, x[2]))
    law = _law(COLL_FIELDS, best[1])
    return law, collectives.collective_time(law, s)


# ---- everything in the files


def _collective_kinds(data) -> List[tuple]:
    """(data kind, NCCL op, law group, key prefix) of the collective files: TensorRT-LLM's all-reduce, NCCL's
    all-gather, engines' own all-reduces (allreduce:<engine>)."""
    coll = [("allreduce", "", "all_reduce", ""), ("nccl", "all_gather", "all_gather", "")]
    mine = [k for k in sorted(data) if k.startswith("allreduce:")]
    return coll + [(k, "", "all_reduce_by_engine", k.split(":", 1)[1] + ".") for k in mine]


def fit_all(data: Dict[str, tuple], hw) -> List[dict]:
    """One entry per fitted class: group, key, law, fields, file, rule, new and roofline errors."""
    out = []

    def add(group, key, fields, law, pred, old, meas, fname, rule):
        out.append(
            {
                "group": group,
                "key": key,
                "fields": fields,
                "law": law,
                "file": fname,
                "rule": rule,
                "new": errors(pred, meas),
                "old": errors(old, meas),
            }
        )

    if "gemm" in data:
        df, fname = data["gemm"]
        for dtype in gemm.GEMM_BYTES:
            d = O.gemm_rows(df, dtype)
            if len(d) >= MIN_ROWS:
                law, pred, old = fit_gemm(d, dtype, hw)
                rule = f"gemm_dtype={dtype}, 1<=m<=16384, n,k>=256"
                add("gemm", dtype, GEMM_FIELDS, law, pred, old, d.t, fname, rule)
    if "context_attention" in data:
        df, fname = data["context_attention"]
        for dtype in ATTN_DTYPES:
            for hd in sorted(df.head_dim.unique()):
                d = O.context_rows(df, dtype, int(hd))
                if len(d) >= MIN_ROWS:
                    law, pred, old = fit_prefill(d, dtype, hw)
                    rule = f"attn_dtype={dtype}, head_dim={int(hd)}, window 0, heads>=4, batch*isl<=16384"
                    add(
                        "attention_prefill",
                        f"{dtype}_hd{int(hd)}",
                        PREFILL_FIELDS,
                        law,
                        pred,
                        old,
                        d.t,
                        fname,
                        rule,
                    )
    _fit_mla(data, hw, add)
    if "generation_attention" in data:
        df, fname = data["generation_attention"]
        for dtype in ATTN_DTYPES:
            for hd in sorted(df.head_dim.unique()):
                d = O.generation_rows(df, dtype, int(hd), hbm_bw(hw), ATTN_DTYPES[dtype])
                if len(d) >= MIN_ROWS:
                    law, pred, old = fit_decode(d, dtype, hw)
                    rule = (
                        f"kv_cache_dtype={dtype}, head_dim={int(hd)}, window 0, group 2-16, batch<=512, "
                        "step<=32767, KV read no faster than the HBM peak"
                    )
                    add(
                        "attention_decode",
                        f"{dtype}_hd{int(hd)}",
                        DECODE_FIELDS,
                        law,
                        pred,
                        old,
                        d.t,
                        fname,
                        rule,
                    )
    for kind, op, group, prefix in _collective_kinds(data):
        if kind not in data:
            continue
        df, fname = data[kind]
        for n in sorted(df.num_gpus.unique()):
            s, t = O.collective_rows(df, kind, op, int(n))
            if len(t) >= MIN_ROWS and n > 1:
                law, pred = fit_collective(s, t)
                old = roofline_collective(hw, s, n, group)
                rule = (
                    f"num_gpus={int(n)}"
                    + (f", op_name={op}" if op else "")
                    + ", bytes = message_size x element bytes"
                )
                add(group, f"{prefix}tp{int(n)}", COLL_FIELDS, law, pred, old, t, fname, rule)
    if "sampler" in data and len(data["sampler"][0]) >= MIN_ROWS:  # the sort path (opcost/sampler.py)
        df, fname = data["sampler"]
        t0_us, ns, _ = sampler.fit(zip(df.batch, df.vocab, df.latency_ms))
        elems = np.asarray(df.batch * df.vocab, float)
        pred = sampler.filter_ms(t0_us, ns, elems) * 1e-3
        old = elems * 4.0 / hbm_bw(hw)  # the kernel path: one FP32 pass at the HBM peak
        law = _law(SAMPLER_FIELDS, (t0_us, ns))
        add(
            "sampler",
            "sort",
            SAMPLER_FIELDS,
            law,
            pred,
            old,
            df.t,
            fname,
            "batch x vocab, every row top-k and top-p",
        )
    return out


def to_yaml(fits: List[dict], hw_name: str, command: str) -> str:
    """The hardware YAML fragment: op_model + op_fit, a comment per value."""
    lines = [
        f"# Per-shape operator laws fitted by `{command}`",
        f"# (decodelab.calibration; P and BW from hardware {hw_name}). Error = |law / measured - 1| over",
        "# the fit rows; 'roofline' = today's op_model=roofline law with this hardware's constants.",
        "op_model: fitted",
        "op_fit:",
        f'  source: "{", ".join(sorted({f["file"] for f in fits}))} (operator microbenchmarks)"',
    ]
    groups = (
        "gemm",
        "attention_prefill",
        "attention_decode",
        "mla_prefill",
        "mla_prefill_by_engine",
        "all_reduce",
        "all_gather",
        "all_reduce_by_engine",
        "sampler",
    )
    for g in groups:
        entries = [f for f in fits if f["group"] == g]
        if not entries:
            continue
        lines.append(f"  {g}:")
        parent = None
        for f in entries:
            n, o = f["new"], f["old"]
            *up, key = f["key"].split(".")  # all_reduce_by_engine: <engine>.tp<n>
            pad = "  " * len(up)
            if up and up[0] != parent:
                parent = up[0]
                lines.append(f"    {parent}:")
            lines.append(
                f"    {pad}{key}:   # {f['file']}: {f['rule']}; {n['n']} rows: MAPE {n['mape']:.1f}% "
                f"(roofline {o['mape']:.1f}%), median {n['median']:.1f}%, max {n['max']:.0f}%"
            )
            for field in f["fields"]:
                v = getattr(f["law"], field)
                lines.append(
                    f"      {pad}{field}: {v:.4g}   # fitted to {f['file']} ({n['n']} rows); class MAPE {n['mape']:.1f}%"
                )
    return "\n".join(lines) + "\n"


def table(fits: List[dict]) -> List[tuple]:
    """(class, rows, MAPE law, MAPE roofline, median law, max law) per fitted class."""
    return [
        (
            f"{f['group']}.{f['key']}",
            f["new"]["n"],
            f["new"]["mape"],
            f["old"]["mape"],
            f["new"]["median"],
            f["new"]["max"],
        )
        for f in fits
    ]

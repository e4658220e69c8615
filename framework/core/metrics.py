"""Per-step times by cause -> the metrics of a decode design (TTFT, TPOT, tok/s, % of roofline,
memory per tier, time per output token by cause, the KV policy's figures)."""

from __future__ import annotations

from typing import Dict

import numpy as np

from decodelab.components.placement import GIB
from decodelab.core import cost, kv_costs, parallel
from decodelab.core.build import Design
from decodelab.core.pipeline import microbatches
from decodelab.kernel_layout import CAUSES, Cause


def rate_metrics(design: Design, w, ttft, tpot, tokens: float, mean_ctx: float, replicas: int, hbm_bw_total):
    """Latency and rate metrics from TTFT and TPOT (seconds; floats, or arrays of designs that share
    `design` but their HBM bandwidth, core.grid). Dataflow paper Eq. 3: roofline tok/s = samples *
    HBM_bw / (weights + KV_per_sample * samples), with the weights every step streams (the
    embedding table is only gathered by row) and the KV of a sample at its mean decode context."""
    b = w.batch_size
    kv_per_sample = design.kv_bytes_per_token * kv_costs.attended_at(design, float(w.prompt_len), mean_ctx)
    w_bytes = design.weight_bytes_streamed
    roofline_tok_s = b * hbm_bw_total / (w_bytes + kv_per_sample * b)
    agg = b / tpot
    return {
        "ttft_ms": ttft * 1e3,
        "tpot_ms": tpot * 1e3,
        "e2e_ms": (ttft + tpot * tokens) * 1e3,
        "tok_s_user": 1.0 / tpot,
        "tok_s_aggregate": agg,
        "tok_s_system": agg * replicas,
        "roofline_tok_s": roofline_tok_s,
        "pct_roofline": 100.0 * agg / roofline_tok_s,
        "pct_peak_bw": 100.0 * agg * (w_bytes / b + kv_per_sample) / hbm_bw_total,
        "achieved_bw_tb_s": agg * (w_bytes / b + kv_per_sample) / 1e12,
    }


def metrics(
    cfg,
    design: Design,
    prefill: np.ndarray,
    decode_sum: np.ndarray,
    tokens: float,
    mean_ctx: float,
    memory: Dict,
) -> Dict[str, float]:
    """prefill[k]: seconds by cause until the first token; decode_sum[k]: seconds by cause of all
    decode work, which emits `tokens` tokens per sequence."""
    w, hw = cfg.workload, cfg.hardware
    tpot = float(decode_sum.sum()) / tokens
    ttft = float(prefill.sum())
    b = w.batch_size
    replicas = parallel.replicas(hw)
    res = rate_metrics(design, w, ttft, tpot, tokens, mean_ctx, replicas, design.hbm_bw_total)
    res["n_kernel_calls_per_step"] = design.calls_per_step
    for k, cause in enumerate(CAUSES):
        res[f"tpot_{cause}_ms"] = float(decode_sum[k]) / tokens * 1e3
        res[f"ttft_{cause}_ms"] = float(prefill[k]) * 1e3
    if parallel.pp_of(hw) > 1:  # a GPU's fill_drain is the pipeline's idle time (core/pipeline.py)
        res["pp_microbatches"] = float(microbatches(b, parallel.microbatches(cfg))[1])  # non-empty ones
        res["pp_bubble_pct"] = 100.0 * float(decode_sum[Cause.FILL_DRAIN] / decode_sum.sum())
        res["ttft_pp_bubble_pct"] = 100.0 * float(prefill[Cause.FILL_DRAIN]) / ttft if ttft > 0 else 0.0
    ddr = design.tier_names.index("ddr") if "ddr" in design.tier_names else -1
    res["kv_ddr_pct"] = 100.0 * float(design.kv_frac[ddr]) if ddr >= 0 else 0.0  # kv_placement
    for name, used in memory["used"].items():
        res[f"mem_{name}_gib"] = used / GIB
        res[f"mem_{name}_pct"] = 100.0 * used / memory["capacity"][name]
    res.update(kv_costs.policy_metrics(design, b, ttft))  # max_batch, KV slot, selection time
    # per chip, energy, cost: of the decode phase (the rate tok_s_system counts; core/cost.py)
    res.update(
        cost.cost_metrics(hw, float(decode_sum.sum()), cost.busy_seconds(decode_sum), b * tokens, replicas)
    )
    return res

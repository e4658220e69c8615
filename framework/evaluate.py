"""Evaluate one design: build arrays, run the kernel, turn per-step times into metrics.

`evaluate(cfg)` never raises for bad or infeasible designs: it returns a result whose `status`
is `ok`, `infeasible` or `invalid`, with the reason, so a sweep records it and carries on."""
from __future__ import annotations

from typing import Any, Dict

import numpy as np

from components.placement import GIB
from framework import kernel as K
from framework.build import Design, build
from framework.validate import ConfigError, Infeasible


def metrics(cfg, design: Design, steps: np.ndarray, out: np.ndarray) -> Dict[str, float]:
    w, hw = cfg.workload, cfg.hardware
    row_total = out.sum(axis=1)
    decode = out[1:]
    tpot = float(row_total[1:].mean())
    ttft = float(row_total[0])
    b = w.batch_size
    replicas = hw.n_chips // hw.tensor_parallel
    # Dataflow paper Eq. 3: roofline tok/s = samples * HBM_bw / (weights + KV_per_sample * samples),
    # with the KV of a sample at the mean decode context.
    mean_ctx = float(steps[1:, K.S_CTX].mean())
    kv_per_sample = design.kv_bytes_per_token * _cached(design, mean_ctx)
    roofline_tok_s = b * design.hbm_bw_total / (design.weight_bytes_total + kv_per_sample * b)
    agg = b / tpot
    res = {
        "ttft_ms": ttft * 1e3,
        "tpot_ms": tpot * 1e3,
        "e2e_ms": float(row_total.sum()) * 1e3,
        "tok_s_user": 1.0 / tpot,
        "tok_s_aggregate": agg,
        "tok_s_system": agg * replicas,
        "roofline_tok_s": roofline_tok_s,
        "pct_roofline": 100.0 * agg / roofline_tok_s,
        "pct_peak_bw": 100.0 * agg * (design.weight_bytes_total / b + kv_per_sample)
                       / design.hbm_bw_total,
        "n_kernel_calls_per_step": float(design.call_rep.sum()),
    }
    for k, cause in enumerate(K.CAUSES):
        res[f"tpot_{cause}_ms"] = float(decode[:, k].mean()) * 1e3
        res[f"ttft_{cause}_ms"] = float(out[0, k]) * 1e3
    for name, used in design.memory["used"].items():
        res[f"mem_{name}_gib"] = used / GIB
        res[f"mem_{name}_pct"] = 100.0 * used / design.memory["capacity"][name]
    return res


def _cached(design: Design, ctx: float) -> float:
    cap = design.hw[K.H_KV_CAP]
    return min(ctx, cap) if cap > 0 else ctx


def evaluate(cfg, keep_steps: bool = True) -> Dict[str, Any]:
    """Run one design. Returns {status, reason, metrics, notes, steps (rows x causes), ...}."""
    try:
        design = build(cfg)
    except ConfigError as e:
        return {"status": "invalid", "reason": str(e), "metrics": {}, "notes": []}
    except Infeasible as e:
        return {"status": "infeasible", "reason": str(e), "metrics": {}, "notes": []}
    w = cfg.workload
    steps = K.request_steps(w.batch_size, w.prompt_len, w.output_len)
    out = K.simulate(*design.arrays(), steps)
    res = {"status": "ok", "reason": "", "metrics": metrics(cfg, design, steps, out),
           "notes": list(design.notes)}
    if keep_steps:
        res["steps"] = steps
        res["times"] = out
    return res

"""Evaluate one design: build arrays, run the kernel, turn per-step times into metrics.

`evaluate(cfg)` never raises for bad or infeasible designs: it returns a result whose `status`
is `ok`, `infeasible` or `invalid`, with the reason, so a sweep records it and carries on."""
from __future__ import annotations

import math
from typing import Any, Dict

import numpy as np
from omegaconf import OmegaConf
from omegaconf.errors import MissingMandatoryValue

from components import speculative as spec
from components.placement import GIB
from framework import kernel as K
from framework import kv_costs
from framework.build import Design, build
from framework.validate import ConfigError, Infeasible


def metrics(cfg, design: Design, prefill: np.ndarray, decode_sum: np.ndarray, tokens: float,
            mean_ctx: float, memory: Dict) -> Dict[str, float]:
    """prefill[k]: seconds by cause until the first token; decode_sum[k]: seconds by cause of all
    decode work, which emits `tokens` tokens per sequence."""
    w, hw = cfg.workload, cfg.hardware
    tpot = float(decode_sum.sum()) / tokens
    ttft = float(prefill.sum())
    b = w.batch_size
    replicas = hw.n_chips // hw.tensor_parallel
    # Dataflow paper Eq. 3: roofline tok/s = samples * HBM_bw / (weights + KV_per_sample * samples),
    # with the weights every step streams (the embedding table is only gathered by row) and the
    # KV of a sample at its mean decode context.
    kv_per_sample = design.kv_bytes_per_token * kv_costs.attended_at(
        design, float(w.prompt_len), mean_ctx)
    w_bytes = design.weight_bytes_streamed
    roofline_tok_s = b * design.hbm_bw_total / (w_bytes + kv_per_sample * b)
    agg = b / tpot
    res = {
        "ttft_ms": ttft * 1e3,
        "tpot_ms": tpot * 1e3,
        "e2e_ms": (ttft + tpot * tokens) * 1e3,
        "tok_s_user": 1.0 / tpot,
        "tok_s_aggregate": agg,
        "tok_s_system": agg * replicas,
        "roofline_tok_s": roofline_tok_s,
        "pct_roofline": 100.0 * agg / roofline_tok_s,
        "pct_peak_bw": 100.0 * agg * (w_bytes / b + kv_per_sample) / design.hbm_bw_total,
        "achieved_bw_tb_s": agg * (w_bytes / b + kv_per_sample) / 1e12,
        "n_kernel_calls_per_step": design.calls_per_step,
    }
    for k, cause in enumerate(K.CAUSES):
        res[f"tpot_{cause}_ms"] = float(decode_sum[k]) / tokens * 1e3
        res[f"ttft_{cause}_ms"] = float(prefill[k]) * 1e3
    for name, used in memory["used"].items():
        res[f"mem_{name}_gib"] = used / GIB
        res[f"mem_{name}_pct"] = 100.0 * used / memory["capacity"][name]
    res.update(kv_costs.policy_metrics(design, b, ttft))   # max_batch, KV slot, selection time
    return res


def _draft_cfg(cfg):
    """The draft as a full config: the target's hardware, workload and options, the draft model."""
    s = cfg.speculative
    if s.method not in spec.METHODS:
        raise ConfigError(f"speculative.method={s.method!r} is not one of: {', '.join(spec.METHODS)}")
    if s.k < 1:
        raise ConfigError(f"speculative.k={s.k} must be >= 1")
    if not 0.0 <= s.acceptance <= 1.0 or not 0.0 <= s.ar <= 1.0:
        raise ConfigError(f"speculative.acceptance={s.acceptance} and speculative.ar={s.ar} "
                          "must be in [0, 1]")
    d = cfg.copy()
    OmegaConf.set_readonly(d, False)
    d.model = spec.mtp_draft(cfg.model) if s.method == "mtp" else cfg.speculative.draft
    d.speculative.enabled = False
    return d


def _joint_memory(a: Dict, b: Dict) -> Dict:
    used = {n: a["used"][n] + b["used"][n] for n in a["used"]}
    for n, u in used.items():
        if u > a["capacity"][n] * (1 + 1e-9):
            raise Infeasible(f"target + draft do not fit memory: {u / GIB:.1f} GiB needed in {n}, "
                             f"{a['capacity'][n] / GIB:.1f} GiB per chip")
    return {"used": used, "capacity": a["capacity"]}


def _speculative(cfg, design: Design, keep_steps: bool) -> Dict[str, Any]:
    s, w = cfg.speculative, cfg.workload
    draft = build(_draft_cfg(cfg), host_round_trip_steps=s.k + 1)
    memory = _joint_memory(design.memory, draft.memory)
    e_tok = spec.tokens_per_round(s.k, s.acceptance, s.ar)
    rounds = max(1, math.ceil((w.output_len - 1) / e_tok))
    ctx0 = w.prompt_len + 1.0 + np.arange(rounds) * e_tok       # context at each round's start
    # the target computes logits at all k + 1 verified positions; the draft at its one token
    verify = np.stack([np.full(rounds, s.k + 1.0), ctx0 + s.k + 1, np.full(rounds, w.batch_size),
                       np.full(rounds, s.k + 1.0), np.zeros(rounds)], 1)
    drafting = np.stack([np.ones(rounds * s.k), (ctx0[:, None] + 1 + np.arange(s.k)).ravel(),
                         np.full(rounds * s.k, w.batch_size), np.ones(rounds * s.k),
                         np.zeros(rounds * s.k)], 1)
    verify = kv_costs.attended_rows(verify, w.prompt_len, design)
    drafting = kv_costs.attended_rows(drafting, w.prompt_len, draft)
    pre = K.request_steps(w.batch_size, w.prompt_len, 2)[:1]
    t_pre = K.simulate(*design.arrays(), pre)[0] + K.simulate(*draft.arrays(), pre)[0]
    t_pre = t_pre + w.batch_size * design.kv_prefill_s    # KV-policy selection at prefill
    t_ver = K.simulate(*design.arrays(), verify)
    t_dra = K.simulate(*draft.arrays(), drafting).reshape(rounds, s.k, len(K.CAUSES)).sum(1)
    per_round = t_ver + t_dra
    tokens = rounds * e_tok
    m = metrics(cfg, design, t_pre, per_round.sum(0), tokens, float(ctx0.mean() + e_tok / 2), memory)
    m["spec_tokens_per_round"] = e_tok
    m["spec_draft_time_share"] = float(t_dra.sum() / per_round.sum())
    res = {"status": "ok", "reason": "", "metrics": m, "notes": design.notes + draft.notes}
    if keep_steps:
        res["steps"] = np.vstack([pre, verify])
        res["times"] = np.vstack([t_pre[None, :], per_round])
    return res


def evaluate(cfg, keep_steps: bool = True) -> Dict[str, Any]:
    """Run one design. Returns {status, reason, metrics, notes, steps (rows x causes), ...}."""
    if getattr(cfg, "coe", None) is not None and cfg.coe.enabled:   # Composition of Experts
        from framework.coe import evaluate_coe
        return evaluate_coe(cfg, keep_steps)
    try:
        cfg = kv_costs.resolve_batch(cfg)       # workload.batch_fill: the largest batch that fits
        spec_on = cfg.speculative.enabled
        trip = max(cfg.speculative.k, 0) + 1 if spec_on else None   # k < 1: invalid, below
        design = build(cfg, host_round_trip_steps=trip)
        if getattr(cfg.workload, "kind", "static") != "static":   # serving: framework/serving.py
            from framework.serving import evaluate_serving
            return evaluate_serving(cfg, design, keep_steps)
        if spec_on:
            return _speculative(cfg, design, keep_steps)
    except (ConfigError, MissingMandatoryValue) as e:
        return {"status": "invalid", "reason": str(e).splitlines()[0] if not isinstance(
            e, ConfigError) else str(e), "metrics": {}, "notes": []}
    except Infeasible as e:
        return {"status": "infeasible", "reason": str(e), "metrics": {}, "notes": []}
    w = cfg.workload
    steps = kv_costs.attended_rows(K.request_steps(w.batch_size, w.prompt_len, w.output_len),
                                   w.prompt_len, design)   # KV policy, layer kinds (kv_costs.py)
    out = K.simulate(*design.arrays(), steps)
    out[0] += w.batch_size * design.kv_prefill_s         # KV-policy selection at prefill (TTFT)
    m = metrics(cfg, design, out[0], out[1:].sum(0), w.output_len - 1.0,
                w.prompt_len + w.output_len / 2.0, design.memory)
    res = {"status": "ok", "reason": "", "metrics": m, "notes": list(design.notes)}
    if keep_steps:
        res["steps"] = steps
        res["times"] = out
    return res

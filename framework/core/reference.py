"""Pure-Python reference of the simulation, written independently of the array layout: it reads
the component-level operator list (`Design.ops`, `Design.calls`) and the config, not the kernel's
arrays. Tests require the Numba kernel to match it; `decodelab bench` times both."""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import numpy as np

from decodelab.components.execution import EXECUTION_MODELS
from decodelab.core import parallel
from decodelab.core.build import expert_read_ratios
from decodelab.core.cost_setup import cost_context, peak_flops
from decodelab.core.checks import DTYPE_BYTES
from decodelab.kernel_layout import M_GRID, Law
from decodelab.opcost import registry
from decodelab.opcost.base import Step
from decodelab.core.kv_costs import attention_efficiency
from decodelab.core.schema import memory_tiers


def _efficiency(size: float, eff_max: float, half: float) -> float:
    return eff_max if half <= 0 else eff_max * size / (size + half)


def reference_step(
    design, cfg, q_tok: float, ctx: float, seqs: float, out_tok: float = 1.0, prefill: bool = False
) -> Dict[str, float]:
    """Seconds by cause for one step in which each of `seqs` sequences adds `q_tok` tokens
    (`out_tok` of them sampled: 1 for a prefill or decode step) and attends `ctx` KV tokens (the
    KV policy already applied by the caller; `prefill`: the sequences are prefilling)."""
    pairs = max(q_tok * ctx - q_tok * (q_tok - 1) / 2, q_tok)
    agg = (q_tok * seqs, seqs * ctx, seqs * pairs)
    pre = (*agg, seqs) if prefill else (0.0, 0.0, 0.0, 0.0)
    return reference_step_agg(design, cfg, *agg, seqs, out_tok * seqs, *pre)


def reference_step_agg(
    design,
    cfg,
    tokens: float,
    kv_read: float,
    pairs: float,
    seqs: float,
    sampled: float,
    pre_tokens: float = 0.0,
    pre_kv: float = 0.0,
    pre_pairs: float = 0.0,
    pre_seqs: float = 0.0,
) -> Dict[str, float]:
    """Seconds by cause for one fused step given its aggregates: `tokens` through the token
    GEMMs, `kv_read` KV tokens read and `pairs` causal (query, key) pairs, both summed over the
    step's `seqs` sequences, and `sampled` tokens whose logits are computed: the ops after the
    decoder stack (final norm, LM head, sampling) run on those alone. `pre_*`: the share of the
    prefilling sequences; an op on the prefill path sees only that, one on the decode path the
    rest, and a call none of whose ops runs is not issued (kernel.step_core). Under
    hardware.op_model=fitted an op with a fitted law (decodelab.opcost) costs the law's time, whose
    t0 replaces its call's sync_us."""
    pp = int(getattr(cfg.hardware, "pipeline_parallel", 1))
    agg = (tokens, kv_read, pairs, seqs, sampled, pre_tokens, pre_kv, pre_pairs, pre_seqs)
    if pp <= 1:
        return _group_step(design, cfg, *agg)[0]
    return _pipeline_step(design, cfg, pp, agg)


def _pipeline_step(design, cfg, pp: int, agg) -> Dict[str, float]:
    """Pipeline parallelism (docs/model.md, "Parallelism beyond tensor parallelism"), written out
    per stage: the batch in m micro-batches of ceil(seqs / m) sequences; stage s holds the layers
    vLLM's get_pp_indices gives it; one micro-batch's time on stage s is its layers' share of the
    decoder-layer calls plus the embedding (s = 0) or the final norm, LM head and sampling
    (s = pp - 1)."""
    hw, m, w = cfg.hardware, cfg.model, cfg.workload
    mb = getattr(w, "pp_microbatches", 0) or pp
    seqs = max(1, math.ceil(agg[3] - 1e-9))
    per = math.ceil(seqs / mb - 1e-9)
    n_mb = math.ceil(seqs / per - 1e-9)
    f = per / seqs
    out, t_call = _group_step(design, cfg, *(f * x for x in agg))
    parts = [m.n_layers // pp] * pp
    for i in range(2, m.n_layers % pp + 2):
        parts[-i] += 1
    t_kind = {"pre": 0.0, "layer": 0.0, "post": 0.0}
    for c, t in enumerate(t_call):
        kinds = {op.stage for op in design.ops if op.call == c}
        t_kind[kinds.pop() if len(kinds) == 1 else "layer"] += t
    stage_t = [n / m.n_layers * t_kind["layer"] for n in parts]
    stage_t[0] += t_kind["pre"]
    stage_t[-1] += t_kind["post"]
    # each boundary: hidden state + residual, 1/tp of them from each rank over the stage link, then
    # an all-gather inside the receiving tp group over the tp link
    lat = getattr(hw, "p2p_latency_us", -1.0)
    lat = (lat if lat >= 0 else hw.collective_latency_us) * 1e-6
    link = (getattr(hw, "pp_link_bw_gb_s", 0.0) or hw.link_bw_gb_s) * 1e9
    tp, act = hw.tensor_parallel, 2 * m.d_model * DTYPE_BYTES[w.act_dtype] * f * agg[0]
    p2p = lat + act / tp / link
    if tp > 1:
        p2p += parallel.collective_link(hw)[1] * 1e-6 + act * (tp - 1) / tp / (
            parallel.collective_link(hw)[0] * 1e9
        )
    whole = sum(stage_t)
    if agg[5] >= agg[0]:  # a prefill from an empty pipeline: GPipe's schedule
        bare = (n_mb - 1) * max(stage_t) + whole
        step = bare + (pp - 1) * p2p
    else:  # steady state: n_mb micro-batches in flight
        bare = max(n_mb * max(stage_t), whole)
        step = max(n_mb * max(stage_t), whole + (pp - 1) * p2p)
    res = {k: (v if k == "host" else v * n_mb / pp) for k, v in out.items()}
    res["collectives"] += step - bare
    res["fill_drain"] += bare - n_mb / pp * whole
    return res


def _sustained(hw, busy_c: List[float], t_call: List[float], out: Dict[str, float]) -> List[float]:
    """Sustained clocks (kernel.sustained): the compute-bound calls' busy time beyond
    hardware.sustained_after_ms runs at sustained_compute_ratio of the burst rate; the extra goes
    to out["compute"] and to those calls' times by their busy time. The calls' new times."""
    busy, after = sum(busy_c), hw.sustained_after_ms * 1e-3
    if busy <= after:
        return t_call
    extra = (1.0 / hw.sustained_compute_ratio - 1.0) * (busy - after)
    out["compute"] += extra
    return [t + extra * b / busy for t, b in zip(t_call, busy_c)]


def _group_step(
    design, cfg, tokens, kv_read, pairs, seqs, sampled, pre_tokens, pre_kv, pre_pairs, pre_seqs
) -> Tuple[Dict[str, float], List[float]]:
    """One tensor-parallel group's step: seconds by cause and each call's time."""
    hw = cfg.hardware
    tiers = [t.name for t in memory_tiers(hw)]
    bw = {t.name: t.bandwidth_gb_s * 1e9 for t in memory_tiers(hw)}
    w_frac = dict(zip(tiers, design.memory["weight_frac"]))
    kv_frac = dict(zip(tiers, design.memory["kv_frac"]))
    peak = peak_flops(hw, cfg.workload.weight_dtype)

    # seconds of achieved compute per FLOP relative to a GEMM: attention's pair FLOPs are slower
    attn_slow = hw.compute_eff_max / attention_efficiency(hw)
    zero = dict.fromkeys(("flops", "work", "link", "law_t", "law_t0", "law_coll", "busy_c"), 0.0)
    per_call: List[dict] = [
        {"bytes": dict.fromkeys(tiers, 0.0), "ncoll": 0, "law": False, **zero} for _ in design.calls
    ]
    active = set()
    shares = {
        "all": (tokens, kv_read, pairs),
        "prefill": (pre_tokens, pre_kv, pre_pairs),
        "decode": (tokens - pre_tokens, kv_read - pre_kv, pairs - pre_pairs),
    }
    cost = cost_context(cfg)
    for op in design.ops:
        acc = per_call[op.call]
        n_tok, ctx, prs = shares[op.path]
        ps = registry.prices(op, cost)
        code = registry.law_code(ps)
        if n_tok < 0.5 or code == Law.SKIP:  # whole token counts: no sequence takes this path
            continue
        active.add(op.call)
        if op.stage == "post":
            n_tok = sampled
        if op.replica:  # serving under data-parallel attention: every group's tokens
            n_tok *= parallel.dp_token_scale(cfg)
        if ps:  # the families' laws and tables in natural form (decodelab.opcost)
            acc["law"] = True
            dec = (tokens - pre_tokens, seqs - pre_seqs, kv_read - pre_kv)
            step = Step(n_tok, pre_tokens, pre_pairs, pre_seqs, *dec)
            t, t0, coll = registry.reference(op, cost, ps, step)
            acc["law_t"] += t
            acc["law_t0"] += t0
            acc["law_coll"] += coll
            if code == Law.COLL:
                continue  # the measured collective holds its own memory traffic
        w_scale = 1.0  # an MoE expert op reads the experts its tokens activate (kernel Lin.W_TAB)
        if op.experts_read:
            w_scale = float(np.interp(n_tok, M_GRID, expert_read_ratios(op)))
        for t in tiers:
            acc["bytes"][t] += op.weight_bytes * w_frac[t] * w_scale
        acc["bytes"]["hbm"] += n_tok * op.act_bytes_per_token + ctx * op.act_bytes_per_ctx
        kv = ctx * op.kv_read_per_ctx + n_tok * op.kv_write_per_token
        for t in tiers:
            acc["bytes"][t] += kv * kv_frac[t]
        acc["flops"] += n_tok * op.flops_per_token + ctx * op.flops_per_ctx + prs * op.attn_flops_per_ctx
        acc["work"] += (
            n_tok * op.flops_per_token + ctx * op.flops_per_ctx + prs * op.attn_flops_per_ctx * attn_slow
        )
        if not any(p.family == "collectives" for p in ps):
            acc["link"] += n_tok * parallel.link_bytes(op, hw)
            acc["ncoll"] += op.n_collectives

    out = dict.fromkeys(
        ("memory", "compute", "launch_sync", "fill_drain", "host", "collectives", "excess"), 0.0
    )
    t_call, dispatch = [0.0] * len(design.calls), 0.0  # dispatch: the issued calls' async launches
    for c, (call, acc) in enumerate(zip(design.calls, per_call)):
        if c not in active:
            continue
        total = sum(acc["bytes"].values())
        t_mem = sum(b / bw[t] for t, b in acc["bytes"].items())
        t_mem_real = t_mem / _efficiency(total, hw.bw_eff_max, hw.bw_half_mb * 1e6) if total else 0.0
        t_comp = acc["flops"] / peak
        # F / peak / eff(F) = (F + half) / (peak * eff_max), with attention's FLOPs weighted
        t_comp_real = (
            (acc["work"] + hw.compute_half_gflop * 1e9) / (peak * hw.compute_eff_max) if acc["flops"] else 0.0
        )
        t_link = acc["link"] / (parallel.collective_link(hw)[0] * 1e9) if acc["link"] else 0.0
        t_latency = acc["ncoll"] * parallel.collective_link(hw)[1] * 1e-6 + acc["law_coll"]
        busy = acc["law_t"] if acc["law"] else max(t_mem_real, t_comp_real)
        body = (max(busy, t_link) if call["overlap_link"] else busy + t_link) + t_latency
        n = call["repeat"]
        # the roofline time at peak, never more than the law's time
        ideal = min(max(t_mem, t_comp), busy)
        out["memory" if t_mem >= t_comp else "compute"] += n * ideal
        acc["busy_c"] = 0.0 if t_mem >= t_comp else n * busy  # compute-bound busy (sustained clocks)
        out["excess"] += n * (busy - ideal)
        out["collectives"] += n * (body - busy)
        # batch barrier: each invocation idles while the samples beyond the free slots leave it
        fill = call["fill_each"] + call["sample_gap"] * max(0.0, seqs - call["free_samples"])
        # a law's t0 was measured inside a CUDA graph: it is the call's boundary (no sync_us)
        serial = acc["law_t0"] + call.get("boundary_each", 0.0) if acc["law"] else call["launch_each"]
        out["launch_sync"] += n * serial + call["launch_once"]
        out["fill_drain"] += n * fill + call["fill_once"]
        t_call[c] = n * (body + fill + serial) + call["launch_once"] + call["fill_once"]
        dispatch += n * call["launch_async"]
    t_call = _sustained(hw, [acc["busy_c"] for acc in per_call], t_call, out)
    device = sum(t_call)  # launches enqueued ahead: the step lasts max(dispatch, device)
    if dispatch > device:  # host-bound: every call waits on its launches alike (pipeline stages)
        out["launch_sync"] += dispatch - device
        t_call = [t * dispatch / device for t in t_call] if device > 0 else t_call
    steps_per_trip, _ = EXECUTION_MODELS[hw.execution].host_round_trip(cfg.optimizations)
    out["host"] += hw.host_step_us * 1e-6 / steps_per_trip
    return out, t_call


def reference_simulate(design, cfg, steps) -> List[Dict[str, float]]:
    return [
        reference_step(design, cfg, float(q), float(c), float(s), float(o), bool(f))
        for q, c, s, o, f in steps
    ]

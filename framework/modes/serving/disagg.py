"""Disaggregated prefill/decode serving (disagg.enabled; docs/model.md, "Disaggregated serving").

A prefill pool and a decode pool, each `instances` engines of `tensor_parallel` chips of its own
hardware, run the open-loop workload in three stages, each on plain arrays:

1. prefill: request k goes to prefill instance k mod P (round robin in arrival order, as vLLM's
   disaggregation proxy cycles its prefill and decode instances); each instance is the Numba
   scheduler (modes/serving/scheduler.py) on its requests with one output token: prefill-only
   steps, the prompt's KV held until the prefill ends.
2. KV transfer: request k's decode instance is k mod D. Its prompt's KV (the tokens the KV policy
   keeps, x the KV bytes per token of each chip) crosses `kv_link`: every chip has its own NIC,
   so the ranks move their shards in parallel and a transfer lasts
   latency + tokens x max(bytes/token per prefill chip, per decode chip) / bw_gb_s. The sending
   and receiving instances' links carry one transfer at a time (FIFO by prefill end).
3. decode: each decode instance is the same scheduler with E_READY (requests arrive with their
   KV in the cache at prefill end + transfer): its first step over a request attends the prompt
   and emits the first token the client sees (the decode instance streams every token), then
   continuous batching of decode steps.

TTFT = first token from the decode instance - arrival (includes prefill, the KV transfer and the
decode queue); `prefill_ttft_*` = prefill end - arrival (DistServe's TTFT). TPOT = (last token -
first token) / (output - 1) on the decode pool. Closed loops are not modelled here (a client's
next request would couple the pools)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from decodelab.components.placement import GIB
from decodelab.core import cost
from decodelab.core import kernel as K
from decodelab.core.build import Design, build
from decodelab.core.result import Result
from decodelab.errors import ConfigError, Infeasible
from decodelab.modes.resolve import with_fields
from decodelab.modes.serving import scheduler as SK
from decodelab.modes.serving.simulate import (
    PCTS,
    _pct,
    design_args,
    engine_inputs,
    kv_bytes_per_token_chip,
    latency_metrics,
    mixed_design,
    weighted_percentile,
)
from decodelab.modes.serving.workload import requests

ROUTINGS = ("round_robin",)
POOLS = ("prefill", "decode")


def check_disagg(cfg) -> None:
    """One line per bad field (ConfigError), naming it and what is allowed."""
    d, errors = cfg.disagg, []
    if d.routing not in ROUTINGS:
        errors.append(f"disagg.routing={d.routing!r} is not one of: {', '.join(ROUTINGS)}")
    for name in POOLS:
        pool = d[name]
        for f in ("tensor_parallel", "instances"):
            if not pool[f] >= 1:
                errors.append(f"disagg.{name}.{f}={pool[f]} must be >= 1")
    if not d.kv_link.bw_gb_s > 0:
        errors.append(f"disagg.kv_link.bw_gb_s={d.kv_link.bw_gb_s:g} must be > 0")
    if not d.kv_link.latency_us >= 0:
        errors.append(f"disagg.kv_link.latency_us={d.kv_link.latency_us:g} must be >= 0")
    if cfg.speculative.enabled:
        errors.append(
            "speculative.enabled=true with disagg.enabled=true: speculative serving is not modelled"
        )
    if cfg.workload.kind != "open_loop":
        errors.append(
            f"disagg.enabled=true with workload.kind={cfg.workload.kind!r}: disaggregated "
            "serving is modelled for open_loop only (workload=open_loop)"
        )
    if errors:
        raise ConfigError("\n".join(errors))


def pool_config(cfg, name: str):
    """The run's config with the pool's hardware and one instance: tensor_parallel chips."""
    pool = cfg.disagg[name]
    fields = {} if pool.hardware is None else {"hardware": pool.hardware}
    fields.update(
        {"hardware.tensor_parallel": pool.tensor_parallel, "hardware.n_chips": pool.tensor_parallel}
    )
    return with_fields(cfg, fields)


def pool_design(cfg, name: str) -> Tuple[object, Design, Design, list]:
    c = pool_config(cfg, name)
    try:
        design = build(c)
        mixed, notes = mixed_design(c, design)
    except (Infeasible, ConfigError) as e:
        kind = type(e)
        raise kind(f"{name} pool ({c.hardware.name}, tp{c.hardware.tensor_parallel}): {e}") from None
    return c, design, mixed, notes


def run_instance(
    pcfg, design: Design, mixed: Design, arrival, prompt, output, ready: bool, name: str
) -> Tuple[np.ndarray, np.ndarray]:
    """One engine instance: the scheduler over its requests (arrival order)."""
    try:
        eng, buckets, _ = engine_inputs(pcfg, design, prompt, output, ready)
    except Infeasible as e:
        raise Infeasible(f"{name} pool: {e}") from None
    args = design_args(pcfg, design, mixed)
    req, steps, status = SK.serve(*args, eng, buckets, arrival, prompt, output, np.zeros(len(prompt)))
    if status != 0:
        raise Infeasible(f"the {name} pool's scheduler could not place every request")
    return req, steps


def kept_tokens(prompt: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Prompt tokens whose KV the policy keeps after the prefill (scheduler.held_tokens at g = 1)."""
    n = np.minimum(prompt, caps[K.P_PROMPT_CAP]) if caps[K.P_PROMPT_CAP] > 0 else prompt.copy()
    return np.minimum(n, caps[K.P_TOTAL_CAP]) if caps[K.P_TOTAL_CAP] > 0 else n


def transfer_times(done, src, dst, rank_bytes, bw_gb_s: float, latency_us: float) -> np.ndarray:
    """When each request's KV is in its decode instance: FIFO by prefill end on the sending and
    the receiving instance's links (each chip's NIC carries its own shard: `rank_bytes`)."""
    send_free: Dict[int, float] = {}
    recv_free: Dict[int, float] = {}
    ready = np.empty(len(done))
    for k in np.argsort(done, kind="stable"):
        start = max(done[k], send_free.get(src[k], 0.0), recv_free.get(dst[k], 0.0))
        end = start + rank_bytes[k] / (bw_gb_s * 1e9)
        send_free[src[k]] = recv_free[dst[k]] = end
        ready[k] = end + latency_us * 1e-6
    return ready


def simulate_disagg(cfg) -> Dict[str, object]:
    """The three stages; every per-request array in the workload's request order."""
    check_disagg(cfg)
    arrival, prompt, output = requests(cfg.workload, cfg.model.max_context)
    n = len(prompt)
    pc, pd_, pm, notes = pool_design(cfg, "prefill")
    dc, dd, dm, more = pool_design(cfg, "decode")
    P, D = cfg.disagg.prefill.instances, cfg.disagg.decode.instances
    src, dst = np.arange(n) % P, np.arange(n) % D
    pre = np.full((n, SK.N_REQ), np.nan)
    pre_steps: List[np.ndarray] = []
    for i in range(P):
        idx = np.flatnonzero(src == i)
        if len(idx):
            r, s = run_instance(pc, pd_, pm, arrival[idx], prompt[idx], np.ones(len(idx)), False, "prefill")
            pre[idx] = r
            pre_steps.append(s)
    done = pre[:, SK.R_DONE]
    tokens = kept_tokens(prompt, pd_.kv_caps)
    bpt = (kv_bytes_per_token_chip(pd_), kv_bytes_per_token_chip(dd))
    link = cfg.disagg.kv_link
    ready = transfer_times(done, src, dst, tokens * max(bpt), link.bw_gb_s, link.latency_us)
    dec = np.full((n, SK.N_REQ), np.nan)
    dec_steps: List[np.ndarray] = []
    for i in range(D):
        idx = np.flatnonzero(dst == i)
        if len(idx):
            idx = idx[np.argsort(ready[idx], kind="stable")]
            r, s = run_instance(dc, dd, dm, ready[idx], prompt[idx], output[idx], True, "decode")
            dec[idx] = r
            dec_steps.append(s)
    return {
        "arrival": arrival,
        "prompt": prompt,
        "output": output,
        "prefill": pre,
        "decode": dec,
        "ready": ready,
        "kv_tokens": tokens,
        "kv_bytes": tokens * max(bpt),
        "prefill_steps": pre_steps,
        "decode_steps": dec_steps,
        "configs": (pc, dc),
        "designs": (pd_, dd),
        "notes": list(dict.fromkeys(notes + more)),
    }


def client_requests(sim) -> np.ndarray:
    """Per-request rows in the scheduler's layout as the client sees them: arrival, prefill start,
    first and last token from the decode instance, preemptions of both pools, the decode ITL."""
    pre, dec = sim["prefill"], sim["decode"]
    req = dec.copy()
    req[:, SK.R_ARRIVAL] = sim["arrival"]
    req[:, SK.R_START] = pre[:, SK.R_START]
    req[:, SK.R_PREEMPT] = pre[:, SK.R_PREEMPT] + dec[:, SK.R_PREEMPT]
    req[:, SK.R_FIRST_STEP] = req[:, SK.R_DONE_STEP] = np.nan  # steps of separate instances
    return req


def _busy_pct(steps: List[np.ndarray], instances: int, span: float) -> float:
    return 100.0 * sum(float(s[:, SK.T_DUR].sum()) for s in steps) / (instances * span)


def pool_cost(sim, chips: Dict[str, int], span: float, tokens: float) -> Dict[str, float]:
    """Energy and cost per token of both pools (core/cost.py's power model per pool: a chip draws
    tdp_w through kernel bodies, idle_w otherwise), when every pool's chip gives them."""
    hws = [c.hardware for c in sim["configs"]]
    busy = []
    for name, hw in zip(POOLS, hws):
        steps = np.vstack(sim[f"{name}_steps"])
        seconds = cost.busy_seconds(steps[:, SK.T_CAUSE : SK.T_CAUSE + len(K.CAUSES)].sum(0))
        busy.append(seconds / (chips[name] / hw.tensor_parallel * span))
    out: Dict[str, float] = {}
    if all(hw.tdp_w > 0 for hw in hws):
        watts = [cost.chip_power_w(hw, u) * chips[n] for n, hw, u in zip(POOLS, hws, busy)]
        out["energy_j_per_token"] = sum(watts) * span / tokens
    if all(hw.price_per_chip_hour > 0 for hw in hws):
        price = sum(hw.price_per_chip_hour * chips[n] for n, hw in zip(POOLS, hws))
        out["cost_per_mtok"] = price * span / 3600.0 / tokens * 1e6
    return out


def disagg_metrics(cfg, sim) -> Dict[str, float]:
    req = client_requests(sim)
    arrival, done = req[:, SK.R_ARRIVAL], req[:, SK.R_DONE]
    out_len = req[:, SK.R_OUTPUT]
    m, tpot = latency_metrics(req)
    pre_done = sim["prefill"][:, SK.R_DONE]
    _pct(pre_done - arrival, "prefill_ttft", m)
    xfer = sim["ready"] - pre_done
    m["kv_transfer_ms"] = float(np.mean(xfer)) * 1e3
    m["kv_transfer_p90_ms"] = float(np.percentile(xfer, 90)) * 1e3
    m["kv_transfer_mib"] = float(np.mean(sim["kv_bytes"])) / 2**20
    m["prefill_queue_ms"] = float(np.mean(sim["prefill"][:, SK.R_START] - arrival)) * 1e3
    m["decode_queue_ms"] = float(np.mean(sim["decode"][:, SK.R_START] - sim["ready"])) * 1e3
    m["queue_ms"] = m["prefill_queue_ms"] + m["decode_queue_ms"]
    dsteps = np.vstack(sim["decode_steps"])
    dur, decn = dsteps[:, SK.T_DUR], dsteps[:, SK.T_DECODE]
    m["itl_ms"] = float(np.sum(dur * decn) / max(decn.sum(), 1.0)) * 1e3
    for p in PCTS:
        m[f"itl_p{p}_ms"] = weighted_percentile(dur, decn, p) * 1e3
    span = float(done.max() - arrival.min())
    d = cfg.disagg
    chips = {name: d[name].tensor_parallel * d[name].instances for name in POOLS}
    n_chips = chips["prefill"] + chips["decode"]
    m["makespan_s"] = span
    m["n_requests"] = float(len(req))
    m["n_preemptions"] = float(req[:, SK.R_PREEMPT].sum())
    m["tok_s_system"] = float(out_len.sum()) / span
    # one deployment takes the whole arrival stream (no replicas of it): aggregate = system
    m["tok_s_aggregate"] = m["tok_s_system"]
    m["tok_s_user"] = float(np.mean(1.0 / tpot))
    m["requests_per_s"] = len(req) / span
    m["n_chips"] = float(n_chips)
    m["tok_s_per_chip"] = m["tok_s_system"] / n_chips
    m["requests_per_s_per_chip"] = m["requests_per_s"] / n_chips
    for name, steps in (("prefill", sim["prefill_steps"]), ("decode", sim["decode_steps"])):
        m[f"{name}_chips"] = float(chips[name])
        m[f"{name}_busy_pct"] = _busy_pct(steps, d[name].instances, span)
    m["decode_batch_mean"] = float(np.sum(dsteps[:, SK.T_SEQS] * dur)) / float(dur.sum())
    m["decode_batch_max"] = float(dsteps[:, SK.T_SEQS].max())
    m.update(pool_cost(sim, chips, span, float(out_len.sum())))
    dd = sim["designs"][1]
    m["kv_pool_gib"] = dd.memory["kv_pool_bytes"] / GIB
    kv_max = float(dsteps[:, SK.T_KV].max()) * kv_bytes_per_token_chip(dd) / GIB
    m["kv_mem_max_gib"] = kv_max
    m["kv_mem_max_pct"] = 100.0 * kv_max / max(m["kv_pool_gib"], 1e-30)
    return m


def evaluate_disagg(cfg, keep_steps: bool = True) -> Result:
    sim = simulate_disagg(cfg)
    pc, dc = sim["configs"]
    d = cfg.disagg
    notes = sim["notes"] + [
        f"disaggregated: {d.prefill.instances} x prefill {pc.hardware.name} tp{d.prefill.tensor_parallel}, "
        f"{d.decode.instances} x decode {dc.hardware.name} tp{d.decode.tensor_parallel}, KV over "
        f"{d.kv_link.bw_gb_s:g} GB/s per chip + {d.kv_link.latency_us:g} us (round robin in both pools)",
        "timeline: decode instance 0; TTFT counts the KV transfer (prefill_ttft_*: prefill end)",
    ]
    return Result(
        "ok",
        notes=notes,
        metrics=disagg_metrics(cfg, sim),
        serving={
            "requests": client_requests(sim),
            "steps": sim["decode_steps"][0] if keep_steps else None,
            "kv_bytes_per_token_chip": kv_bytes_per_token_chip(sim["designs"][1]),
        },
    )

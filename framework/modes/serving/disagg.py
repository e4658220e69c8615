"""Disaggregated prefill/decode serving (disagg.enabled; docs/model.md, "Disaggregated serving").

A prefill pool and a decode pool, each `instances` engines of `tensor_parallel` chips of its own
hardware, with their own parallel split (`attention_dp` groups, `moe_mapping`), batch cap
(`max_batch`) and engine settings (`engine`) (modes/serving/disagg_pools.py: a pool has
instances x groups ranks, each one Numba scheduler), run the workload in three stages:

1. prefill: open loop: request k goes to prefill rank k mod (P x groups) (round robin in arrival
   order, as vLLM's disaggregation proxy and Dynamo's default router cycle their instances);
   each rank is the scheduler (modes/serving/scheduler.py) on its requests with one output
   token: prefill-only steps, the prompt's KV held until the prefill ends.
2. KV transfer: request k's decode rank is k mod (D x groups). Its prompt's KV (the tokens the KV
   policy keeps, x the KV bytes per token of each chip) crosses `kv_link`: every chip has its
   own NIC, so the ranks move their shards in parallel and a transfer lasts
   latency + tokens x max(bytes/token per prefill chip, per decode chip) / bw_gb_s. The sending
   and receiving ranks' links carry one transfer at a time (FIFO by prefill end).
3. decode: each decode rank is the same scheduler with Eng.READY (requests arrive with their
   KV in the cache at prefill end + transfer): its first step over a request attends the prompt
   and emits the first token the client sees (the decode instance streams every token), then
   continuous batching of decode steps.

A closed loop (workload=closed_loop: the benchmark clients) couples the pools: a client sends
its next request when the decode pool ends the last one; modes/serving/disagg_closed.py solves it
(one decode rank for all, the prefill delays as a fixed point).

TTFT = first token from the decode instance - arrival (includes prefill, the KV transfer and the
decode queue); `prefill_ttft_*` = prefill end - arrival (DistServe's TTFT). TPOT = (last token -
first token) / (output - 1) on the decode pool."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from decodelab.components.placement import GIB
from decodelab.core import cost
from decodelab.core.result import Result
from decodelab.errors import ConfigError
from decodelab.modes.serving import frontend
from decodelab.modes.serving.disagg_closed import simulate_closed
from decodelab.modes.serving.disagg_pools import (
    POOLS,
    check_pools,
    groups,
    kept_tokens,
    pool_design,
    run_ranks,
    transfer_times,
)
from decodelab.modes.serving.metrics import (
    PCTS,
    kv_bytes_per_token_chip,
    latency_metrics,
    pct,
    weighted_percentile,
)
from decodelab.modes.serving.workload import requests
from decodelab.kernel_layout import CAUSES
from decodelab.modes.serving.layout import Req, StepLog

ROUTINGS = ("round_robin",)
LOOPS = ("open_loop", "closed_loop")


def check_disagg(cfg) -> None:
    """One line per bad field (ConfigError), naming it and what is allowed."""
    d, w, errors = cfg.disagg, cfg.workload, []
    if d.routing not in ROUTINGS:
        errors.append(f"disagg.routing={d.routing!r} is not one of: {', '.join(ROUTINGS)}")
    check_pools(cfg, errors)
    if not d.kv_link.bw_gb_s > 0:
        errors.append(f"disagg.kv_link.bw_gb_s={d.kv_link.bw_gb_s:g} must be > 0")
    if not d.kv_link.latency_us >= 0:
        errors.append(f"disagg.kv_link.latency_us={d.kv_link.latency_us:g} must be >= 0")
    if cfg.speculative.enabled:
        errors.append(
            "speculative.enabled=true with disagg.enabled=true: speculative serving is not modelled"
        )
    if w.kind not in LOOPS:
        errors.append(
            f"disagg.enabled=true with workload.kind={w.kind!r}: disaggregated serving is modelled "
            "for open_loop and closed_loop (workload=open_loop or workload=closed_loop)"
        )
    elif w.kind == "closed_loop" and w.warmup_requests > 0 and not w.warmup_drain:
        errors.append(
            "workload.warmup_drain=false with disagg.enabled=true: warm-up requests in the same closed "
            "loop are not modelled with disaggregated pools (warmup_drain=true: they end before it starts)"
        )
    if errors:
        raise ConfigError("\n".join(errors))


def simulate_open(cfg) -> Dict[str, object]:
    """The three stages of an open loop; every per-request array in the workload's request order."""
    arrival, prompt, output = requests(cfg.workload, cfg.model.max_context)
    n = len(prompt)
    ppool, notes = pool_design(cfg, "prefill")
    dpool, more = pool_design(cfg, "decode")
    (pc, pd_), (dc, dd) = ppool[:2], dpool[:2]
    P = cfg.disagg.prefill.instances * groups(pc)
    D = cfg.disagg.decode.instances * groups(dc)
    src, dst = np.arange(n) % P, np.arange(n) % D
    # at the prefill pool after the front end (engine.frontend; no tokenizer queue: frontend.py)
    sent = arrival + frontend.delays(cfg.engine, cfg.workload, prompt)
    pre, pre_steps = run_ranks(ppool, src, sent, prompt, np.ones(n), False, "prefill")
    done = pre[:, Req.DONE]
    tokens = kept_tokens(prompt, pd_.kv_caps)
    bpt = (kv_bytes_per_token_chip(pd_), kv_bytes_per_token_chip(dd))
    link = cfg.disagg.kv_link
    ready = transfer_times(done, src, dst, tokens * max(bpt), link.bw_gb_s, link.latency_us)
    dec, dec_steps = run_ranks(dpool, dst, ready, prompt, output, True, "decode")
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
        "units": {"prefill": P, "decode": D},
    }


def simulate_disagg(cfg) -> Dict[str, object]:
    """The open or the closed loop (modes/serving/disagg_closed.py) over both pools."""
    check_disagg(cfg)
    return simulate_closed(cfg) if cfg.workload.kind == "closed_loop" else simulate_open(cfg)


def client_requests(sim) -> np.ndarray:
    """Per-request rows in the scheduler's layout as the client sees them: arrival, prefill start,
    first and last token from the decode instance, preemptions of both pools, the decode ITL."""
    pre, dec = sim["prefill"], sim["decode"]
    req = dec.copy()
    req[:, Req.ARRIVAL] = sim["arrival"]
    req[:, Req.START] = pre[:, Req.START]
    req[:, Req.PREEMPT] = pre[:, Req.PREEMPT] + dec[:, Req.PREEMPT]
    req[:, Req.FIRST_STEP] = req[:, Req.DONE_STEP] = np.nan  # steps of separate instances
    return req


def pool_steps(sim, name: str) -> Tuple[np.ndarray, np.ndarray]:
    """The pool's simulated ranks' steps, stacked, and each step's weight: the ranks its rank stands
    for (`<name>_step_weights`, the closed loop's decode rank kinds; else 1)."""
    parts = sim[f"{name}_steps"]
    weights = sim.get(f"{name}_step_weights") or [1] * len(parts)
    return np.vstack(parts), np.concatenate([np.full(len(p), float(w)) for p, w in zip(parts, weights)])


def busy_fraction(sim, name: str, span: float, kernels: bool = False) -> float:
    """Mean busy fraction of the pool's simulated ranks over the makespan, each weighed by the ranks it
    stands for: step time, or (kernels) kernel-body time (core/cost.py busy_seconds), per rank."""
    steps, w = pool_steps(sim, name)
    if kernels:
        seconds = cost.busy_seconds(w @ steps[:, StepLog.CAUSE : StepLog.CAUSE + len(CAUSES)])
    else:
        seconds = float(w @ steps[:, StepLog.DUR])
    return seconds / (sim["units"][name] * span)


def pool_cost(sim, chips: Dict[str, int], span: float, tokens: float) -> Dict[str, float]:
    """Energy and cost per token of both pools (core/cost.py's power model per pool: a chip draws
    tdp_w through kernel bodies, idle_w otherwise), when every pool's chip gives them."""
    hws = [c.hardware for c in sim["configs"]]
    busy = [busy_fraction(sim, name, span, kernels=True) for name in POOLS]
    out: Dict[str, float] = {}
    if all(hw.tdp_w > 0 for hw in hws):
        watts = [cost.chip_power_w(hw, u) * chips[n] for n, hw, u in zip(POOLS, hws, busy)]
        out["energy_j_per_token"] = sum(watts) * span / tokens
    if all(hw.price_per_chip_hour > 0 for hw in hws):
        price = sum(hw.price_per_chip_hour * chips[n] for n, hw in zip(POOLS, hws))
        out["cost_per_mtok"] = price * span / 3600.0 / tokens * 1e6
    return out


def rate_metrics(cfg, sim, req, tpot, span: float) -> Dict[str, float]:
    """Throughput, chips and busy time of both pools (a closed loop's `req` holds each simulated decode
    rank's requests once per rank it stands for: disagg_closed.expand)."""
    d = cfg.disagg
    chips = {name: d[name].tensor_parallel * d[name].instances for name in POOLS}
    n_chips = chips["prefill"] + chips["decode"]
    tokens = float(req[:, Req.OUTPUT].sum())
    m = {"makespan_s": span, "n_requests": float(len(req))}
    m["n_preemptions"] = float(req[:, Req.PREEMPT].sum())
    m["tok_s_system"] = tokens / span
    # one deployment takes the whole arrival stream (no replicas of it): aggregate = system
    m["tok_s_aggregate"] = m["tok_s_system"]
    m["tok_s_user"] = float(np.mean(1.0 / tpot))
    m["requests_per_s"] = len(req) / span
    m["n_chips"] = float(n_chips)
    m["tok_s_per_chip"] = m["tok_s_system"] / n_chips
    m["requests_per_s_per_chip"] = m["requests_per_s"] / n_chips
    for name in POOLS:
        m[f"{name}_chips"] = float(chips[name])
        m[f"{name}_busy_pct"] = 100.0 * busy_fraction(sim, name, span)
    m.update(pool_cost(sim, chips, span, tokens))
    return m


def disagg_metrics(cfg, sim) -> Dict[str, float]:
    req = client_requests(sim)
    arrival, done = req[:, Req.ARRIVAL], req[:, Req.DONE]
    m, tpot = latency_metrics(req)
    pre_done = sim["prefill"][:, Req.DONE]
    pct(pre_done - arrival, "prefill_ttft", m)
    xfer = sim["ready"] - pre_done
    m["kv_transfer_ms"] = float(np.mean(xfer)) * 1e3
    m["kv_transfer_p90_ms"] = float(np.percentile(xfer, 90)) * 1e3
    m["kv_transfer_mib"] = float(np.mean(sim["kv_bytes"])) / 2**20
    m["prefill_queue_ms"] = float(np.mean(sim["prefill"][:, Req.START] - arrival)) * 1e3
    m["decode_queue_ms"] = float(np.mean(sim["decode"][:, Req.START] - sim["ready"])) * 1e3
    m["queue_ms"] = m["prefill_queue_ms"] + m["decode_queue_ms"]
    dsteps, w = pool_steps(sim, "decode")
    dur, decn = dsteps[:, StepLog.DUR], w * dsteps[:, StepLog.DECODE]
    m["itl_ms"] = float(np.sum(dur * decn) / max(decn.sum(), 1.0)) * 1e3
    for p in PCTS:
        m[f"itl_p{p}_ms"] = weighted_percentile(dur, decn, p) * 1e3
    m.update(rate_metrics(cfg, sim, req, tpot, float(done.max() - arrival.min())))
    m["decode_batch_mean"] = float(np.sum(w * dsteps[:, StepLog.SEQS] * dur)) / float(np.sum(w * dur))
    m["decode_batch_max"] = float(dsteps[:, StepLog.SEQS].max())
    dd = sim["designs"][1]
    m["kv_pool_gib"] = dd.memory["kv_pool_bytes"] / GIB
    kv_max = float(dsteps[:, StepLog.KV].max()) * kv_bytes_per_token_chip(dd) / GIB
    m["kv_mem_max_gib"] = kv_max
    m["kv_mem_max_pct"] = 100.0 * kv_max / max(m["kv_pool_gib"], 1e-30)
    if "rounds" in sim:
        m["disagg_rounds"] = float(sim["rounds"])
    return m


def split(pool) -> str:
    """A pool's split for notes: tp, then attention groups, expert mapping and batch cap where set."""
    out = f"tp{pool.tensor_parallel}" + (f" adp{pool.attention_dp}" if pool.attention_dp > 1 else "")
    out += (
        f" moe {pool.moe_mapping}" + (f" ep{pool.moe_ep}" if pool.moe_ep else "") if pool.moe_mapping else ""
    )
    return out + (f" batch {pool.max_batch}" if pool.max_batch > 0 else "")


def evaluate_disagg(cfg, keep_steps: bool = True) -> Result:
    sim = simulate_disagg(cfg)
    pc, dc = sim["configs"]
    d = cfg.disagg
    notes = sim["notes"] + [
        f"disaggregated: {d.prefill.instances} x prefill {pc.hardware.name} {split(d.prefill)}, "
        f"{d.decode.instances} x decode {dc.hardware.name} {split(d.decode)}, KV over "
        f"{d.kv_link.bw_gb_s:g} GB/s per chip + {d.kv_link.latency_us:g} us (round robin in both pools)",
        "timeline: decode rank 0; TTFT counts the KV transfer (prefill_ttft_*: prefill end)",
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

"""Composition of Experts evaluation (`coe.enabled=true`, conf/coe/; docs/coe.md).

The router and the expert are ordinary designs on the same hardware: their times come from
`decodelab.modes.single.evaluate_single` (the decode model) and their memory from
`decodelab.core.build.build`.
components/coe.py then places the experts in the memory hierarchy, routes a stream of batches
through an HBM expert cache and adds up routing, switching and execution per batch."""

from __future__ import annotations

import json
import math
from typing import Any, Dict

from omegaconf.errors import MissingMandatoryValue

from decodelab.components import coe as C
from decodelab.components.placement import GIB
from decodelab.errors import ConfigError, Infeasible
from decodelab.core.build import build
from decodelab.core.result import Result
from decodelab.core.schema import memory_tiers
from decodelab.modes.resolve import with_fields
from decodelab.modes.single import evaluate_single

DEFAULT_PLOT_SWEEP = "c12_latency_vs_experts.yaml"


def check_coe(c, hw) -> None:
    """One line per bad `coe.*` field (or copy bandwidth) (ConfigError)."""
    e = []
    for n in ("n_experts", "batch_size", "prompt_len", "n_batches"):
        if not getattr(c, n) >= 1:
            e.append(f"coe.{n}={getattr(c, n)} must be >= 1")
    if c.output_len < 2:
        e.append(f"coe.output_len={c.output_len} must be >= 2 (the prefill emits the first token)")
    if c.routing not in C.ROUTINGS:
        e.append(f"coe.routing={c.routing!r} is not one of: {', '.join(C.ROUTINGS)}")
    if c.routing == "zipf" and not c.zipf_s > 0:
        e.append(f"coe.zipf_s={c.zipf_s} must be > 0")
    if not hw.backing_copy_gb_s >= 0:
        e.append(f"hardware.backing_copy_gb_s={hw.backing_copy_gb_s} must be >= 0")
    if not c.seed >= 0:
        e.append(f"coe.seed={c.seed} must be >= 0 (numpy random seed)")
    if c.hbm_cache not in C.HBM_CACHES:
        e.append(f"coe.hbm_cache={c.hbm_cache!r} is not one of: {', '.join(C.HBM_CACHES)}")
    if e:
        raise ConfigError("\n".join(e))


def _sub_cfg(cfg, model, batch: int, prompt_len: int, output_len: int):
    """A plain single-model config: `model` on the same hardware, options and dtypes."""
    fields = {
        "model": model,
        "workload.batch_size": batch,
        "workload.prompt_len": prompt_len,
        "workload.output_len": output_len,
        "coe.enabled": False,
        "speculative.enabled": False,
    }
    if "kind" in cfg.workload:  # serving simulations: one static batch here
        fields["workload.kind"] = "static"
    return with_fields(cfg, fields)


_MEMO: Dict[str, Any] = {}  # resolved sub-config -> (result, design): sweeps over n_experts
# or routing re-use the router and expert runs


def _run(cfg, what: str):
    key = json.dumps(cfg, sort_keys=True, default=str)
    if key not in _MEMO:
        res = evaluate_single(cfg, keep_steps=False)
        if len(_MEMO) >= 64:
            _MEMO.clear()
        _MEMO[key] = (res, build(cfg) if res["status"] == "ok" else None)
    res, design = _MEMO[key]
    if res["status"] == "invalid":
        raise ConfigError(f"{what}: {res['reason']}")
    if res["status"] != "ok":
        raise Infeasible(f"{what}: {res['reason']}")
    return res, design


def _coe(cfg) -> Result:
    c, hw = cfg.coe, cfg.hardware
    check_coe(c, hw)
    probs = C.routing_probs(c.routing, c.n_experts, c.zipf_s, c.weights)
    ex_res, ex = _run(_sub_cfg(cfg, c.expert, 1, c.prompt_len, c.output_len), f"coe.expert ({c.expert.name})")
    ro_res, ro = _run(_sub_cfg(cfg, c.router, c.batch_size, c.prompt_len, 2), f"coe.router ({c.router.name})")
    tp = hw.tensor_parallel
    groups = max(1, hw.n_chips // tp)
    shard = ex.weight_bytes_total / tp  # one expert on each chip of the group
    expert_kv = max(0.0, sum(ex.memory["used"].values()) - shard)
    reserved = sum(ro.memory["used"].values()) + expert_kv  # router + KV caches stay in HBM
    h = C.hierarchy(memory_tiers(hw), hw.backing_copy_gb_s, shard, reserved, groups)
    if h["experts_hbm"] < 1:
        raise Infeasible(
            f"router ({c.router.name}) + one expert ({c.expert.name}) + KV do not fit "
            f"HBM: {(reserved + shard) / GIB:.1f} GiB per chip needed"
        )
    n = c.n_experts
    if n > h["experts_max"]:
        where = (
            f"and {h['experts_backing']} in {h['backing']}"
            if h["backing"]
            else "and has no backing tier (ddr or host) with a copy path into HBM "
            "(hardware.backing_copy_gb_s)"
        )
        raise Infeasible(
            f"out of memory: {n} experts of {shard * tp / GIB:.2f} GiB; {hw.name} holds "
            f"{h['experts_hbm']} in HBM {where}"
        )
    exec_s = ex_res["metrics"]["e2e_ms"] / 1e3  # prefill + output_len - 1 decode steps
    router_s = ro_res["metrics"]["ttft_ms"] / 1e3  # one forward pass over the batch
    spilled = n > h["experts_hbm"]
    slots = C.cache_slots(c.hbm_cache, c.batch_size, h["experts_hbm"])
    sim = C.simulate(probs, c.batch_size, c.n_batches, slots, not spilled, c.seed)
    lat = C.batch_latency(router_s, exec_s, h["switch_s"], sim["switches"], c.batch_size)
    served = h["experts_max"] if h["switch_s"] <= exec_s else h["experts_hbm"]
    accesses = sim["hits"] + sim["misses"]
    m = dict(ex_res["metrics"])  # one (prompt, expert) run, batch 1
    m.update(
        {
            "coe_latency_ms": float(lat["total"].mean() * 1e3),
            "coe_latency_max_ms": float(lat["total"].max() * 1e3),
            "coe_latency_per_prompt_ms": float(lat["total"].mean() * 1e3 / c.batch_size),
            "coe_routing_ms": float(lat["routing"].mean() * 1e3),
            "coe_switching_ms": float(lat["switching"].mean() * 1e3),
            "coe_execution_ms": float(lat["execution"].mean() * 1e3),
            "coe_router_ms": router_s * 1e3,
            "coe_expert_ms": exec_s * 1e3,
            "coe_switch_ms": h["switch_s"] * 1e3 if h["backing"] else 0.0,
            "coe_copy_gb_s": h["copy_bytes_s"] * tp * groups / 1e9,
            "coe_switches_per_batch": float(sim["switches"].mean()),
            "coe_hit_rate": sim["hits"] / accesses if accesses else 1.0,
            "coe_evictions_per_batch": sim["evictions"] / c.n_batches,
            "coe_expert_gib": shard * tp / GIB,
            "coe_hbm_slots": float(h["experts_hbm"] if not spilled else slots),
            "coe_experts_hbm": float(h["experts_hbm"]),
            "coe_experts_backing": float(h["experts_backing"]),
            "coe_experts_max": float(h["experts_max"]),
            "coe_experts_served": float(served),
            "coe_systems_needed": float(math.ceil(n / served)),
            "coe_spilled": 1.0 if spilled else 0.0,
        }
    )
    notes = [
        f"CoE {n} x {c.expert.name} + router {c.router.name}, batch {c.batch_size} x "
        f"({c.prompt_len}+{c.output_len}): {m['coe_latency_ms']:.0f} ms per batch = routing "
        f"{m['coe_routing_ms']:.0f} + switching {m['coe_switching_ms']:.0f} "
        f"({m['coe_switches_per_batch']:.1f} x {m['coe_switch_ms']:.1f} ms) + execution "
        f"{m['coe_execution_ms']:.0f} ms; the table above is one (prompt, expert) run",
        f"CoE memory: {h['experts_hbm']} experts fit HBM"
        + (f", {h['experts_backing']} fit {h['backing']}" if h["backing"] else "")
        + (f"; spilled: HBM holds {slots} ({c.hbm_cache})" if spilled else "; all resident"),
    ]
    notes.append(
        "CoE: coe.batch_size, coe.prompt_len and coe.output_len define the requests "
        "(workload batch/prompt/output and speculative decoding are not used)"
    )
    return Result("ok", metrics=m, notes=notes + list(ex_res["notes"]))


def evaluate_coe(cfg, keep_steps: bool = True) -> Result:
    """The CoE Result (metrics of one (prompt, expert) run plus the coe_* figures). Never raises."""
    try:
        return _coe(cfg)
    except ConfigError as e:
        return Result.invalid(str(e))
    except MissingMandatoryValue as e:
        return Result.invalid(str(e).splitlines()[0])
    except Infeasible as e:
        return Result.infeasible(str(e))

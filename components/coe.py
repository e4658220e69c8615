"""Composition of Experts (Samba-CoE: SN40L paper, arXiv 2405.07518, Sec. II and VI-C) as plain
data and arithmetic: the routing distribution over experts, where experts live in a system's
memory hierarchy and how many it can hold, the time to switch one expert into HBM, and the
per-batch latency of a stream of routed batches.

A batch of B prompts is served as the paper describes: the router runs once on the whole batch,
then each (prompt, expert) pair runs in turn; an expert that is not resident in HBM is first
copied in from the backing tier (DDR on SN40L, host DRAM on a DGX). The execution times of the
router and of one (prompt, expert) pair come from the decode model (framework/modes/coe.py passes
them in); nothing here knows about hardware names, Hydra or the kernel.

All capacities are per chip of one tensor-parallel group: an expert is sharded over the group's
`tp` chips, so it takes `shard_bytes = expert weights / tp` on every chip of the group.
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence

import numpy as np

from decodelab.components.expert_cache import ExpertCache
from decodelab.errors import ConfigError

ROUTINGS = ("uniform", "zipf", "list")
HBM_CACHES = ("batch", "lru")


def routing_probs(kind: str, n: int, zipf_s: float = 1.0, weights: Sequence[float] = ()) -> np.ndarray:
    """P(a prompt is routed to expert i), i = 0..n-1 (expert 0 the most used for zipf)."""
    if kind == "uniform":
        return np.full(n, 1.0 / n)
    if kind == "zipf":
        p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** zipf_s
        return p / p.sum()
    if kind == "list":
        w = np.asarray(list(weights), dtype=np.float64)
        if len(w) != n:
            raise ConfigError(
                f"coe.weights has {len(w)} entries; routing=list needs one per expert (coe.n_experts={n})"
            )
        if not (np.all(np.isfinite(w)) and np.all(w >= 0) and w.sum() > 0):
            raise ConfigError("coe.weights must be finite, >= 0 and not all 0")
        return w / w.sum()
    raise ConfigError(f"coe.routing={kind!r} is not one of: {', '.join(ROUTINGS)}")


BACKING_TIERS = ("ddr", "host")


def hierarchy(tiers, copy_gb_s: float, shard_bytes: float, reserved_hbm_bytes: float, groups: int) -> Dict:
    """Where experts live. `tiers`: the hardware's memory tiers (name, capacity_gib per chip);
    `copy_gb_s`: per-chip bandwidth of copies from the backing tier into HBM (0: no copy path);
    `reserved_hbm_bytes`: HBM per chip taken by the router and the KV caches (always in HBM).
    The backing tier is the first `ddr` or `host` tier; once the experts do not all fit in HBM it
    holds every expert and HBM holds copies of some."""
    gib = float(2**30)
    hbm = next(t for t in tiers if t.name == "hbm")
    free = hbm.capacity_gib * gib - reserved_hbm_bytes
    experts_hbm = groups * max(0, math.floor(free / shard_bytes))
    backing = next((t for t in tiers if t.name in BACKING_TIERS), None)
    if backing is None or not copy_gb_s > 0:
        return {
            "experts_hbm": experts_hbm,
            "experts_backing": 0,
            "experts_max": experts_hbm,
            "backing": "",
            "switch_s": math.inf,
            "copy_bytes_s": 0.0,
        }
    experts_backing = groups * math.floor(backing.capacity_gib * gib / shard_bytes)
    return {
        "experts_hbm": experts_hbm,
        "experts_backing": experts_backing,
        "experts_max": max(experts_hbm, experts_backing),
        "backing": backing.name,
        "switch_s": shard_bytes / (copy_gb_s * 1e9),
        "copy_bytes_s": copy_gb_s * 1e9,
    }


def cache_slots(policy: str, batch_size: int, experts_hbm: int) -> int:
    """HBM expert slots once experts spill: `batch` keeps the batch's experts only (the paper's
    flow: route, copy the required experts, run each pair); `lru` uses every free HBM slot."""
    if policy not in HBM_CACHES:
        raise ConfigError(f"coe.hbm_cache={policy!r} is not one of: {', '.join(HBM_CACHES)}")
    return max(1, min(batch_size if policy == "batch" else experts_hbm, experts_hbm))


def simulate(
    probs: np.ndarray, batch_size: int, n_batches: int, slots: int, all_resident: bool, seed: int
) -> Dict:
    """Route `n_batches` batches (after a warm-up) and count expert switches per batch.
    all_resident: every expert is in HBM (no switch ever). Otherwise HBM holds an LRU cache of
    `slots` experts, pre-loaded with the most used ones (the placement a server starts from).
    Per batch the experts already resident are used first, then each missing distinct expert is
    copied once (SN40L paper Sec. VI-C: route, copy the required experts, run each pair)."""
    if all_resident:
        return {"switches": np.zeros(n_batches), "hits": n_batches * batch_size, "misses": 0, "evictions": 0}
    rng = np.random.default_rng(seed)
    n = len(probs)
    order = np.argsort(-probs, kind="stable")
    cache = ExpertCache(slots, resident=order[:slots][::-1])  # most used = most recent
    warmup = max(1, math.ceil(slots / batch_size))
    draws = rng.choice(n, size=(warmup + n_batches, batch_size), p=probs)
    switches: List[int] = []
    for i, batch in enumerate(draws):
        if i == warmup:
            cache.hits = cache.misses = cache.evictions = 0
        # the paper's flow: route the whole batch, keep the resident experts it needs, copy
        # each missing one once (so a copy never evicts an expert the same batch needs)
        needed = list(dict.fromkeys(int(e) for e in batch))
        missing = [e for e in needed if e not in cache]
        for e in needed:
            if e in cache:
                cache.access(e)
        misses = sum(0 if cache.access(e) else 1 for e in missing)
        cache.hits += len(batch) - len(needed)  # later prompts for an expert just used
        if i >= warmup:
            switches.append(misses)
    return {
        "switches": np.asarray(switches, dtype=np.float64),
        "hits": cache.hits,
        "misses": cache.misses,
        "evictions": cache.evictions,
    }


def batch_latency(
    router_s: float, exec_s: float, switch_s: float, switches: np.ndarray, batch_size: int
) -> Dict[str, np.ndarray]:
    """Per batch: router once, `switches` expert copies, `batch_size` (prompt, expert) runs."""
    n = len(switches)
    routing = np.full(n, router_s)
    switching = switches * (switch_s if switches.any() else 0.0)
    execution = np.full(n, batch_size * exec_s)
    return {
        "routing": routing,
        "switching": switching,
        "execution": execution,
        "total": routing + switching + execution,
    }

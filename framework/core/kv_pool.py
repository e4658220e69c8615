"""A serving engine's KV pool per chip (engine.kv_mem_fraction, kv_mem_basis; docs/model.md, "Serving: continuous
batching"): the HBM the weights and the start-up profile's activations (core/profile_reserve.py) leave, and under
pipeline parallelism the stage whose pool holds the fewest tokens. Nothing here is Hydra-specific."""

from __future__ import annotations

from typing import List, Tuple

from decodelab.components.placement import GIB
from decodelab.core import kv_costs, parallel, profile_reserve
from decodelab.errors import ConfigError


def kv_pool_bytes(cfg, tiers, weight_bytes_chip: float, profile_bytes: float = 0.0) -> float:
    """Per-chip KV pool of a serving engine (weights are placed in HBM first; KV blocks live in
    HBM): `engine.kv_mem_fraction` of the HBM the weights and the start-up profile's activations
    (`profile_bytes`: core/profile_reserve.py) leave free (kv_mem_basis free), of the whole HBM
    less both (total), or the HBM less the weights and the engine's reserve for activations and
    graphs (reserve: SGLang's own rule, which `profile_bytes` does not add to)."""
    f = cfg.engine.kv_mem_fraction
    if not 0.0 < f <= 1.0:
        raise ConfigError(f"engine.kv_mem_fraction={f} must be in (0, 1]")
    basis = getattr(cfg.engine, "kv_mem_basis", "free")
    if basis not in ("free", "total", "reserve"):
        raise ConfigError(f"engine.kv_mem_basis={basis!r} is not one of: free, total, reserve")
    hbm = next((t for t in tiers if t.name == "hbm"), None)
    if hbm is None:
        return 0.0
    if basis == "total":  # vLLM gpu_memory_utilization: weights and KV share f of the whole HBM
        return max(0.0, f * hbm.capacity_gib * GIB - weight_bytes_chip - profile_bytes)
    if basis == "reserve":  # SGLang: mem_fraction_static = (HBM - reserved) / HBM for weights + KV
        e = cfg.engine
        reserve = e.kv_reserve_gib + e.kv_reserve_gib_per_gpu * parallel.replica_chips(cfg.hardware)
        groups = parallel.serving_groups(cfg)
        if groups > 1:  # the engine's own reserve under data-parallel attention
            dpa = e.dp_attention
            reserve += dpa.reserve_gib + dpa.reserve_gib_per_group * groups
        if not reserve >= 0.0:
            raise ConfigError(
                f"engine.kv_reserve_gib + kv_reserve_gib_per_gpu x GPUs = {reserve} must be >= 0"
            )
        return max(0.0, (hbm.capacity_gib - reserve) * GIB - weight_bytes_chip)
    return f * max(0.0, hbm.capacity_gib * GIB - weight_bytes_chip - profile_bytes)


def serving_pool(
    cfg, tiers, loads: List[tuple], ops, act_bytes: float, state: float
) -> Tuple[int, float, List[str]]:
    """(the stage whose pool holds the fewest tokens, its pool bytes per chip, notes) of a serving design:
    `loads` are the stages' (weight bytes, KV bytes a token) per chip (core/parallel.py stage_loads), `state`
    the linear layers' states of one sequence; the start-up profile's activations per stage (the last one
    samples) and the states' own pool come out of each."""
    prof = [
        profile_reserve.reserve_bytes(cfg, ops, act_bytes, i == len(loads) - 1) for i in range(len(loads))
    ]
    pools = [kv_pool_bytes(cfg, tiers, x[0], r) for x, r in zip(loads, prof)]
    pools = [kv_costs.less_state_pool(p, state, cfg.engine) for p in pools]
    i = min(range(len(loads)), key=lambda j: pools[j] / max(loads[j][1], 1e-30))
    notes = []
    if prof[i] > 0.0:
        notes.append(
            f"KV pool: {prof[i] / GIB:.2f} GiB per chip kept for the engine's start-up profile "
            "(engine.profile_reserve: core/profile_reserve.py)"
        )
    return i, pools[i], notes

"""Shared arithmetic of the KV policies: the model's KV shape and the cost of SnapKV-style
selection at prefill. Plain Python over a model config (attribute access); no Hydra.

Units: a "token" of the cache is one token's K and V in one layer for every KV head (MLA: one
latent of kv_lora_rank + qk_rope_head_dim per layer, shared by all heads). Token counts the
policies return are per sequence and per KV head, averaged over layers.
"""

from __future__ import annotations

import math
from typing import Dict, List

GRANULARITIES = ("query_head", "kv_head", "layer")
POOLINGS = ("avg", "max", "none")
SCORE_BYTES = 4.0  # scores are accumulated in FP32


def is_mla(m) -> bool:
    return getattr(m, "kv_lora_rank", 0) > 0


def kv_shape(m) -> Dict[str, float]:
    """L layers, H query heads, Hkv KV heads (MLA: 1 shared latent), dk key elements per KV head
    (what scoring reads; MLA: the whole latent + rope key, the absorbed query is in that space),
    kv elements per token and layer over all KV heads, G = query heads per KV head."""
    if is_mla(m):
        lat = m.kv_lora_rank + m.qk_rope_head_dim
        return {"L": m.n_layers, "H": m.n_heads, "Hkv": 1, "dk": lat, "dq": lat, "kv_elems": lat, "G": 1}
    return {
        "L": m.n_layers,
        "H": m.n_heads,
        "Hkv": m.n_kv_heads,
        "dk": m.head_dim,
        "dq": m.head_dim,
        "kv_elems": 2 * m.n_kv_heads * m.head_dim,
        "G": m.n_heads // max(m.n_kv_heads, 1),
    }


def group(pol, m) -> int:
    """Query heads whose separate selections one KV head must hold (1 unless per query head)."""
    if m is None or pol.granularity != "query_head":
        return 1
    return kv_shape(m)["G"]


def union_kept(shared: float, selected: float, g: int) -> float:
    """Tokens a KV head holds when `shared` tokens (sinks, window, ring) are common to its g query
    heads and each query head selects `selected` tokens of its own: at most shared + g * selected
    (disjoint selections; identical selections give shared + selected)."""
    return shared + g * selected


def h_sel(pol, m) -> float:
    """Selecting heads per layer: H (per query head), Hkv (per KV head) or 1 (per layer)."""
    s = kv_shape(m)
    return {"query_head": s["H"], "kv_head": s["Hkv"], "layer": 1}[pol.granularity]


def check_granularity(pol, m, errors: List[str]) -> None:
    if pol.granularity not in GRANULARITIES:
        errors.append(f"kv_policy.granularity={pol.granularity!r} is not one of: {', '.join(GRANULARITIES)}")
    elif pol.granularity == "query_head" and m is not None and is_mla(m):
        errors.append(
            "kv_policy.granularity='query_head' is not possible with MLA "
            f"({m.name}): one latent per layer is shared by all heads; use layer or kv_head"
        )


def check_selection(pol, m, errors: List[str]) -> None:
    """Fields of SnapKV-style selection (SnapKV, PyramidKV, SnapStream)."""
    check_granularity(pol, m, errors)
    if pol.pooling not in POOLINGS:
        errors.append(f"kv_policy.pooling={pol.pooling!r} is not one of: {', '.join(POOLINGS)}")
    if pol.pool_kernel < 1 or (pol.pooling != "none" and pol.pool_kernel % 2 == 0):
        errors.append(
            f"kv_policy.pool_kernel={pol.pool_kernel} must be an odd number >= 1 (centred 1-D pooling)"
        )
    if pol.obs_window < 1:
        errors.append(f"kv_policy.obs_window={pol.obs_window} must be >= 1 (queries that score the prompt)")


def scoring_cost(
    pol, m, prompt_len: float, kept: float, kv_bytes: float = 2.0, act_bytes: float = 2.0
) -> Dict[str, float]:
    """FLOPs and HBM bytes of SnapKV scoring for one sequence, whole model (all layers, all
    chips). Per layer, with w = obs_window, P = prompt:
      FLOPs = w P H (2 dq + 6)          window queries x prompt keys (QK^T), softmax (~5), sum over w
            + P H [+ P H_sel (k + 1)]    group averaging; pooling (kernel k) and a linear top-k select
      bytes = P Hkv dk b_kv              the prompt's keys read again (flash attention keeps no scores)
            + w H dq b_act              the window's queries
            + 2 * 4 P H_sel             FP32 scores reduced over the window on chip: written, read back
            + 2 kept kv_elems b_kv      gather the kept KV into the compacted cache (read + write)
    H_sel = H (per query head), Hkv (per KV head) or 1 (per layer). The reference PyTorch code
    materialises the w x P x H scores instead (4 w P H bytes more per layer); a fused kernel
    reduces them over the window first, which is what is counted."""
    s = kv_shape(m)
    P, w = float(prompt_len), float(min(pol.obs_window, prompt_len))
    hs = h_sel(pol, m)
    k = pol.pool_kernel if pol.pooling != "none" else 0
    flops = w * P * s["H"] * (2.0 * s["dq"] + 6.0) + P * s["H"] + P * hs * (k + 1.0)
    byts = P * s["Hkv"] * s["dk"] * kv_bytes + w * s["H"] * s["dq"] * act_bytes + 2.0 * SCORE_BYTES * P * hs
    gather = 2.0 * kept * s["kv_elems"] * kv_bytes  # kept is layer-averaged: x L below
    return {"flops": s["L"] * flops, "bytes": s["L"] * (byts + gather)}


NO_COST = {"flops": 0.0, "bytes": 0.0}


def ceil_div(a: float, b: float) -> float:
    return float(math.ceil(a / b))

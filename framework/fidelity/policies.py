"""From a KV-policy config (conf/kv_policy/<name>.yaml, the one the performance model reads) to the
plain numbers of the fidelity kernel.

A fidelity grid sweeps one `budget` B per point: the KV tokens each KV head holds (per layer,
SnapKV/PyramidKV: prompt tokens kept, window included, decode tokens then appended), or for Quest
the tokens read per step. B is written into the policy's own fields, keeping the YAML's other
choices (sinks, the split between heavy hitters / frozen top-K and the recent window):
  streaming_llm  window = B - sinks
  snapkv         budget = B (B - obs_window when budget_includes_window is false)
  pyramidkv      as snapkv; per-layer budgets from components.kv_policy.pyramidkv.layer_budgets
  h2o            budget (heavy) : window (recent) in the YAML's proportion, summing to B
  snapstream     sinks + budget (frozen K) + window (ring R) = B, K : R in the YAML's proportion
  quest          top_k_pages = ceil(B / page_size) (the performance side's rounding of a token budget)
  full           no budget
B = 0 leaves the YAML as it is. Fields the KV-policy schema lacks are read from
`kv_policy.params` (then the defaults below), so older schemas still work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

import numpy as np

from decodelab.fidelity import attention_kernel as K
from decodelab.components.kv_policy import pyramidkv

KINDS = {
    "full": K.FULL,
    "streaming_llm": K.STREAMING,
    "snapkv": K.SNAPKV,
    "pyramidkv": K.SNAPKV,
    "snapstream": K.SNAPSTREAM,
    "h2o": K.H2O,
    "quest": K.QUEST,
}
POOLS = {"none": K.POOL_NONE, "avg": K.POOL_AVG, "max": K.POOL_MAX}
DEFAULTS: Dict[str, Any] = {
    "sinks": 0,
    "window": 0,
    "budget": 0,
    "obs_window": 32,
    "budget_includes_window": True,
    "pooling": "avg",
    "pool_kernel": 5,
    "granularity": "kv_head",
    "pyramid_beta": 20.0,
    "page_size": 16,
    "top_k_pages": 0,
    "dense_layers": 2,
}


def field(pol, name: str):
    """A policy field: the typed field, else kv_policy.params[name], else the default."""
    if name in pol:
        return pol[name]
    params = pol.get("params") or {}
    return params.get(name, DEFAULTS[name])


def _set(pol, name: str, value) -> None:
    if name in pol:
        pol[name] = value
    else:
        pol.params[name] = value


def apply_budget(pol, budget: int) -> None:
    """Write grid budget B into the policy's fields (see the module docstring). In place."""
    name = pol.name
    if budget <= 0 or name == "full":
        return
    sinks, window, kept = int(field(pol, "sinks")), int(field(pol, "window")), int(field(pol, "budget"))
    if name == "streaming_llm":
        _set(pol, "window", budget - sinks)
    elif name in ("snapkv", "pyramidkv"):
        w = int(field(pol, "obs_window"))
        _set(pol, "budget", budget if field(pol, "budget_includes_window") else budget - w)
    elif name == "h2o":
        share = window / (kept + window) if kept + window > 0 else 0.5
        recent = max(1, int(round(budget * share)))
        _set(pol, "window", recent)
        _set(pol, "budget", budget - recent)
    elif name == "snapstream":
        share = window / (kept + window) if kept + window > 0 else 0.5
        ring = max(1, int(round((budget - sinks) * share)))
        _set(pol, "window", ring)
        _set(pol, "budget", budget - sinks - ring)
    elif name == "quest":
        page = int(field(pol, "page_size"))
        if page >= 1:  # page_size < 1: left for the component's check()
            _set(pol, "top_k_pages", -(-budget // page))
    else:
        raise ValueError(f"kv_policy.name={name!r}: no fidelity implementation (one of: {', '.join(KINDS)})")


@dataclass
class Variant:
    """One policy at one budget, as the kernel's plain arrays."""

    label: str  # name@budget
    name: str  # the grid's name of the policy (an alias or the option)
    policy: str  # the kv_policy component (conf/kv_policy option's `name`)
    budget: int
    iparams: np.ndarray  # [N_IPARAMS] int64
    layer_budgets: np.ndarray  # [L] int64 (SnapKV/PyramidKV kept prompt, SnapStream K, H2O heavy)
    hh: int  # H2O heavy hitters (decode eviction)
    sel_of_head: np.ndarray  # [H] selector of each query head
    prefill_mask: tuple  # (sinks, window) of the prefill it needs; (0, 0) = dense
    fields: Dict[str, Any]  # the policy's final config, for logging


def selectors(granularity: str, n_heads: int, n_kv_heads: int) -> np.ndarray:
    if granularity == "query_head":
        return np.arange(n_heads, dtype=np.int64)
    if granularity == "kv_head":
        return np.arange(n_heads, dtype=np.int64) // (n_heads // n_kv_heads)
    if granularity == "layer":
        return np.zeros(n_heads, np.int64)
    raise ValueError(f"kv_policy.granularity={granularity!r} is not one of: query_head, kv_head, layer")


def variant(pol, model, budget: int, streaming_prefill: bool = True, alias: str = "") -> Variant:
    """`pol`: a composed kv_policy node with the grid budget already applied; `model`: a model
    config node (n_layers, n_heads, n_kv_heads); `alias`: the grid's name for it (default: pol.name)."""
    from omegaconf import OmegaConf

    name = pol.name
    if name not in KINDS:
        raise ValueError(f"kv_policy.name={name!r}: no fidelity implementation (one of: {', '.join(KINDS)})")
    L, H, Hkv = model.n_layers, model.n_heads, model.n_kv_heads
    f = {k: field(pol, k) for k in DEFAULTS}
    pooling = str(f["pooling"])
    if pooling not in POOLS:
        raise ValueError(f"kv_policy.pooling={pooling!r} is not one of: {', '.join(POOLS)}")
    ip = np.zeros(K.N_IPARAMS, np.int64)
    ip[K.P_KIND], ip[K.P_SINKS], ip[K.P_WINDOW] = KINDS[name], int(f["sinks"]), int(f["window"])
    ip[K.P_PAGE], ip[K.P_TOPPAGES], ip[K.P_DENSE] = (
        int(f["page_size"]),
        int(f["top_k_pages"]),
        int(f["dense_layers"]),
    )
    ip[K.P_OBS], ip[K.P_POOL], ip[K.P_KERNEL] = int(f["obs_window"]), POOLS[pooling], int(f["pool_kernel"])
    kept = int(f["budget"])
    if name == "quest" and ip[K.P_TOPPAGES] <= 0:  # top_k_pages 0: the pages holding `budget` tokens
        ip[K.P_TOPPAGES] = -(-kept // max(1, int(f["page_size"])))
    if name in ("snapkv", "pyramidkv"):
        if name == "pyramidkv":
            per_layer = pyramidkv.layer_budgets(_Fields(f), L)
            if not f["budget_includes_window"]:
                per_layer = [b + f["obs_window"] for b in per_layer]
        else:
            per_layer = [kept + (0 if f["budget_includes_window"] else f["obs_window"])] * L
        lb = np.array([int(round(b)) for b in per_layer], np.int64)
    else:
        lb = np.full(L, kept, np.int64)
    mask = (int(f["sinks"]), int(f["window"])) if name == "streaming_llm" and streaming_prefill else (0, 0)
    fields = OmegaConf.to_container(pol, resolve=True) if OmegaConf.is_config(pol) else dict(pol)
    alias = alias or name
    return Variant(
        label=f"{alias}@{budget}" if budget > 0 and name != "full" else alias,
        name=alias,
        policy=name,
        budget=budget if name != "full" else 0,
        iparams=ip,
        layer_budgets=lb,
        hh=kept,
        sel_of_head=selectors(str(f["granularity"]), H, Hkv),
        prefill_mask=mask,
        fields=fields,
    )


class _Fields:
    """Attribute view of resolved fields (for the performance components' helpers)."""

    def __init__(self, d: Dict[str, Any]):
        self.__dict__.update(d)


def stack(variants: List[Variant]) -> Dict[str, np.ndarray]:
    return {
        "iparams": np.stack([v.iparams for v in variants]),
        "layer_budgets": np.stack([v.layer_budgets for v in variants]),
        "hh": np.array([v.hh for v in variants], np.int64),
        "sel_of_head": np.stack([v.sel_of_head for v in variants]),
    }

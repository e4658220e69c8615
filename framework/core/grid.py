"""Static decode designs of one choice of components, evaluated as arrays (`decodelab grid`).

In: the choice's config as plain nested dicts (a core.tree.Tree, no OmegaConf), the swept fields' dotted
keys and a table of their values per design. Designs that differ only in memory-tier bandwidths
share one `build` (validation, operator list, placement) and are costed together by one
`grid_kernel.decode_grid` call; every other distinct combination of swept values is built once on
plain data. Metrics are `core.metrics.metrics` on arrays (`grid_metrics`, checked equal to it by
tests/test_grid.py). A design this path cannot express is returned with `path_reason` set: the
caller evaluates it with the per-design path (`decodelab.evaluate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from decodelab.components.placement import GIB
from decodelab.core import cost, grid_kernel, kv_costs, parallel
from decodelab.core import kernel as K
from decodelab.core.build import Design, build
from decodelab.core.metrics import rate_metrics
from decodelab.core.schema import memory_tiers
from decodelab.core.tree import Tree, missing_keys, replace
from decodelab.errors import ConfigError, Infeasible
from decodelab.kernel_layout import CAUSES, Law, Lin


def per_design_reason(cfg) -> Optional[str]:
    """Why a design needs the per-design path (None: the array path expresses it)."""
    w = cfg.workload
    if cfg.get("coe") is not None and cfg.coe.get("enabled"):
        return "Composition of Experts"
    if w.get("kind", "static") != "static":
        return f"serving workload ({w.kind})"
    if cfg.speculative.get("enabled"):
        return "speculative decoding"
    if w.get("batch_fill"):
        return "batch fill"
    if w.get("static_graph"):
        return "static graph"
    if cfg.hardware.get("pipeline_parallel", 1) != 1:  # core/pipeline.py: a max over stages
        return "pipeline parallelism"
    return None


def bandwidth_keys(cfg) -> Dict[str, str]:
    """Swept keys the array path varies without a new build: tier bandwidths (dotted key -> tier
    name), unless a fitted operator law reads the HBM bandwidth (hardware.op_model=fitted)."""
    hw = cfg.hardware
    if hw.get("op_model", "roofline") == "fitted":
        return {}
    return {f"hardware.memory.{t.name}.bandwidth_gb_s": t.name for t in memory_tiers(hw)}


@dataclass
class Block:
    """Results of n designs: status, reason, notes, metrics (NaN where a design has none), the
    decode rows the kernel costed per design, and the per-design path's reason where it is needed."""

    n: int
    status: np.ndarray
    reason: np.ndarray
    notes: np.ndarray
    path_reason: np.ndarray
    rows: np.ndarray
    metrics: Dict[str, np.ndarray] = field(default_factory=dict)
    builds: int = 0

    @classmethod
    def empty(cls, n: int) -> "Block":
        obj = lambda: np.full(n, "", dtype=object)  # noqa: E731
        return cls(n, obj(), obj(), obj(), obj(), np.zeros(n, dtype=np.int64))

    def put(self, idx: np.ndarray, m: Dict[str, np.ndarray]) -> None:
        for k, v in m.items():
            col = self.metrics.get(k)
            if col is None:
                col = self.metrics[k] = np.full(self.n, np.nan)
            col[idx] = v


def evaluate_block(base: Tree, keys: List[str], values: List[np.ndarray]) -> Block:
    """Every design of one choice of components: design i sets keys[j] = values[j][i]."""
    n = len(values[0]) if values else 1
    out = Block.empty(n)
    if missing_keys(base) or any(np.any(np.asarray(v, dtype=object) == "???") for v in values):
        out.path_reason[:] = "a mandatory value (???) is missing"
        return out
    patch = {k: t for k, t in bandwidth_keys(base).items() if k in keys}
    build_keys = [j for j, k in enumerate(keys) if k not in patch]
    groups: Dict[tuple, List[int]] = {}
    for i in range(n):
        groups.setdefault(tuple(values[j][i] for j in build_keys), []).append(i)
    for gkey, rows in groups.items():
        idx = np.asarray(rows, dtype=np.int64)
        first = {keys[j]: values[j][rows[0]] for j in range(len(keys))}
        _evaluate_group(base, first, patch, [values[keys.index(k)][idx] for k in patch], idx, out)
    return out


def _evaluate_group(base, first, patch, bw_values, idx, out: Block) -> None:
    cfg = replace(base, first)
    why = per_design_reason(cfg)
    bws = [np.asarray(v, dtype=np.float64) for v in bw_values]
    if why is None and any(not np.all(v > 0) for v in bws):  # check_config's message, per design
        why = "a memory tier bandwidth is not > 0"
    if why is not None:
        out.path_reason[idx] = why
        return
    out.builds += 1
    try:
        d = build(cfg)
    except ConfigError as e:
        out.status[idx], out.reason[idx] = "invalid", str(e)
        return
    except Infeasible as e:
        out.status[idx], out.reason[idx] = "infeasible", str(e)
        return
    w = cfg.workload
    steps = kv_costs.attended_rows(K.request_steps(w.batch_size, w.prompt_len, w.output_len), w.prompt_len, d)
    tier_bws = np.tile(d.tier_bw, (len(idx), 1))
    hbm_bw = np.full(len(idx), d.hbm_bw_total)
    tiers = list(patch.values())
    for t, v in zip(tiers, bws):
        tier_bws[:, d.tier_names.index(t)] = v * 1e9
        if t == "hbm":
            hbm_bw = parallel.replica_chips(cfg.hardware) * v * 1e9
    walk = bool(np.any(d.op_lin[:, Lin.LAW] == Law.ATTN))  # decode attention law: not affine
    prefill, decode, rows = grid_kernel.decode_grid(
        d.op_call, d.op_w, d.op_lin, d.call_rep, d.call_cost, tier_bws, d.kv_frac, d.hw, steps, walk
    )
    sel = np.tile(d.kv_prefill_s, (len(idx), 1))
    if "hbm" in tiers and np.any(d.kv_prefill_s):  # the selection's roofline reads HBM
        v = bws[tiers.index("hbm")]
        for bw in np.unique(v):
            key = "hardware.memory.hbm.bandwidth_gb_s"
            sel[v == bw] = build(replace(cfg, {key: float(bw)})).kv_prefill_s
    prefill += w.batch_size * sel
    out.status[idx], out.notes[idx], out.rows[idx] = "ok", "; ".join(d.notes), rows
    out.put(idx, grid_metrics(cfg, d, prefill, decode, hbm_bw, sel))


def grid_metrics(cfg, design: Design, prefill, decode_sum, hbm_bw_total, kv_select) -> Dict[str, np.ndarray]:
    """core.metrics.metrics of n designs that share `design` but their tier bandwidths:
    prefill[n, k], decode_sum[n, k] seconds by cause, hbm_bw_total[n], kv_select[n, k] the KV
    policy's selection seconds per sequence (Design.kv_prefill_s)."""
    w, hw = cfg.workload, cfg.hardware
    tokens = w.output_len - 1.0
    mean_ctx = w.prompt_len + w.output_len / 2.0
    n = prefill.shape[0]
    tpot = decode_sum.sum(axis=1) / tokens
    ttft = prefill.sum(axis=1)
    b = w.batch_size
    replicas = parallel.replicas(hw)
    full = lambda x: np.full(n, float(x))  # noqa: E731
    res = rate_metrics(design, w, ttft, tpot, tokens, mean_ctx, replicas, hbm_bw_total)
    res["n_kernel_calls_per_step"] = full(design.calls_per_step)
    for k, c in enumerate(CAUSES):
        res[f"tpot_{c}_ms"] = decode_sum[:, k] / tokens * 1e3
        res[f"ttft_{c}_ms"] = prefill[:, k] * 1e3
    ddr = design.tier_names.index("ddr") if "ddr" in design.tier_names else -1
    res["kv_ddr_pct"] = full(100.0 * float(design.kv_frac[ddr]) if ddr >= 0 else 0.0)
    mem = design.memory
    for name, used in mem["used"].items():
        res[f"mem_{name}_gib"] = full(used / GIB)
        res[f"mem_{name}_pct"] = full(100.0 * used / mem["capacity"][name])
    sel = kv_select.sum(axis=1)
    res.update(
        batch_size=full(b),
        max_batch=full(design.max_batch),
        kv_slot_gib_per_chip=full(design.kv_slot_bytes_chip / GIB),
        kv_slot_gib_model=full(design.kv_slot_bytes_model / GIB),
        ttft_kv_select_ms=sel * 1e3,
        kv_select_pct_ttft=np.where(ttft > 0, 100.0 * b * sel / np.where(ttft > 0, ttft, 1.0), 0.0),
    )
    seconds = decode_sum.sum(axis=1)
    busy = sum(decode_sum[:, k] for k in cost._BUSY)
    for k, v in cost.cost_metrics(hw, seconds, busy, b * tokens, replicas).items():
        res[k] = v if np.ndim(v) else full(v)
    return res

"""An MoE layer's routed-expert block from a table of MoE microbenchmarks (`hardware.op_tables.moe`,
`moe_by_engine`, with hardware.op_model=fitted; docs/model.md "Per-shape operator laws").

The roofline law costs an MoE layer's expert GEMMs as streams of the activated experts' weights
and FLOPs at the chip's GEMM efficiency; measured fused-MoE kernels are far from that. On the H100
(AIConfigurator's vLLM 0.14.0 table, Qwen3-30B-A3B's block: hidden 2048, expert FFN 768, top-8 of
128, BF16) the block takes 1.1-2x the roofline time at 1-128 tokens and 3.6-4x at 4k-16k tokens
(~25% of the BF16 peak: many small per-expert GEMMs). A table holds the whole block's latency --
routing's top-k and permutation, the grouped gate/up GEMM, the activation, the grouped down GEMM
and the weighted combine of the routed experts, one rank, all of a step's tokens on it (the
collectors time one rank's `FusedMoE` with every token routed over all experts, the rank holding
its `moe_tp` / `moe_ep` share: AIConfigurator collector/{trtllm,vllm,sglang}/collect_moe.py) -- by
num_tokens at the model's exact shape (hidden, expert FFN, top-k, experts, moe_tp, moe_ep) and
dtype, balanced routing. With one, the block's head op (the gate/up op, components/models/
experts.py) is costed at a step's tokens by
    MoE layer share x table(tokens) + the dense layers' and shared experts' part of the block
(that part by the roofline law at the chip's achievable rates, its weights and FLOPs the
block's over the head op's), and its activation and down ops inside it (LAW_SKIP). The table
curve is made non-decreasing in tokens (isotonic regression of log latency, as core/optable.py),
linear in tokens between the measured points and at the kernel's M_GRID. A shape, dtype or
parallel split the table does not hold, or a chip other than the one it was measured on, keeps the
roofline law. Tables: AIConfigurator @095f58a5 systems/data/<chip>/moe/<engine>/<version>/
moe_perf.parquet, balanced rows, gated kernels (decodelab/data/operators/README.md).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Dict, Optional, Tuple

import numpy as np

from decodelab.core import kernel_layout as K
from decodelab.core.optable import TableError, _read, grid_row

COLUMNS = (
    "moe_dtype",
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
    "latency_ms",
)
# decodelab weight dtype -> the table's moe_dtype (AIConfigurator MoEQuantMode names)
DTYPES = {
    "bf16": "bfloat16",
    "fp16": "bfloat16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "int4": "int4_wo",
    "mxfp4": "w4a16_mxfp4",
    "nvfp4": "nvfp4",
}
MIN_POINTS = 8  # fewer measured token counts at a shape: the roofline law
Key = Tuple[str, int, int, int, int, int, int]


@lru_cache(maxsize=16)
def curves(path: str) -> Dict[Key, Tuple[np.ndarray, np.ndarray]]:
    """(moe_dtype, hidden, expert FFN, top-k, experts, moe_tp, moe_ep) -> (tokens, seconds) of the
    table at `path`, tokens ascending (cached per path)."""
    known = {v: v for v in DTYPES.values()}
    df = _read(path, COLUMNS, "an MoE", "moe_dtype", known, "rows of an MoE dtype")
    out = {}
    keys = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    for key, d in df.groupby(keys, sort=False):
        d = d.groupby("num_tokens").latency_ms.median()
        out[(key[0], *map(int, key[1:]))] = (d.index.to_numpy(float), d.to_numpy(float) * 1e-3)
    return out


def check(path: str) -> Optional[str]:
    """The problem of the MoE table at `path` (one line), or None."""
    try:
        curves(path)
    except TableError as e:
        return str(e)
    return None


@lru_cache(maxsize=1024)
def block_row(path: str, dtype: str, shape: Tuple[int, int, int, int, int, int]) -> Optional[np.ndarray]:
    """Seconds of the routed-expert block at the kernel's M_GRID token counts (read-only), or None
    where the table lacks the dtype or the exact shape (hidden, expert FFN, top-k, experts, moe_tp,
    moe_ep)."""
    c = curves(path).get((DTYPES.get(dtype, ""), *shape))
    if c is None or len(c[0]) < MIN_POINTS:
        return None
    return grid_row(*c)  # non-decreasing, on the kernel's token grid, as a GEMM table's curve


def head_row(op, block: np.ndarray, bw: float, peak: float, bw_eff: float, c_eff: float):
    """(t0, times beyond t0 at M_GRID) of an MoE block's head op: its MoE layer share of the
    table's block time `block` (block_row) plus the roofline time of the block's dense and
    shared-expert part (per token FLOPs and weights of the head op beyond its routed experts, times
    the block's over the head's)."""
    f_moe, routed, factor = op.moe_block[7:]
    m = np.asarray(K.M_GRID)
    spec = op.experts_read
    w_ds = factor * (spec[0] + spec[1] * spec[4]) if spec else 0.0  # dense layers + shared experts
    f_ds = factor * max(op.flops_per_token - routed, 0.0)
    rest = np.maximum(w_ds / (bw * bw_eff), m * f_ds / (peak * c_eff)) if (w_ds or f_ds) else 0.0
    at = f_moe * block + rest
    t0 = float(at.min())
    return t0, at - t0


def lookup(op, paths, dtype: str, bw: float, peak: float, bw_eff: float, c_eff: float):
    """(skip, head row) of an MoE block op from the first of `paths` (the engine's own table, the
    chip's) that holds its block: a tail op is skipped (inside the head's time), a head op gets
    head_row; None where no table holds it (the roofline law)."""
    shape = tuple(int(x) for x in op.moe_block[1:7])  # hidden, expert FFN, top-k, experts, moe_tp, moe_ep
    for path in dict.fromkeys(p for p in paths if p):
        block = block_row(path, dtype, shape)
        if block is None:
            continue
        if op.moe_block[0] == "tail":
            return True, None
        return False, head_row(op, block, bw, peak, bw_eff, c_eff)
    return None

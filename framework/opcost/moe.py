"""The MoE family: an MoE layer's routed-expert block from a table of MoE microbenchmarks
(`hardware.op_tables.moe`, `moe_by_engine`, with hardware.op_model=fitted; docs/model.md
"Per-shape operator laws"), its blocks read by opcost/moe_blocks.py. A block no table holds in its
dtype keeps its ops' GEMM laws (opcost.gemm), else the roofline law.

The roofline law costs an MoE layer's expert GEMMs as streams of the activated experts' weights
and FLOPs at the chip's GEMM efficiency; measured fused-MoE kernels are far from that. On the H100
(AIConfigurator's vLLM 0.14.0 table, Qwen3-30B-A3B's block: hidden 2048, expert FFN 768, top-8 of
128, BF16) the block takes 1.1-2x the roofline time at 1-128 tokens and 3.6-4x at 4k-16k tokens
(~25% of the BF16 peak: many small per-expert GEMMs). With a table, the block's head op (the
gate/up op, components/models/experts.py) is costed at a step's tokens by
    MoE layer share x table(tokens) + the dense layers' and shared experts' part of the block
(that part by the roofline law at the chip's achievable rates, its weights and FLOPs the
block's over the head op's), and its activation and down ops inside it (Law.SKIP). A block no
table holds exactly is carried from the nearest measured one (moe_blocks.near_row). A dtype no
table holds, or a chip other than the one the tables were measured on, keeps the roofline law.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from decodelab.opcost import tables
from decodelab.opcost.base import Ctx, Price, Step, check_tables, gemm_dtype, hbm_bw, peak
from decodelab.opcost.base import engine_tables
from decodelab.opcost.moe_blocks import DTYPES, SOLE, block_kernels, block_row, near_row, problem, served
from decodelab.opcost.moe_blocks import times_kernel
from decodelab.opcost.moe_routing import routing_of
from decodelab.kernel_layout import Law, Lin, M_GRID

NAME = "moe"
FIT_GROUPS = ()


def head_row(op, block: np.ndarray, bw: float, peak: float, bw_eff: float, c_eff: float):
    """(t0, times beyond t0 at M_GRID) of an MoE block's head op: its MoE layer share of the
    table's block time `block` (block_row) plus the roofline time of the block's dense and
    shared-expert part (per token FLOPs and weights of the head op beyond its routed experts, times
    the block's over the head's)."""
    f_moe, routed, factor = op.moe_block[7:]
    m = np.asarray(M_GRID)
    spec = op.experts_read
    w_ds = factor * spec[0] if spec else 0.0  # dense layers + shared experts (experts.weight_read)
    f_ds = factor * max(op.flops_per_token - routed, 0.0)
    rest = np.maximum(w_ds / (bw * bw_eff), m * f_ds / (peak * c_eff)) if (w_ds or f_ds) else 0.0
    at = f_moe * block + rest
    t0 = float(at.min())
    return t0, at - t0


# A dtype's stand-in where no table holds the dtype: the same weight bytes, the other FP8 scaling
# (per-tensor vs 128 x 128 blocks). Over the shipped tables' blocks measured in both, the FP8 curve
# misses the block-scaled one by a median 8-26% per table (mean 14-29%), the roofline law by 352%.
SIBLING = {"fp8_block": "fp8", "fp8": "fp8_block"}


def block_of(op, paths, dtype: str, bw: float, peak: float, backend: str = ""):
    """(seconds at M_GRID, where from, the collector's routing) of an MoE block op's routed-expert
    block: the first of `paths` (the engine's own table, the chip's) that holds it exactly (where
    from: None), else the first that holds its dtype, carried from its nearest block (near_row; where
    from: (path, measured key)); where no table holds the dtype, the same from its SIBLING dtype
    (TensorRT-LLM 1.3.0rc10's B300, GB200 and GB300 tables hold FP8 but no block-scaled FP8); None
    where no table holds either (the roofline law). `backend`: the engine's MoE kernel (curves). The
    routing: an exact block's rank-0 counts where its collection routed it by grouped top-k
    (moe_routing.routing_of), else None (balanced)."""
    shape = tuple(int(x) for x in op.moe_block[1:7])  # hidden, expert FFN, top-k, experts, moe_tp, moe_ep
    paths = list(dict.fromkeys(p for p in paths if p))
    if backend in SOLE:  # the tables that time the backend's own kernel, where one does
        paths = [p for p in paths if times_kernel(p, dtype, backend)] or paths
    for dt in (dtype, SIBLING.get(dtype)):
        if dt is None:
            continue
        for path in paths:
            block = block_row(path, dt, shape, backend)
            if block is not None:
                kernels = block_kernels(path, backend).get((DTYPES[dt], *shape), ())
                where = None if dt == dtype else (path, (DTYPES[dt], *shape))
                return block, where, routing_of(kernels, shape)
        for path in paths:
            got = near_row(path, dt, shape, bw, peak, backend)
            if got is not None:
                return got[0], (path, got[1]), None
    return None


def lookup(op, paths, dtype: str, bw: float, peak: float, bw_eff: float, c_eff: float, backend: str = ""):
    """(skip, head row, where from) of an MoE block op from its block (block_of): a tail op is
    skipped (inside the head's time), a head op gets head_row; where from as block_of's; None where
    no table holds its dtype (the roofline law)."""
    got = block_of(op, paths, dtype, bw, peak, backend)
    if got is None:
        return None
    if op.moe_block[0] == "tail":
        return True, None, got[1]
    shape = tuple(int(x) for x in op.moe_block[1:7])
    block = served(got[0], DTYPES.get(dtype, dtype), shape, bw, peak, got[2])
    return False, head_row(op, block, bw, peak, bw_eff, c_eff), got[1]


def carried_note(op, source) -> Optional[str]:
    """For an MoE head op whose block was carried (lookup's where from, `source`, not None): which
    measured block it came from (for the design's note), else None."""
    if source is None or op.moe_block[0] != "head":
        return None
    path, key = source
    h, f, k, e, tp, ep = key[1:]
    return (
        f"{op.name}: MoE block carried from the nearest one measured ({key[0]}, hidden {h}, expert FFN {f}, "
        f"top-{k} of {e}, moe_tp {tp}, moe_ep {ep}; {path.rsplit('/', 1)[-1]})"
    )


def moe_dtype(dtype: str, moe_mxfp4: str) -> str:
    """The MoE table dtype of an expert op's weights: MXFP4 experts run with MXFP8 activations
    (`w4a8`, table rows w4a8_mxfp4_mxfp8) or BF16 ones (`w4a16`) by engine.moe_mxfp4."""
    return "mxfp4_w4a8" if dtype == "mxfp4" and moe_mxfp4 == "w4a8" else dtype


def paths(ctx: Ctx) -> list:
    """The MoE tables to look an engine's block up in: its own, then the chip's (none off-chip)."""
    return engine_tables(ctx, "moe")


def matches(op) -> bool:
    return bool(getattr(op, "moe_block", ()))


def price(op, ctx: Ctx) -> Optional[Price]:
    """The whole block on its head op (Law.GEMM from the table's row), its tail ops inside it
    (Law.SKIP); None where no table holds its dtype (its ops' GEMM laws, opcost.gemm). The layer's
    routing decision: route_price."""
    if op.route_point:
        return route_price(op, ctx)
    hw = ctx.hw
    dt = moe_dtype(gemm_dtype(op, ctx.weight_dtype), ctx.moe_mxfp4)
    got = lookup(
        op, paths(ctx), dt, hbm_bw(hw), peak(hw, dt), hw.bw_eff_max, hw.compute_eff_max, ctx.moe_backend
    )
    if got is None:
        return None
    skip, row, source = got
    if skip:
        return Price(NAME, Law.SKIP, whole=True, law=(None, source))
    cols = {Lin.T0: row[0]}
    return Price(NAME, Law.GEMM, cols, row[1], Lin.G_TAB, whole=True, law=(row, source))


# Engine families whose MoE table timed the layer's routing (top-k over the router logits) inside the block:
# AIConfigurator's TensorRT-LLM collector calls the fused MoE module with router logits (collector/trtllm/
# collect_moe.py @095f58a5: moe.forward(hidden_states, logits), routing_method given to create_moe), which routes
# inside it, as TensorRT-LLM's models call it (tensorrt_llm/_torch/models/modeling_gpt_oss.py MLPBlock:
# self.experts(x=t, router_logits=g); TRTLLM-gen runs the routing kernel within its MoE runner)
ROUTED_INSIDE = ("trtllm",)


def route_price(op, ctx: Ctx) -> Optional[Price]:
    """An MoE layer's routing decision (components/models/experts.py route_op) inside its block's
    measured time (Law.SKIP) where the engine's table timed it (ROUTED_INSIDE) and a table holds the
    block; else None (a kernel of its own, the roofline law)."""
    if ctx.engine not in ROUTED_INSIDE:
        return None
    hw = ctx.hw
    dt = moe_dtype(gemm_dtype(op, ctx.weight_dtype), ctx.moe_mxfp4)
    got = block_of(op, paths(ctx), dt, hbm_bw(hw), peak(hw, dt), ctx.moe_backend)
    return None if got is None else Price(NAME, Law.SKIP, whole=True, law=(None, got[1]))


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    t0, beyond = p.law[0]
    return float(tables.table_time(t0, beyond, step.tokens)) - t0, t0, 0.0


def note(ctx: Ctx, op=None, p: Optional[Price] = None) -> Optional[str]:
    """The block a carried MoE head op was carried from (carried_note)."""
    return None if op is None or p is None else carried_note(op, p.law[1])


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    if op.kind != "gemm" or not matches(op) or any(f != "collectives" for f in priced):
        return None
    return f"no {gemm_dtype(op, ctx.weight_dtype)} block in the MoE tables"


def check(hw) -> List[str]:
    return check_tables(hw, "moe", problem)

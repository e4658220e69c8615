"""The MoE family: an MoE layer's routed-expert block from a table of MoE microbenchmarks
(`hardware.op_tables.moe`, `moe_by_engine`, with hardware.op_model=fitted; docs/model.md
"Per-shape operator laws"). A block no table holds in its dtype keeps its ops' GEMM laws
(opcost.gemm), else the roofline law.

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
block's over the head op's), and its activation and down ops inside it (Law.SKIP). The table
curve is made non-decreasing in tokens (isotonic regression of log latency, as opcost/gemm.py),
linear in tokens between the measured points and at the kernel's M_GRID, then read under
serving's routing (`served`: balanced routing reads min(E, n k) experts, each token's own top-k
E (1 - (1 - k/E)^n), 163 of DeepSeek's 256 at 32 tokens, not 256). Tables: AIConfigurator
@095f58a5 systems/data/<chip>/moe/<engine>/<version>/moe_perf.parquet, balanced rows, gated kernels
(decodelab/data/operators/README.md).

A shape or parallel split that no table holds exactly borrows the measured curve of the nearest
one the same table holds in the same dtype (`nearest`: the same number of GPUs per expert layer
first, then the nearest split and shape), scaled at each token count by the two
blocks' ideal times on this chip (`ideal`: each rank's activated expert weights at the HBM peak or
its FLOPs at the dtype's peak, whichever is longer): the measured utilisation carried to a
neighbouring configuration, as AIConfigurator's cross-shape transfer does (its sdk/common.py
TransferKind.XSHAPE). At a few tokens the measured blocks take several times their ideal time (routing,
permutation and launch of several kernels), which the roofline law alone would miss (H200,
TensorRT-LLM, Qwen3-235B-A22B's block in FP8 at moe_tp 8: 68 us measured at one token, ~4 us
ideal). A dtype no table holds, or a chip other than the one the tables were measured on, keeps
the roofline law.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from decodelab.components.models.experts import busiest_chip_experts, expected_experts
from decodelab.opcost import tables
from decodelab.opcost.base import Ctx, Price, Step, check_tables, gemm_dtype, hbm_bw, op_table, peak
from decodelab.opcost.base import table_mismatch
from decodelab.opcost.tablecache import table_cache
from decodelab.kernel_layout import Law, Lin, M_GRID

NAME = "moe"
FIT_GROUPS = ()

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
    "mxfp4_w4a8": "w4a8_mxfp4_mxfp8",  # MXFP4 experts with MXFP8 activations (engine.moe_mxfp4: w4a8)
    "nvfp4": "nvfp4",
}
MIN_POINTS = 8  # fewer measured token counts at a shape: the roofline law
# engine.moe_backend -> the table kernel_sources of that backend, in order of preference (kernel_rows). TRTLLM:
# TRTLLM-gen kernels, TensorRT-LLM's own NVFP4 min-latency cases (AIConfigurator collector/trtllm/collect_moe.py
# @095f58a5: `moe_backend = "trtllm"`, SM100, <= 256 experts) and, for block-scaled FP8, the same kernel family as
# FlashInfer ships it (`trtllm_fp8_block_scale_moe`), timed on the chip by AIConfigurator's SGLang collector under
# `--moe-runner-backend flashinfer_trtllm` (its TensorRT-LLM collector runs fp8_block on SM100 with DeepGEMM only;
# on DeepSeek's NVFP4 block both collections of TRTLLM-gen agree within ~15% at 1-256 tokens, B200,
# tools/aic_moe_kernel_convert.py). CUTLASS: its own rows, DeepGEMM's for block-scaled FP8 (TensorRT-LLM's MoE
# backend support matrix, deployment guide 1.2.0rc2.post2: B200 FP8 "DEEPGEMM" only; the collector's choice on
# SM100). vLLM and SGLang tables: TRTLLM = FlashInfer's TRTLLM-gen kernels (vLLM's FLASHINFER_TRTLLM fp8 backend,
# SGLang's --moe-runner-backend flashinfer_trtllm); TRITON = the Triton fused MoE (vLLM's TRITON backend, SGLang's
# default). "" = every kernel a table holds but the ONLY_NAMED ones (their median per shape)
KERNELS = {
    "trtllm": (
        "moe_torch_flow_min_latency",
        "sglang_flashinfer_trtllm_moe",
        "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
    ),
    "cutlass": ("moe_torch_flow_cutlass", "deepgemm"),
    "deepgemm": ("deepgemm",),
    "triton": ("vllm_fused_moe", "sglang_fused_moe_triton"),
}
# Kernels a table holds from another collection of the kernel (another engine's or a later version's;
# tools/aic_moe_kernel_convert.py BORROWS): read only by a backend that names them, never in another backend's
# fallback or the median of ""
ONLY_NAMED = ("sglang_flashinfer_trtllm_moe", "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic")
Key = Tuple[str, int, int, int, int, int, int]
# Bytes per expert weight of a table dtype (block scales: 1/32 B per MXFP4 weight, 1/16 per NVFP4)
WEIGHT_BYTES = {
    "bfloat16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0,
    "int4_wo": 0.5,
    "w4a16_mxfp4": 0.5 + 1.0 / 32,
    "w4a8_mxfp4_mxfp8": 0.5 + 1.0 / 32,
    "nvfp4": 0.5 + 1.0 / 16,
}


BLOCK = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]


def kernel_rows(df, backend: str):
    """The rows of an MoE table an engine of `backend` (engine.moe_backend, KERNELS) runs: a block
    (dtype, shape, split) one of its kernels measured keeps the rows of the first such kernel only,
    another block its rows but those of ONLY_NAMED kernels; a table without kernel_source every row."""
    import pandas as pd  # heavy: on use

    if "kernel_source" not in df.columns:
        return df
    source = df.kernel_source.to_numpy()
    blocks = pd.MultiIndex.from_frame(df[BLOCK])
    keep = np.zeros(len(df), bool)
    claimed = np.zeros(len(df), bool)  # rows of a block one of the backend's kernels measured
    for kernel in KERNELS.get(backend, (backend,)) if backend else ():
        mine = (source == kernel) & ~claimed
        keep |= mine
        claimed |= blocks.isin(blocks[mine])
    return df[keep | (~claimed & ~np.isin(source, ONLY_NAMED))]


@table_cache(maxsize=16)
def curves(path: str, backend: str = "") -> Dict[Key, Tuple[np.ndarray, np.ndarray]]:
    """(moe_dtype, hidden, expert FFN, top-k, experts, moe_tp, moe_ep) -> (tokens, seconds) of the
    table at `path` as an engine of MoE backend `backend` runs it (kernel_rows), tokens ascending
    (cached per path and backend)."""
    known = {v: v for v in DTYPES.values()}
    df = tables.read(path, COLUMNS, "an MoE", "moe_dtype", known, "rows of an MoE dtype")
    df = kernel_rows(df, backend)
    keys = BLOCK
    med = df.groupby(keys + ["num_tokens"], sort=True).latency_ms.median()  # one pass: blocks sorted
    idx = med.index
    tokens, seconds = idx.get_level_values("num_tokens").to_numpy(float), med.to_numpy(float) * 1e-3
    block = [idx.get_level_values(k).to_numpy() for k in keys]
    same = np.ones(max(len(med) - 1, 0), bool)  # row i + 1 continues row i's block
    for level in block:
        same &= level[1:] == level[:-1]
    starts = np.r_[0, np.flatnonzero(~same) + 1, len(med)]
    out = {}
    for a, b in zip(starts[:-1], starts[1:]):
        key = (str(block[0][a]), *(int(level[a]) for level in block[1:]))
        out[key] = (tokens[a:b], seconds[a:b])
    drop = _unsplit(out)
    return {k: v for k, v in out.items() if k not in drop}


def _unsplit(out) -> set:
    """Blocks whose curve is another split's: within 2% at every measured token count of a block of
    the same dtype and shape on fewer GPUs (moe_tp x moe_ep), though each rank holds at most half
    its expert weights and does at most half its FLOPs. A collector that did not apply the split
    measures that; AIConfigurator's B200 vLLM 0.19.0 table holds gpt-oss's MXFP4 blocks at moe_ep 1,
    2, 4, ... 128 with one curve (5.6 ms at 4096 tokens on 1 GPU and on 128). Such a block is
    left out, so a design on that split is carried from a measured neighbour (near_row)."""
    groups: Dict[tuple, list] = {}
    for k in out:
        groups.setdefault(k[:5], []).append(k)
    drop = set()
    for ks in groups.values():
        for k in ks:
            m, t = out[k]
            for j in ks:
                m2, t2 = out[j]
                if j[5] * j[6] >= k[5] * k[6] or abs(t2[-1] - t[-1]) > 0.02 * abs(t2[-1]):
                    continue  # not on fewer GPUs, or apart at the largest count (cheap test first)
                if np.array_equal(m, m2) and np.allclose(t, t2, rtol=0.02):
                    drop.add(k)
                    break
    return drop


def problem(path: str) -> Optional[str]:
    """The problem of the MoE table at `path` (one line), or None."""
    return tables.problem(curves, path)


@table_cache(maxsize=1024)
def block_row(path: str, dtype: str, shape: Tuple[int, ...], backend: str = "") -> Optional[np.ndarray]:
    """Seconds of the routed-expert block at the kernel's M_GRID token counts (read-only), or None
    where the table lacks the dtype or the exact shape (hidden, expert FFN, top-k, experts, moe_tp,
    moe_ep); `backend`: curves'."""
    c = curves(path, backend).get((DTYPES.get(dtype, ""), *shape))
    if c is None or len(c[0]) < MIN_POINTS:
        return None
    return tables.grid_row(*c)  # non-decreasing, on the kernel's token grid, as a GEMM table's curve


def ideal(dtype: str, shape, bw: float, peak: float, hit: Optional[np.ndarray] = None) -> np.ndarray:
    """Seconds of a routed-expert block at the kernel's M_GRID token counts at this chip's peaks,
    one rank, balanced routing (as the tables were measured): n tokens make n x top-k expert
    assignments, a rank holds experts / moe_ep experts of expert FFN / moe_tp columns each and
    gets 1 / moe_ep of the assignments; it reads its min(experts, n x top-k) / moe_ep activated
    experts' three (gate, up, down) matrices once and does 2 FLOPs per weight per assignment.
    `hit`: the experts a rank reads at each M_GRID count, where not balanced routing's (served)."""
    h, f, k, e, tp, ep = (float(x) for x in shape)
    n = np.asarray(M_GRID, float)
    cols = 3.0 * h * f / tp  # weights of one expert on one rank
    hit = np.minimum(e, n * k) / ep if hit is None else hit
    weights = hit * cols * WEIGHT_BYTES.get(dtype, 2.0)
    flops = 2.0 * cols * n * k / ep
    return np.maximum(weights / bw, flops / peak)


def served(block: np.ndarray, dtype: str, shape, bw: float, peak: float) -> np.ndarray:
    """A measured block (seconds at M_GRID) under serving's routing, not the table's. The collectors
    route n tokens evenly (AIConfigurator collector/helper.py balanced_logits @095f58a5: token i takes
    experts (i x stride / n + j x stride) mod E, stride = E / k: min(E, n k) distinct experts, each
    rank of moe_ep an equal share; DeepSeek's 256 all at 32 tokens); a served step routes each token's
    top-k on its own, taken as uniform and independent (components/models/experts.py): E (1 - (1 -
    k/E)^n) distinct experts (163 of 256 at 32 tokens), under moe_ep > 1 the busiest rank's. The
    difference in ideal time (ideal) is charged at the block's own rate of streaming experts: its
    measured seconds per ideal second from one token to the first count at which balanced routing
    reads every expert (at least 1); no less than the served ideal time, non-decreasing."""
    h, f, k, e, tp, ep = (int(x) for x in shape)
    n = np.asarray(M_GRID, float)
    hit = [expected_experts(e, k, x) if ep <= 1 else busiest_chip_experts(e, k, x, ep) for x in n]
    bal, srv = ideal(dtype, shape, bw, peak), ideal(dtype, shape, bw, peak, np.asarray(hit))
    full = int(np.argmax(n * k >= e)) if n[-1] * k >= e else len(n) - 1
    rise = bal[full] - bal[0]
    rate = max((block[full] - block[0]) / rise, 1.0) if rise > 0 else 1.0
    return np.maximum.accumulate(np.maximum(block + (srv - bal) * rate, srv))


def _distance(a: Key, b: Key) -> float:
    """How far measured block b is from wanted block a (same dtype), in log2 ratios: GPUs per
    expert layer (moe_tp x moe_ep) first; then a step of the shape (hidden, expert FFN, top-k,
    experts) counts twice a step of the split. The weights: leave-one-out over the shipped MoE
    tables' 15,102 blocks (each predicted from its nearest other block, tokens 1-4096), median
    error 9.4% (mean 15.2%; with shape and split weighted alike 11.4% / 16.6%, with the split ten
    times the shape 18.3% / 27.2%), against 352% (433%) for the roofline law at 85% of peak."""
    lg = np.log2
    gpus = abs(lg(a[5] * a[6]) - lg(b[5] * b[6]))
    split = abs(lg(a[5]) - lg(b[5]))
    shape = sum(abs(lg(x) - lg(y)) for x, y in zip(a[1:5], b[1:5]))
    return 100.0 * gpus + split + 2.0 * shape


@table_cache(maxsize=1024)
def nearest(path: str, dtype: str, shape: Tuple[int, ...], backend: str = "") -> Optional[Key]:
    """The table's measured block (its key) nearest to `shape` in `dtype` (_distance; ties: the
    first in key order), or None where the table holds no block of the dtype with enough points."""
    want = (DTYPES.get(dtype, ""), *shape)
    have = sorted(k for k, c in curves(path, backend).items() if k[0] == want[0] and len(c[0]) >= MIN_POINTS)
    return min(have, key=lambda k: _distance(want, k)) if have else None


def near_row(path: str, dtype: str, shape, bw: float, peak: float, backend: str = ""):
    """(seconds at M_GRID, the measured key it was carried from) of a block the table does not
    hold: the nearest measured block's curve x ideal(wanted) / ideal(measured) at each token count;
    None where the table holds nothing of the dtype."""
    key = nearest(path, dtype, tuple(shape), backend)
    if key is None:
        return None
    row = block_row(path, dtype, key[1:], backend)
    row = row * ideal(key[0], shape, bw, peak) / ideal(key[0], key[1:], bw, peak)
    return row, key


def head_row(op, block: np.ndarray, bw: float, peak: float, bw_eff: float, c_eff: float):
    """(t0, times beyond t0 at M_GRID) of an MoE block's head op: its MoE layer share of the
    table's block time `block` (block_row) plus the roofline time of the block's dense and
    shared-expert part (per token FLOPs and weights of the head op beyond its routed experts, times
    the block's over the head's)."""
    f_moe, routed, factor = op.moe_block[7:]
    m = np.asarray(M_GRID)
    spec = op.experts_read
    w_ds = factor * (spec[0] + spec[1] * spec[4]) if spec else 0.0  # dense layers + shared experts
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
    """(seconds at M_GRID, where from) of an MoE block op's routed-expert block: the first of
    `paths` (the engine's own table, the chip's) that holds it exactly (where from: None), else
    the first that holds its dtype, carried from its nearest block (near_row; where from: (path,
    measured key)); where no table holds the dtype, the same from its SIBLING dtype (TensorRT-LLM
    1.3.0rc10's B300, GB200 and GB300 tables hold FP8 but no block-scaled FP8); None where no
    table holds either (the roofline law). `backend`: the engine's MoE kernel (curves)."""
    shape = tuple(int(x) for x in op.moe_block[1:7])  # hidden, expert FFN, top-k, experts, moe_tp, moe_ep
    paths = list(dict.fromkeys(p for p in paths if p))
    for dt in (dtype, SIBLING.get(dtype)):
        if dt is None:
            continue
        for path in paths:
            block = block_row(path, dt, shape, backend)
            if block is not None:
                return block, None if dt == dtype else (path, (DTYPES[dt], *shape))
        for path in paths:
            got = near_row(path, dt, shape, bw, peak, backend)
            if got is not None:
                return got[0], (path, got[1])
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
    block = served(got[0], DTYPES.get(dtype, dtype), shape, bw, peak)
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
    hw = ctx.hw
    return [] if table_mismatch(hw) else [op_table(hw, "moe", ctx.engine), op_table(hw, "moe")]


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

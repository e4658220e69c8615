"""The measured MoE blocks of an MoE table (`hardware.op_tables.moe`, `moe_by_engine`), read for
the MoE family (opcost/moe.py): which rows each engine's MoE backend runs (`kernel_rows`), the
curve of each block (`curves`, `block_row`), its ideal time on a chip (`ideal`), the curve under
serving's routing (`served`) and the nearest measured block for one no table holds (`near_row`).

A table holds the whole block's latency -- routing's top-k and permutation, the grouped gate/up
GEMM, the activation, the grouped down GEMM and the weighted combine of the routed experts, one
rank, all of a step's tokens on it (the collectors time one rank's `FusedMoE` with every token
routed over all experts, the rank holding its `moe_tp` / `moe_ep` share: AIConfigurator
collector/{trtllm,vllm,sglang}/collect_moe.py) -- by num_tokens at the model's exact shape (hidden,
expert FFN, top-k, experts, moe_tp, moe_ep) and dtype, balanced routing. The table curve is made
non-decreasing in tokens (isotonic regression of log latency, as opcost/gemm.py), linear in tokens
between the measured points and at the kernel's M_GRID, then read under serving's routing
(`served`: balanced routing reads min(E, n k) experts, each token's own top-k E (1 - (1 - k/E)^n),
163 of DeepSeek's 256 at 32 tokens, not 256). Tables: AIConfigurator @095f58a5
systems/data/<chip>/moe/<engine>/<version>/moe_perf.parquet, balanced rows, gated kernels
(decodelab/data/operators/README.md).

A shape or parallel split that no table holds exactly borrows the measured curve of the nearest
one the same table holds in the same dtype (`nearest`: the same number of GPUs per expert layer
first, then the nearest split and shape): its time beyond its ideal time at its first token count
is kept as a fixed part (routing, permutation and the launch of several kernels), the rest scaled
at each token count by the two blocks' ideal times on this chip (`ideal`: each rank's activated
expert weights at the HBM peak or its FLOPs at the dtype's peak, whichever is longer): the measured
utilisation carried to a neighbouring configuration, as AIConfigurator's cross-shape transfer does
(its sdk/common.py TransferKind.XSHAPE), with the launch floor it does not carry. At a few tokens the
measured blocks take several times their ideal time, which the roofline law alone would miss (H200,
TensorRT-LLM, Qwen3-235B-A22B's block in FP8 at moe_tp 8: 68 us measured at one token, ~4 us
ideal). Leave-one-out over the shipped tables (tools/moe_carry_loo.py: each block from its nearest
other one, M_GRID counts up to 4096): |error| median 5.6%, mean 11.8% with the fixed part kept,
7.0% / 13.8% with the whole curve scaled.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from decodelab.components.models.experts import busiest_chip_experts, expected_experts
from decodelab.opcost import tables
from decodelab.opcost.tablecache import table_cache
from decodelab.kernel_layout import M_GRID

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
    # vLLM's Marlin W4A16 MoE (marlin_moe_wna16; VLLM_MXFP4_USE_MARLIN=1 on Hopper), timed by AIConfigurator's
    # vLLM 0.24.0 collector on MXFP4 and INT4 weights (tools/aic_moe_kernel_convert.py BORROWS)
    "marlin": (
        "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu",
        "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts",
        "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts",  # the B200 / B300 collection's name of the first
    ),
}
# Kernels a table holds from another collection of the kernel (another engine's or a later version's;
# tools/aic_moe_kernel_convert.py BORROWS): read only by a backend that names them, never in another backend's
# fallback or the median of ""
ONLY_NAMED = (
    "sglang_flashinfer_trtllm_moe",
    "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
    *KERNELS["marlin"],
)
# Backends read only from the tables that time their own kernel, carried from its nearest measured block before
# any other kernel's exact one (opcost/moe.py block_of), and the table dtypes whose blocks their kernel runs alike
# (nearest). Marlin dequantizes each 4-bit weight type to BF16 in the same tile loop and runs BF16 mma.sync: its
# vLLM 0.24.0 H200 blocks on INT4 (Kimi-K2's, hidden 7168, expert FFN 2048, top-8 of 384) and MXFP4 weights
# (Kimi-K3's, 3584 / 3072, top-16 of 896) reach the same share of their ideal time at every count (moe_tp 8:
# 0.11 / 0.10 at 1 token, 0.33 / 0.33 at 8, 0.47 / 0.48 at 64, 0.13 / 0.12 at 4096), where the Triton MXFP4
# kernel at gpt-oss's shape reaches 0.55-0.57 at 4k-16k tokens: a kernel apart, not a shape apart
SOLE = {"marlin": ("w4a16_mxfp4", "int4_wo")}
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
    if backend in SOLE:  # a dtype its kernel measured: that kernel's rows only
        own, dts = df.kernel_source.isin(KERNELS[backend]), df.moe_dtype
        df = df[own | ~dts.isin(dts[own].unique())]
    source = df.kernel_source.to_numpy()
    blocks = pd.MultiIndex.from_frame(df[BLOCK])
    keep = np.zeros(len(df), bool)
    claimed = np.zeros(len(df), bool)  # rows of a block one of the backend's kernels measured
    for kernel in KERNELS.get(backend, (backend,)) if backend else ():
        mine = (source == kernel) & ~claimed
        keep |= mine
        claimed |= blocks.isin(blocks[mine])
    return df[keep | (~claimed & ~np.isin(source, ONLY_NAMED))]


def curves(path: str, backend: str = "") -> Dict[Key, Tuple[np.ndarray, np.ndarray]]:
    """(moe_dtype, hidden, expert FFN, top-k, experts, moe_tp, moe_ep) -> (tokens, seconds) of the
    table at `path` as an engine of MoE backend `backend` runs it (kernel_rows), tokens ascending
    (cached per path and backend: _blocks)."""
    return _blocks(path, backend)[0]


def block_kernels(path: str, backend: str = "") -> Dict[Key, Tuple[str, ...]]:
    """Block key -> the kernel_sources of the rows curves() reads for it under `backend` (none where the
    table has no kernel_source)."""
    return _blocks(path, backend)[1]


@table_cache(maxsize=16)
def _blocks(path: str, backend: str = ""):
    """(curves, block_kernels) of the table at `path` under `backend`, from one read of its rows."""
    known = {v: v for v in DTYPES.values()}
    df = tables.read(path, COLUMNS, "an MoE", "moe_dtype", known, "rows of an MoE dtype")
    df = kernel_rows(df, backend)
    kernels: Dict[Key, Tuple[str, ...]] = {}
    if "kernel_source" in df.columns:
        for key, g in df.groupby(BLOCK, sort=False).kernel_source:
            kernels[(str(key[0]), *(int(x) for x in key[1:]))] = tuple(sorted(set(g)))
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
    return {k: v for k, v in out.items() if k not in drop}, kernels


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


def family(dtype: str, backend: str) -> Tuple[str, ...]:
    """The table dtypes whose blocks stand for a `dtype` block under `backend` (SOLE), else its own."""
    dt = DTYPES.get(dtype, dtype)
    return SOLE[backend] if dt in SOLE.get(backend, ()) else (dt,)


@table_cache(maxsize=64)
def times_kernel(path: str, dtype: str, backend: str) -> bool:
    """Whether the table at `path` times blocks of `dtype`'s family with one of `backend`'s kernels."""
    known = {v: v for v in DTYPES.values()}
    df = tables.read(path, COLUMNS, "an MoE", "moe_dtype", known, "rows of an MoE dtype")
    if "kernel_source" not in df.columns:
        return False
    mine = df.kernel_source.isin(KERNELS.get(backend, ())) & df.moe_dtype.isin(family(dtype, backend))
    return bool(mine.any())


def problem(path: str) -> Optional[str]:
    """The problem of the MoE table at `path` (one line), or None."""
    return tables.problem(curves, path)


@table_cache(maxsize=1024)
def block_row(path: str, dtype: str, shape: Tuple[int, ...], backend: str = "") -> Optional[np.ndarray]:
    """Seconds of the routed-expert block at the kernel's M_GRID token counts (read-only), or None
    where the table lacks the dtype or the exact shape (hidden, expert FFN, top-k, experts, moe_tp,
    moe_ep); `backend`: curves'."""
    c = curves(path, backend).get((DTYPES.get(dtype, dtype), *shape))
    if c is None or len(c[0]) < MIN_POINTS:
        return None
    return tables.grid_row(*c)  # non-decreasing, on the kernel's token grid, as a GEMM table's curve


def ideal(dtype: str, shape, bw: float, peak: float, hit=None, assign=None) -> np.ndarray:
    """Seconds of a routed-expert block at the kernel's M_GRID token counts at this chip's peaks,
    one rank, balanced routing (as most tables were measured): n tokens make n x top-k expert
    assignments, a rank holds experts / moe_ep experts of expert FFN / moe_tp columns each and
    gets 1 / moe_ep of the assignments; it reads its min(experts, n x top-k) / moe_ep activated
    experts' three (gate, up, down) matrices once and does 2 FLOPs per weight per assignment.
    `hit`, `assign`: the experts a rank reads and the assignments it gets at each M_GRID count, where
    not balanced routing's (served)."""
    h, f, k, e, tp, ep = (float(x) for x in shape)
    n = np.asarray(M_GRID, float)
    cols = 3.0 * h * f / tp  # weights of one expert on one rank
    hit = np.minimum(e, n * k) / ep if hit is None else hit
    weights = hit * cols * WEIGHT_BYTES.get(dtype, 2.0)
    flops = 2.0 * cols * (n * k / ep if assign is None else assign)
    return np.maximum(weights / bw, flops / peak)


def served(block: np.ndarray, dtype: str, shape, bw: float, peak: float, routed=None) -> np.ndarray:
    """A measured block (seconds at M_GRID) under serving's routing, not the table's. The collectors
    route n tokens evenly (AIConfigurator collector/helper.py balanced_logits @095f58a5: token i takes
    experts (i x stride / n + j x stride) mod E, stride = E / k: min(E, n k) distinct experts, each
    rank of moe_ep an equal share; DeepSeek's 256 all at 32 tokens), or, `routed` (opcost/moe_routing.py),
    rank 0's (experts, assignments) of a collection that routed the block by grouped top-k; a served
    step routes each token's top-k on its own, taken as uniform and independent
    (components/models/experts.py): E (1 - (1 - k/E)^n) distinct experts (163 of 256 at 32 tokens),
    under moe_ep > 1 the busiest rank's. The difference in ideal time (ideal) is charged at the
    block's own rate of streaming experts: its measured seconds per ideal second from one token to
    the first count at which the collector read all the experts it reads (at least 1); no less than
    the served ideal time, non-decreasing."""
    h, f, k, e, tp, ep = (int(x) for x in shape)
    n = np.asarray(M_GRID, float)
    hit = [expected_experts(e, k, x) if ep <= 1 else busiest_chip_experts(e, k, x, ep) for x in n]
    srv = ideal(dtype, shape, bw, peak, np.asarray(hit))
    bal = ideal(dtype, shape, bw, peak, *(routed or ()))
    reads = np.minimum(e, n * k) if routed is None else routed[0]
    full = int(np.argmax(reads >= reads[-1]))
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
    """The table's measured block (its key) nearest to `shape` in `dtype` or a dtype of its family
    under `backend` (_distance; ties: the first in key order), or None where the table holds no such
    block with enough points."""
    want, dts = (DTYPES.get(dtype, ""), *shape), family(dtype, backend)
    have = sorted(k for k, c in curves(path, backend).items() if k[0] in dts and len(c[0]) >= MIN_POINTS)
    return min(have, key=lambda k: _distance(want, k)) if have else None


def near_row(path: str, dtype: str, shape, bw: float, peak: float, backend: str = ""):
    """(seconds at M_GRID, the measured key it was carried from) of a block the table does not
    hold: the nearest measured block's fixed part f (its time beyond its ideal time at the first
    count, at least 0) plus the rest x ideal(wanted) / ideal(measured) at each token count,
    f + (t - f) x ratio (each ideal time of its own dtype's weights); None where the table holds
    nothing of the dtype (or of its family under `backend`)."""
    key = nearest(path, dtype, tuple(shape), backend)
    if key is None:
        return None
    row = block_row(path, key[0], key[1:], backend)
    have = ideal(key[0], key[1:], bw, peak)
    fixed = max(float(row[0] - have[0]), 0.0)
    return fixed + (row - fixed) * ideal(DTYPES.get(dtype, key[0]), shape, bw, peak) / have, key

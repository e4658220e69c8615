"""How AIConfigurator's MoE collectors routed a measured block's tokens (opcost/moe_blocks.py served).

The collectors route n tokens by balanced logits (collector/helper.py balanced_logits @095f58a5):
token t's j-th expert is (t x stride / n + j x stride) mod E (t + j x stride from n = stride on),
stride = E / k, one expert in each stride-wide range. Under a plain top-k that reads min(E, n k)
distinct experts, every rank of moe_ep an equal share (balanced). Three collections route DeepSeek-V3's
block with its grouped top-k instead: 8 groups of E / 8 experts, the 4 groups of highest top-2
score, then the top-k experts of those 4 groups, with a zero correction bias.
  - SGLang 0.5.14's: collector/cases/models/DeepseekV3ForCausalLM_cases.yaml sets
    sglang_moe_num_expert_group 8 and sglang_moe_topk_group 4 for (7168, 2048, top-8 of 256);
    collect_moe.py's correction_bias is zeros; FlashInfer's TRTLLM-gen kernel routes inside the block.
    Only that case groups (GLM-5's and Kimi's state one group).
  - vLLM 0.24.0's: collector/vllm/collect_moe.py builds vLLM's FusedMoE with use_grouped_topk for
    model_type deepseek_v3 (its config's n_group 8, topk_group 4); the monolithic TRTLLM-gen kernel
    routes inside the block.
  - TensorRT-LLM's min-latency NVFP4 cases: collector/trtllm/collect_moe.py min_latency_mode builds
    DeepseekV3Gate(n_group 8, topk_group 4), "all use deepseek setting for now", for every shape.
Balanced logits put one hot expert in every group, so every group scores the same and ties go to
the lowest index: every token takes groups 0-3, their hot experts and the lowest-index other
experts of group 0 (the rows agree: at one token moe_ep 2 reads as moe_ep 1, 81.3 against 80.8 us,
as only a rank holding all 8 chosen experts would; under the highest index it would hold none). At 4 tokens, rank 0 of moe_ep 8 then holds 8 distinct
experts and 20 assignments (balanced: 4 and 4) and the whole layer 20 experts (balanced: 32); from
32 tokens on, the layer reads 128 of 256.

Evidence in the measured rows (B200, DeepSeek's block, every split, ideal time at the HBM and dense
peaks; log correlation of measured and ideal time over the splits at one token count):
  - SGLang 0.5.14's TRTLLM-gen rows, vLLM 0.24.0's and TensorRT-LLM's min-latency ones: balanced counts
    put blocks below their ideal time, down to 0.6x, which no kernel can do; the grouped counts put
    none below 1.15x (tests/test_moe_grouped_routing.py, SGLang's rows). vLLM 0.24.0's FP8 rows
    correlate at 0.98 grouped against 0.81-0.95 balanced (4-1,024 tokens).
  - At one token the SGLang FP8 rows of moe_ep 8, 16 and 32 read 69.2, 69.9 and 69.7 us. The grouped
    counts give those ranks 5 experts each; balanced gives 1, the count of moe_ep 256 (32.8 us).
  - Collections that route with a plain top-k fit balanced counts: TensorRT-LLM's CUTLASS rows (0.91
    balanced against 0.78 grouped at 1,024 tokens) and vLLM 0.19.0's NVFP4 TRTLLM-gen rows (0.96 against
    0.73 at 4 tokens), both above 1.1x under balanced counts.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional, Sequence, Tuple

import numpy as np

from decodelab.kernel_layout import M_GRID

# kernel_source -> the blocks (hidden, expert FFN, top-k, experts) its collection routed by grouped top-k;
# None: every block
GROUPED = {
    "moe_torch_flow_min_latency": None,
    "sglang_flashinfer_trtllm_moe": ((7168, 2048, 8, 256),),
    "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic": ((7168, 2048, 8, 256),),
}
N_GROUP, TOPK_GROUP = 8, 4


def is_grouped(kernels: Sequence[str], shape) -> bool:
    """Whether every kernel a block's rows hold routed the block (shape: hidden, expert FFN, top-k,
    experts, ...) by grouped top-k."""
    if not kernels:
        return False
    block = tuple(int(x) for x in shape[:4])
    for kernel in kernels:
        if kernel not in GROUPED:
            return False
        blocks = GROUPED[kernel]
        if blocks is not None and block not in blocks:
            return False
    return block[3] % N_GROUP == 0 and block[2] <= TOPK_GROUP * block[3] // N_GROUP


def balanced_hot(n: int, experts: int, k: int) -> np.ndarray:
    """(n, k) expert ids of the collector's balanced logits (balanced_logits' selected experts)."""
    stride = -(-experts // k)
    t, j = np.arange(n)[:, None], np.arange(k)[None, :]
    if n >= stride:
        return (t + j * stride) % experts
    return (np.floor(t * stride / n).astype(int) + j * stride) % experts


def grouped_route(n: int, experts: int, k: int) -> np.ndarray:
    """(n, k) experts the grouped top-k selects on balanced logits (ties: the lowest index)."""
    score = np.ones((n, experts))
    np.put_along_axis(score, balanced_hot(n, experts, k), 2.0, axis=1)
    size = experts // N_GROUP
    top2 = np.sort(score.reshape(n, N_GROUP, size), axis=2)[:, :, -2:].sum(2)
    groups = np.argsort(-top2, axis=1, kind="stable")[:, :TOPK_GROUP]
    keep = np.zeros((n, N_GROUP), bool)
    np.put_along_axis(keep, groups, True, axis=1)
    masked = np.where(np.repeat(keep, size, axis=1), score, -1.0)
    return np.argsort(-masked, axis=1, kind="stable")[:, :k]


@lru_cache(maxsize=8)
def _routes(experts: int, k: int) -> Tuple[np.ndarray, ...]:
    """grouped_route at each M_GRID token count (the same for every split of a block)."""
    return tuple(grouped_route(int(n), experts, k) for n in M_GRID)


@lru_cache(maxsize=64)
def collected(shape: Tuple[int, ...]) -> Tuple[np.ndarray, np.ndarray]:
    """(distinct experts, token-expert assignments) on rank 0 of the block's moe_ep at each M_GRID
    token count under the grouped top-k (read-only arrays)."""
    experts, k, ep = int(shape[3]), int(shape[2]), max(int(shape[5]), 1)
    local = experts // ep
    hits, assigns = [], []
    for sel in _routes(experts, k):
        mine = sel[sel < local]
        hits.append(float(np.unique(mine).size))
        assigns.append(float(mine.size))
    out = np.asarray(hits), np.asarray(assigns)
    for a in out:
        a.setflags(write=False)
    return out


def routing_of(kernels: Sequence[str], shape) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The collector's rank-0 (experts, assignments) at M_GRID where it routed the block by grouped
    top-k, else None (balanced)."""
    return collected(tuple(int(x) for x in shape)) if is_grouped(kernels, shape) else None

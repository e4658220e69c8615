"""DeepSeek Sparse Attention (DSA: DeepSeek-V3.2-Exp / V3.2, GLM-5 `glm_moe_dsa`): multi-head latent
attention (layers.py) whose attention reads only the `index_topk` cached tokens a lightning indexer
selects for each query (DeepSeek-V3.2-Exp report, Sec. 2.1; DeepSeek's inference/model.py Indexer).

The indexer of a layer: from the query LoRA output, wq_b gives index_n_heads queries of
index_head_dim; from the hidden state, wk gives one shared index key (LayerNorm k_norm, RoPE,
quantized to FP8 with one FP32 scale per 128 elements and cached) and weights_proj one weight per
index head. Its score of a cached token s is sum_h w_h relu(q_h . k_s): 2 H_i D_i FLOPs per (query,
key) pair over EVERY cached token, then a top-k of index_topk. The reference code builds these as
plain `Linear` (not column-parallel): every tensor-parallel chip runs all index heads.

Cache per token and layer: the latent (kv_lora + rope), under an FP8 cache in FlashMLA's sparse
FP8 layout (kv_lora FP8 + one FP32 scale per 128 + the rope key in BF16: 512 + 16 + 128 = 656 B for
DeepSeek-V3.2 / GLM-5), plus the index key (index_head_dim FP8 + one FP32 scale: 128 + 4 = 132 B)
in the layers with an indexer (`index_layers`; GLM-5.2 shares one indexer over several layers).

The kernel attends one context per row, so the two reads enter as a layer mix (kv_costs.ReadModel):
the cache bytes per token B_l + B_i split into the index share f = B_i / (B_l + B_i), read for every
one of the `a` tokens held (a `full` share), and the latent share 1 - f, read for min(a, topk) (the
`sparse` share: held whole, read capped). A decode row attends X = f a + (1 - f) min(a, topk)
token-equivalents and the attention ops read B_l (attention) + B_i (indexer_score) per
token-equivalent: (B_l + B_i) X = B_i a + B_l min(a, topk) bytes, exact. Each op's FLOPs per
pair-equivalent are its own, so FLOPs are exact while a <= topk; beyond it the indexer's are
(2 H_i D_i + F_attn) f per token held instead of 2 H_i D_i and the attention's (1 - f) of its own
(docs/journal/2026-11-29-deepseek-sparse-attention.md). Serving prefill pairs take the same mix:
(1 - f) of the pairs are min(position, topk) per query (modes/serving/parts.py window_pairs).
"""

from __future__ import annotations

import math
from typing import Dict, List

from decodelab.components.ops import Op

SCALE_BLOCK = 128  # elements per FP32 scale: FlashMLA's FP8 latent tiles and the indexer key's block
SCALE_BYTES = 4.0  # one FP32 scale
ROPE_BYTES = 2.0  # FlashMLA's FP8 layout keeps the rope key in BF16


def is_dsa(m) -> bool:
    return getattr(m, "index_topk", 0) > 0 and getattr(m, "kv_lora_rank", 0) > 0


def index_share(m) -> float:
    """Share of the layers with their own indexer (index_layers; 0 = every layer)."""
    return (m.index_layers or m.n_layers) / m.n_layers


def latent_bytes(m, kv_bytes: float) -> float:
    """Cached bytes of one token's latent + rope key in one layer: FlashMLA's FP8 layout under an
    FP8 cache (kv_bytes < 2), else (kv_lora + rope) x kv_bytes."""
    lat, rope = m.kv_lora_rank, m.qk_rope_head_dim
    if kv_bytes < 2.0:
        return lat * kv_bytes + math.ceil(lat / SCALE_BLOCK) * SCALE_BYTES + rope * ROPE_BYTES
    return (lat + rope) * kv_bytes


def index_bytes(m) -> float:
    """Cached bytes of one token's index key in a layer with an indexer: FP8 + FP32 scales."""
    return m.index_head_dim * 1.0 + math.ceil(m.index_head_dim / SCALE_BLOCK) * SCALE_BYTES


def cache_bytes(m, kv_bytes: float) -> float:
    """Cached bytes per token and layer, layer-averaged: latent + the index key's share."""
    return latent_bytes(m, kv_bytes) + index_share(m) * index_bytes(m)


def layer_mix(m, kv_bytes: float) -> Dict[str, float]:
    """The layer mix of kv_costs.layer_mix: the index key's share of the cache bytes read for every
    token (`full`), the latent's read for the top-k (`sparse`, `topk`)."""
    idx = index_share(m) * index_bytes(m)
    lat = latent_bytes(m, kv_bytes)
    return {
        "full": idx / (lat + idx),
        "sliding": 0.0,
        "state": 0.0,
        "window": 0.0,
        "state_tokens": 0.0,
        "sparse": lat / (lat + idx),
        "topk": float(m.index_topk),
    }


def indexer_params(m) -> float:
    """Indexer parameters per layer, layer-averaged: wq_b, wk, k_norm (LayerNorm: weight + bias),
    weights_proj."""
    hi, di = m.index_n_heads, m.index_head_dim
    q_in = m.q_lora_rank or m.d_model
    return index_share(m) * (q_in * hi * di + m.d_model * di + 2 * di + m.d_model * hi)


def _scaled(ops: List[Op], f: float) -> List[Op]:
    """`ops` with their weights and per-token / per-context costs x f (the indexer's layer share)."""
    if f >= 1.0:
        return ops
    names = ("weight_bytes", "flops_per_token", "act_bytes_per_token", "kv_write_per_token")
    names += ("kv_read_per_ctx", "attn_flops_per_ctx", "act_bytes_per_ctx")
    for op in ops:
        for n in names:
            setattr(op, n, getattr(op, n) * f)
    return ops


def indexer_ops(m, gemm, w_bytes: float, act_bytes: float) -> List[Op]:
    """One layer's indexer on every chip (all index heads): the query and key projections, the
    key's norm + RoPE + FP8 write (and the query's FP8 quantization), and the score pass over the
    cached index keys with its top-k (per token-equivalent of the layer mix: module docstring)."""
    L, d, hi, di = m.n_layers, m.d_model, m.index_n_heads, m.index_head_dim
    rope, topk = m.qk_rope_head_dim, m.index_topk
    ops = [
        gemm("indexer_q_proj", m.q_lora_rank or d, hi * di),
        gemm("indexer_k_proj", d, di),
        gemm("indexer_weights_proj", d, hi),
        Op(
            "indexer_k_write",
            "elementwise",
            repeat=L,
            weight_bytes=2.0 * di * w_bytes,  # k_norm weight + bias
            # LayerNorm of the key, RoPE of key and queries, FP8 quantization of both
            flops_per_token=8.0 * di + 6.0 * (hi + 1) * rope + 3.0 * (hi + 1) * di,
            act_bytes_per_token=(hi + 1) * di * (act_bytes + 1.0),
            kv_write_per_token=index_bytes(m),
        ),
        Op(
            "indexer_score",
            "attention",
            repeat=L,
            kv_read_per_ctx=index_bytes(m),
            attn_flops_per_ctx=2.0 * hi * di + 2.0 * hi,  # q.k per head, relu, weighted sum
            act_bytes_per_ctx=2.0 * 4.0,  # FP32 logits written, read by the top-k
            # FP8 queries and FP32 head weights read, the top-k indices (int32) written and read
            act_bytes_per_token=hi * di * 1.0 + hi * 4.0 + 2.0 * 4.0 * topk,
        ),
    ]
    return _scaled(ops, index_share(m))

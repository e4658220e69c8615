"""Block-sparse GQA attention (MiniMax-M3's sparse layers, config.json `sparse_attention_config`; vLLM
models/minimax_m3 MiniMaxM3SparseAttention, SGLang minimax_m3.py, TensorRT-LLM modeling_minimaxm3.py): GQA
attention whose KV heads each read only the `index_topk` tokens (16 blocks of 128, the query's own block
among them) a lightning indexer picks. The indexer of a sparse layer: index_q (d -> index_n_heads x
index_head_dim) and one shared index key (d -> index_head_dim, cached per token at the cache's dtype), both
normed and partly rotated like q and k; a block's score is the largest q . k over its tokens, so every
cached index key is read: 2 H_i D_i FLOPs per (query, key) pair. The leading `dense_attention_layers`
attend densely and have no indexer. Every layer keeps every token's K and V.

Like DSA (dsa.py), the reads enter as a layer mix of the cache bytes per token: the sparse layers' K and V
are the `sparse` share (held whole, read for min(a, topk)), the dense layers' K and V and the index keys
the `full` share: bytes read per decode step are exact; FLOPs ride on each op's own per-pair figure (exact
while a <= topk; beyond it the indexer's are understated, as DSA's)."""

from __future__ import annotations

from typing import Dict, List

from decodelab.components.ops import Op


def is_msa(m) -> bool:
    return (
        getattr(m, "index_topk", 0) > 0
        and not getattr(m, "kv_lora_rank", 0)
        and not getattr(m, "compress_ratios", None)
    )


def n_sparse(m) -> int:
    return m.n_layers - getattr(m, "dense_attention_layers", 0)


def layer_mix(m, kv_per_layer: float, kv_bytes: float) -> Dict[str, float]:
    """kv_costs.layer_mix: `kv_per_layer` (K and V of one layer and token, bytes), the index key at the cache's dtype."""
    idx = n_sparse(m) * m.index_head_dim * kv_bytes
    total = m.n_layers * kv_per_layer + idx
    sparse = n_sparse(m) * kv_per_layer / total
    return {
        "full": 1.0 - sparse,
        "sliding": 0.0,
        "state": 0.0,
        "window": 0.0,
        "state_tokens": 0.0,
        "sparse": sparse,
        "topk": float(m.index_topk),
    }


def index_bytes(m, kv_bytes: float) -> float:
    """Index-key bytes per token over all layers."""
    return n_sparse(m) * m.index_head_dim * kv_bytes


def indexer_params(m) -> float:
    """Indexer parameters per layer, layer-averaged: index_q, index_k and their per-head norms."""
    hi, di = m.index_n_heads, m.index_head_dim
    return n_sparse(m) * (m.d_model * (hi + 1) * di + 2 * di) / m.n_layers


def indexer_ops(m, gemm, act_bytes: float, kv_bytes: float) -> List[Op]:
    """The sparse layers' indexer on every chip (vLLM fuses index_q and index_k into the QKV GEMM; costed as a
    GEMM of their own): the projections, norm + RoPE + the index key's write, the score pass over the cached
    index keys with its per-block max and top-k (per token-equivalent of the layer mix)."""
    n, hi, di = n_sparse(m), m.index_n_heads, m.index_head_dim
    ops = [
        gemm("indexer_qk_proj", m.d_model, (hi + 1) * di),
        Op(
            "indexer_k_write",
            "elementwise",
            repeat=n,
            flops_per_token=(hi + 1) * di * 7.0,  # per-head norm and partial RoPE of queries and key
            act_bytes_per_token=2.0 * (hi + 1) * di * act_bytes,
            kv_write_per_token=di * kv_bytes,
        ),
        Op(
            "indexer_score",
            "attention",
            repeat=n,
            kv_read_per_ctx=di * kv_bytes,
            attn_flops_per_ctx=2.0 * hi * di,
            act_bytes_per_token=hi
            * di
            * act_bytes,  # the queries; block scores and top-k: a few bytes a block
        ),
    ]
    ops[0].repeat = n
    return ops

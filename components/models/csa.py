"""Compressed attention (`arch: csa`; DeepSeek-V4 Flash / Pro, config.json model_type `deepseek_v4`),
as DeepSeek's reference inference/model.py (Attention, Compressor, Indexer, Block.hc_pre / hc_post)
and vLLM's deepseek_v4.py / deepseek_v4_attention.py build it.

Attention of one layer: one KV head of head_dim (448 + a 64-dim RoPE part), used as both key and
value. Queries: wq_a (d -> q_lora, replicated; vLLM fuses it with wkv, d -> head_dim, as
fused_wqa_wkv) + RMSNorm, wq_b (q_lora -> heads x head_dim, split by heads), a weightless per-head
RMSNorm and RoPE. Every layer keeps its last `sliding_window` raw tokens; a layer of ratio r > 0
(`compress_ratios`) also caches one entry per r tokens, a softmax-gated pool of its tokens (the
Compressor: wkv and wgate, d -> coff x head_dim each, BF16, coff = 2 for the overlapping ratio 4,
else 1; its not-yet-pooled rows are a per-sequence fp32 state of coff x r rows of 2 coff head_dim).
Ratio-128 layers attend every entry; ratio-4 layers (INDEXED_RATIO) the top `index_topk` a lightning
indexer picks (queries from q_lora: index_n_heads x index_head_dim; weights_proj d -> index_n_heads;
keys from a ratio-4 compressor of index_head_dim). One softmax over window and entries (plus a
learned sink). Output: inverse RoPE, then grouped low rank: the heads in o_groups groups, each
(heads / groups) x head_dim -> o_lora_rank (wo_a), then G o_lora_rank -> d (wo_b, row-parallel).

Cache (FlashMLA's fp8_ds_mla layout, vLLM's and SGLang's default; both engines require an FP8 cache):
448 FP8 + 7 ue8m0 scales + 1 pad + 64 BF16 = 584 B per window token or entry; an index key 128 FP8 +
one fp32 scale = 132 B. Per context token: sum over layers of 584 / r, + 132 / 4 in the ratio-4
layers (Flash 3,850 B); each layer's window 128 x 584 B and the compressor states are per sequence.
The KV read model (kv_costs.ReadModel) takes the window as the `sliding` share (window
sliding_window), the ratio-4 entries as the `sparse` share (read for min(a, 4 index_topk)
token-equivalents) and the ratio-128 entries with the index keys as the `full` share: bytes read per
decode step are exact. FLOPs ride on the bytes (attention: 4 head_dim per head and 584 B entry;
indexer: 2 H_i D_i + 2 H_i per 132 B key): exact while the context is within the window, beyond it the
shares' fixed split overstates the attention's and understates the indexer's (docs/kv_policies.md,
"Limits"; journal 2026-11-29-deepseek-v4.md).

Residual stream: hc_mult copies of d (manifold-constrained hyper-connections). Before each sublayer
hc_pre mixes them (a 24 x hc d fp32 GEMV, Sinkhorn on a 4 x 4) into the sublayer's input; after it
hc_post writes the hc copies back. FFN: MoE in every layer (the first num_hash_layers route by a
token-id table; the gate GEMM still runs for the weights): experts.py.
"""

from __future__ import annotations

import math
from typing import Dict, List

from decodelab.components.models import dsa
from decodelab.components.ops import Op
from decodelab.errors import ConfigError

INDEXED_RATIO = 4  # reference Attention: an Indexer iff compress_ratio == 4
SCALE_BLOCK = 64  # FP8 nope dims per ue8m0 scale in fp8_ds_mla
ENTRY_ALIGN = 8  # fp8_ds_mla pads an entry to 8 bytes (448 + 7 + 1 + 128 = 584)
MIN_HEADS = 64  # FlashMLA pads a chip's query heads up to 64 (vLLM / SGLang padded_heads)
BF16 = 2.0
FP32 = 4.0


def is_csa(m) -> bool:
    return bool(getattr(m, "compress_ratios", None))


def ratios(m) -> List[int]:
    """The main decoder layers' compression ratios (config.json compress_ratios; an MTP layer's entry
    after them is not read)."""
    return [int(r) for r in list(m.compress_ratios)[: m.n_layers]]


def n_ratio(m, r: int) -> int:
    return sum(1 for x in ratios(m) if x == r)


def entry_bytes(m, kv_bytes: float) -> float:
    """Bytes of one cached window token or compressed entry: fp8_ds_mla under an FP8 cache (nope FP8 +
    ue8m0 scales + BF16 RoPE part, padded to 8), else head_dim x kv_bytes."""
    rope, nope = m.qk_rope_head_dim, m.head_dim - m.qk_rope_head_dim
    if kv_bytes < 2.0:
        raw = nope * kv_bytes + math.ceil(nope / SCALE_BLOCK) + rope * BF16
        return float(math.ceil(raw / ENTRY_ALIGN) * ENTRY_ALIGN)
    return float(m.head_dim * kv_bytes)


def compressed_bytes(m, kv_bytes: float) -> float:
    """Cached bytes per context token over all layers beyond the windows: entries and index keys."""
    e = entry_bytes(m, kv_bytes)
    out = sum(e / r for r in ratios(m) if r > 0)
    return out + n_ratio(m, INDEXED_RATIO) * dsa.index_bytes(m) / INDEXED_RATIO


def kv_bytes_per_token(m, kv_bytes: float) -> float:
    """Per token over all layers, the windows counted as if they kept every token (the sliding
    share of layer_mix holds only the window)."""
    return m.n_layers * entry_bytes(m, kv_bytes) + compressed_bytes(m, kv_bytes)


def layer_mix(m, kv_bytes: float) -> Dict[str, float]:
    """kv_costs.layer_mix: the windows (`sliding`), the ratio-4 entries read for the indexer's top-k
    (`sparse`, in token-equivalents: INDEXED_RATIO x index_topk), the rest read whole (`full`)."""
    total, e = kv_bytes_per_token(m, kv_bytes), entry_bytes(m, kv_bytes)
    window = m.n_layers * e / total
    sparse = n_ratio(m, INDEXED_RATIO) * e / INDEXED_RATIO / total
    return {
        "full": 1.0 - window - sparse,
        "sliding": window,
        "state": 0.0,
        "window": float(m.sliding_window),
        "state_tokens": 0.0,
        "sparse": sparse,
        "topk": float(INDEXED_RATIO * m.index_topk),
    }


def _coff(r: int) -> int:
    return 2 if r == INDEXED_RATIO else 1


def _compressor_params(m, r: int, dim: int) -> int:
    c = _coff(r) * dim
    return 2 * m.d_model * c + r * c + dim  # wkv, wgate, ape, norm


def attn_params(m) -> float:
    """Attention parameters per layer, layer-averaged: the core projections and sink, each layer's
    compressor, the ratio-4 layers' indexer (wq_b, weights_proj, its compressor), the hyper-connection
    mixers of both sublayers."""
    d, h, hd, ql = m.d_model, m.n_heads, m.head_dim, m.q_lora_rank
    core = (
        d * ql + ql + ql * h * hd + d * hd + hd + m.o_lora_rank * h * hd + m.o_groups * m.o_lora_rank * d + h
    )
    hi, di = m.index_n_heads, m.index_head_dim
    extra = sum(_compressor_params(m, r, hd) for r in ratios(m) if r > 0)
    n4 = n_ratio(m, INDEXED_RATIO)
    extra += n4 * (ql * hi * di + d * hi + _compressor_params(m, INDEXED_RATIO, di))
    hc = 2 * ((2 + m.hc_mult) * m.hc_mult * (m.hc_mult * d + 1) + 3) if m.hc_mult > 1 else 0
    return core + extra / m.n_layers + hc


def _state_ops(name: str, n: int, r: int, dim: int, entry: float, d: int) -> List[Op]:
    """A compressor of ratio r over `dim`-wide rows in n layers: its BF16 wkv + wgate GEMM, then the
    pooling kernel with its fp32 state of coff r rows (one row written per token, coff rows read back
    per token on average at the pooling) and the entry written every r tokens."""
    c = _coff(r) * dim
    row = 2.0 * c * FP32  # kv half + score half of one pending token
    gemm = Op(
        name,
        "gemm",
        repeat=n,
        weight_bytes=2.0 * d * c * BF16,
        gemm_dtype="bf16",
        flops_per_token=4.0 * d * c,
        act_bytes_per_token=d * BF16 + 2.0 * c * FP32,
        gemm_n=2.0 * c,
        gemm_k=d,
    )
    pool = Op(
        f"{name}_pool",
        "elementwise",
        repeat=n,
        weight_bytes=r * c * FP32 + dim * BF16,  # the position bias (ape) and the norm
        flops_per_token=8.0 * c,
        act_bytes_per_token=row * (1.0 + _coff(r)),
        kv_write_per_token=entry / r,
        state_bytes_per_seq=_coff(r) * r * row,
    )
    return [gemm, pool]


def compressor_ops(m, kv_bytes: float) -> List[Op]:
    """Each compressed layer kind's compressor, and the ratio-4 layers' index-key compressor."""
    d, hd, e = m.d_model, m.head_dim, entry_bytes(m, kv_bytes)
    kinds = sorted({r for r in ratios(m) if r > 0})
    ops = [op for r in kinds for op in _state_ops(f"compressor_c{r}", n_ratio(m, r), r, hd, e, d)]
    n4 = n_ratio(m, INDEXED_RATIO)
    if n4:
        ops += _state_ops("indexer_compressor", n4, INDEXED_RATIO, m.index_head_dim, dsa.index_bytes(m), d)
    return ops


def indexer_ops(m, gemm, act_bytes: float) -> List[Op]:
    """The ratio-4 layers' indexer on every chip (vLLM keeps it replicated): query projection from
    q_lora, head weights, the queries' RoPE + Hadamard + FP8, the score pass over the cached index keys
    per token-equivalent of the layer mix (a key stands for INDEXED_RATIO tokens) with its top-k."""
    n4 = n_ratio(m, INDEXED_RATIO)
    if not n4:
        return []
    hi, di, rope = m.index_n_heads, m.index_head_dim, m.qk_rope_head_dim
    ops = [gemm("indexer_q_proj", m.q_lora_rank, hi * di), gemm("indexer_weights_proj", m.d_model, hi)]
    ops[1].weight_bytes, ops[1].gemm_dtype = m.d_model * hi * BF16, "bf16"
    ops += [
        Op(
            "indexer_q_rotate",
            "elementwise",
            repeat=n4,
            flops_per_token=6.0 * hi * rope + 2.0 * hi * di * math.log2(di) + 3.0 * hi * di,
            act_bytes_per_token=hi * di * (act_bytes + 1.0),
        ),
        Op(
            "indexer_score",
            "attention",
            repeat=n4,
            kv_read_per_ctx=dsa.index_bytes(m) / INDEXED_RATIO,
            attn_flops_per_ctx=(2.0 * hi * di + 2.0 * hi) / INDEXED_RATIO,
            act_bytes_per_ctx=2.0 * FP32 / INDEXED_RATIO,  # fp32 logits written, read by the top-k
            act_bytes_per_token=hi * di * 1.0 + hi * FP32 + 2.0 * FP32 * m.index_topk,
        ),
    ]
    for op in ops[:2]:
        op.repeat = n4
    return ops


def attention_ops(m, h: int, tp: int, gemm, elementwise, act_bytes: float, kv_bytes: float) -> List[Op]:
    """One chip's attention of a layer (h of the heads, o_groups / tp of the output groups), between the
    input norm and the all-reduce: module docstring."""
    d, hd, ql, rope, L = m.d_model, m.head_dim, m.q_lora_rank, m.qk_rope_head_dim, m.n_layers
    if m.o_groups % tp:  # vLLM: wo_a is column-parallel over whole groups
        raise ConfigError(
            f"model.o_groups={m.o_groups} must be a multiple of the attention's tensor parallel {tp}"
        )
    e = entry_bytes(m, kv_bytes)
    per_ctx = e + sum(e / r for r in ratios(m) if r > 0) / L  # window + entries, layer-averaged
    groups = m.o_groups // tp
    flops_entry = 4.0 * hd * max(h, MIN_HEADS)  # q.k and p.v over the shared 512-dim vector
    ops = [
        gemm("qkv_a_proj", d, ql + hd),  # wq_a and wkv, replicated
        elementwise("q_a_norm", "norm", ql, ql, ql),
        gemm("q_b_proj", ql, h * hd),
        Op(
            "qk_norm_rope_write",
            "elementwise",
            repeat=L,
            weight_bytes=hd * act_bytes,
            flops_per_token=4.0 * (h + 1) * hd + 6.0 * (h + 1) * rope,
            act_bytes_per_token=2.0 * (h + 1) * hd * act_bytes,
            kv_write_per_token=e,  # the window's raw token
        ),
        *compressor_ops(m, kv_bytes),
        *indexer_ops(m, gemm, act_bytes),
        Op(
            "attention",
            "attention",
            repeat=L,
            kv_read_per_ctx=per_ctx,
            attn_flops_per_ctx=flops_entry * per_ctx / e,
            act_bytes_per_token=2.0 * h * hd * act_bytes,
        ),
        elementwise("o_inv_rope_quant", "elementwise", h * hd, h * hd),
        gemm("o_a_proj", m.n_heads // m.o_groups * hd, groups * m.o_lora_rank),  # per group, batched
        gemm("o_b_proj", groups * m.o_lora_rank, d),
    ]
    return ops


def hc_ops(m, act_bytes: float) -> List[Op]:
    """Both sublayers' hyper-connection mixing of every layer: hc_pre (the fp32 mixing GEMV over the hc
    streams, Sinkhorn, the weighted sum into the sublayer's input) and hc_post (the streams rewritten)."""
    if m.hc_mult <= 1:
        return []
    d, hc, n = m.d_model, m.hc_mult, 2 * m.n_layers
    mix = (2 + hc) * hc
    return [
        Op(
            "hc_pre",
            "elementwise",
            repeat=n,
            weight_bytes=mix * hc * d * FP32,
            flops_per_token=2.0 * mix * hc * d + 4.0 * hc * d,
            act_bytes_per_token=hc * d * BF16 + d * act_bytes,
            mhc=("pre", hc, d),
        ),
        Op(
            "hc_post",
            "elementwise",
            repeat=n,
            flops_per_token=2.0 * hc * hc * d + 2.0 * hc * d,
            act_bytes_per_token=2.0 * hc * d * BF16 + d * act_bytes,
            mhc=("post", hc, d),
        ),
    ]

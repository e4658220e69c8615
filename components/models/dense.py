"""Dense decoder-only transformer (GQA or MHA attention, SwiGLU or GELU MLP), tensor-parallel.

Operator list follows the ~10 kernels per decoder layer an inference engine such as
TensorRT-LLM issues (Kernel Looping paper, shared/reference/hardware.md): input norm, QKV GEMM,
(per-head q/k RMSNorm for `qk_norm` models), RoPE + KV write, attention, output projection,
all-reduce, residual add + norm, gate/up GEMM, activation, down projection, all-reduce, residual
add. Two of those kernels are the engine's choice (the engine file's kernel fields, passed in as
plain flags): `fused_add_norm` runs the residual add inside the next layer's input RMSNorm (one
kernel per layer fewer), `separate_rope` runs RoPE as a kernel of its own after the q/k norm
instead of inside the attention call. Per-chip costs under tensor parallel `tp`:
heads, KV heads (replicated when tp > kv_heads), FFN columns and vocabulary are split `tp` ways;
each all-reduce moves 2 (tp-1)/tp of the activation per chip (ring algorithm).
"""

from __future__ import annotations

from dataclasses import replace

from typing import List

from decodelab.components.models import attn_dp
from decodelab.components.ops import Op, lm_head_dtype, op_builders


def kv_heads_per_chip(n_kv_heads: int, tp: int) -> int:
    """KV heads stored on each chip; replicated when there are more chips than KV heads."""
    return max(n_kv_heads // tp, 1)


def param_counts(m) -> dict:
    """Parameter counts (whole model, unsharded) by part."""
    d, hd = m.d_model, m.head_dim
    q_out, kv_out = m.n_heads * hd, m.n_kv_heads * hd
    attn = d * q_out + 2 * d * kv_out + q_out * d
    if m.qkv_bias:
        attn += q_out + 2 * kv_out
    n_mats = 3 if m.ffn_act == "swiglu" else 2
    mlp = n_mats * d * m.ffn_dim
    norms = 2 * d + (2 * hd if m.qk_norm else 0)  # input and residual norms (+ q/k norms)
    embed = m.vocab_size * d
    head = 0 if m.tied_embeddings else m.vocab_size * d
    layer = attn + mlp + norms
    return {
        "embed": embed,
        "lm_head": head,
        "layer": layer,
        "final_norm": d,
        "total": embed + head + m.n_layers * layer + d,
    }


def kv_bytes_per_token(m, kv_bytes: float) -> float:
    """KV-cache bytes per token, all layers, unsharded: 2 * layers * kv_heads * head_dim * bytes."""
    return 2.0 * m.n_layers * m.n_kv_heads * m.head_dim * kv_bytes


def input_norm(elementwise, d: int, fused_add_norm: bool) -> Op:
    """A layer's input RMSNorm; `fused_add_norm`: with the previous layer's residual add inside it
    (reads the layer output and the residual, writes both: the same kernel as the post-attention
    residual add + norm). Layer 0 has no add to fuse and the final norm takes the last layer's, so
    the add's count per step stays one per layer."""
    n = 2 * d if fused_add_norm else d
    return elementwise("input_norm", "norm", n, n, weights=d)


def residual_add(elementwise, d: int, fused_add_norm: bool) -> List[Op]:
    """The residual add after the MLP as a kernel of its own, or none when the engine runs it inside
    the next input norm (`input_norm`)."""
    return [] if fused_add_norm else [elementwise("residual_add", "elementwise", 2 * d, d)]


def norm_ops(elementwise, d: int, fused_add_norm: bool, in_allreduce: bool = False):
    """(before the attention, after it, after the MLP): a layer's norm and residual-add kernels.
    `in_allreduce`: the engine runs each residual add + RMSNorm inside the tensor-parallel
    all-reduce before it (TensorRT-LLM AllReduceFusionOp.RESIDUAL_RMS_NORM; model.allreduce_norm_engines),
    so the layer has none of its own; layer 0's input norm is the one norm kernel left, in count
    the final norm op (the last layer's all-reduce holds the real final norm)."""
    if in_allreduce:
        return [], [], []
    post = [elementwise("residual_norm", "norm", 2 * d, 2 * d, weights=d)]
    return [input_norm(elementwise, d, fused_add_norm)], post, residual_add(elementwise, d, fused_add_norm)


def gqa_attention_ops(
    m, h: int, kvh: int, gemm, elementwise, act_bytes: float, kv_bytes: float, o_bias=0.0, separate_rope=False
):
    """A GQA/MHA attention block on one chip (`h` query and `kvh` KV heads): QKV GEMM, per-head
    q/k RMSNorm for `qk_norm` models (Qwen3 q_norm / k_norm: one kernel per layer), RoPE + KV write
    (inside the attention call), attention, output projection (bias `o_bias`). `separate_rope`:
    RoPE is a kernel of its own (reads and writes q and k, 6 FLOPs per element), the attention
    call keeps only the KV write."""
    d, hd, L = m.d_model, m.head_dim, m.n_layers
    vd = v_dim(m)
    qkv_out = (h + kvh) * hd + kvh * vd
    qk = (h + kvh) * hd  # q and k elements of one token, this chip
    kv_tok = kvh * (hd + vd) * kv_bytes  # K and V of one token, one layer, this chip
    ops = [gemm("qkv_proj", d, qkv_out, bias=qkv_out if m.qkv_bias else 0)]
    if m.qk_norm:
        ops.append(elementwise("qk_norm", "norm", qk, qk, weights=2 * hd))
    if separate_rope:
        ops.append(
            Op(
                "rope",
                "elementwise",
                repeat=L,
                flops_per_token=6.0 * qk,
                act_bytes_per_token=2.0 * qk * act_bytes,
            )
        )
    return ops + [
        Op(
            "rope_kv_write",
            "elementwise",
            repeat=L,
            flops_per_token=0.0 if separate_rope else 6.0 * qk,
            act_bytes_per_token=2.0 * qkv_out * act_bytes,
            kv_write_per_token=kv_tok,
            in_attention_call=True,
            attn_head_dim=hd,
        ),
        Op(
            "attention",
            "attention",
            repeat=L,
            kv_read_per_ctx=kv_tok,
            attn_flops_per_ctx=2.0 * h * (hd + vd),  # QK^T and PV, multiply-add = 2
            act_bytes_per_token=h * (hd + vd) * act_bytes,
            attn_heads=h,
            attn_kv_heads=kvh,
            attn_head_dim=hd,
        ),
        gemm("o_proj", h * vd, d, bias=o_bias),
    ]


def qk_norm_reduce(ops: List[Op], m, tp: int) -> List[Op]:
    """A q/k RMSNorm over the layer's whole q and k (model.qk_norm_scope layer) on `tp` chips: each chip
    holds 1/tp of the heads, so the norm needs the sum of squares of all of them: a kernel sums its share,
    an all-reduce of 2 fp32 per token (q's, k's) adds the chips', the norm op then scales (vLLM 0.19
    MiniMaxText01RMSNormTP.forward_qk, SGLang 0.5.9 MiniMaxM2RMSNormTP.forward_qk: one all-reduce of
    the two sums per layer). On one chip, or per-head norms, the ops as they are."""
    if not (m.qk_norm and getattr(m, "qk_norm_scope", "head") == "layer" and tp > 1):
        return ops
    at = next((i for i, op in enumerate(ops) if op.name == "qk_norm"), None)
    if at is None:
        return ops
    norm = ops[at]
    sums = replace(
        norm, name="qk_norm_sum", act_bytes_per_token=norm.act_bytes_per_token / 2.0, weight_bytes=0.0
    )
    reduce = attn_dp.ring_allreduce_op("qk_norm_allreduce", tp, 8.0, norm.repeat)  # two fp32 a token
    return ops[:at] + [sums, reduce] + ops[at:]


def v_dim(m) -> int:
    """A GQA/MHA value head's width: head_dim, or v_head_dim where the model's differs (MiMo-V2-Flash: 192-dim
    queries and keys, 128-dim values)."""
    return getattr(m, "v_head_dim", 0) or m.head_dim


def build_ops(
    m,
    tp: int,
    w_bytes: float,
    act_bytes: float,
    kv_bytes: float,
    tokens_per_step: float = 1.0,
    mla_mapping: str = "replicated",
    moe_mapping: str = "tp",
    moe_ep: int = 0,
    attention_dp: int = 1,
    group_tokens: bool = False,
    fused_add_norm: bool = False,
    separate_rope: bool = False,
    norm_in_allreduce: bool = False,
) -> List[Op]:
    """Per-chip operator list for one decode/prefill step of a dense model (every weight is read
    whatever the step's tokens: `tokens_per_step` matters only to MoE models and data-parallel
    attention (`attention_dp` groups, attn_dp.py); `mla_mapping` only to MLA models,
    `moe_mapping`, `moe_ep` only to MoE models). `group_tokens`: serving under data-parallel attention
    (attn_dp.py "In serving"). `fused_add_norm`, `separate_rope`, `norm_in_allreduce`: the engine's
    kernels (module docstring, norm_ops)."""
    group_tokens = group_tokens and attention_dp > 1
    share_batch = float(attention_dp) if group_tokens else tokens_per_step  # as layers.py
    d, L = m.d_model, m.n_layers
    h = m.n_heads // (tp // attention_dp)  # attention: tensor-parallel within a group
    kvh = kv_heads_per_chip(m.n_kv_heads, tp // attention_dp)
    ffn = m.ffn_dim // tp
    n_up = 2 if m.ffn_act == "swiglu" else 1
    gemm, elementwise = op_builders(L, w_bytes, act_bytes)
    fuse = norm_in_allreduce and tp > 1 and attention_dp == 1
    pre, post, tail = norm_ops(elementwise, d, fused_add_norm, fuse)
    ops = [
        Op("embedding", "embed", stage="pre", act_bytes_per_token=2.0 * d * w_bytes),
        *pre,
    ]  # gather a row, write it
    attn = gqa_attention_ops(m, h, kvh, gemm, elementwise, act_bytes, kv_bytes, separate_rope=separate_rope)
    ops += qk_norm_reduce(attn, m, tp // attention_dp)
    if tp > 1:
        ops.append(attn_dp.collective_op("attn_allreduce", m, tp, attention_dp, share_batch, act_bytes, 0))
    ffn_block = [
        gemm("gate_up_proj", d, n_up * ffn),
        elementwise("activation", "elementwise", n_up * ffn, ffn),
        gemm("down_proj", ffn, d),
    ]
    ops += [*post, *ffn_block]
    if tp > 1:
        ops.append(attn_dp.collective_op("mlp_allreduce", m, tp, attention_dp, share_batch, act_bytes, 1))
    if group_tokens:
        attn_dp.mark_replica(ffn_block + [op for op in ops if op.kind == "collective"])
    elif attention_dp > 1:
        attn_dp.remap(ops, attention_dp, tokens_per_step)
    return ops + tail + head_ops(m, tp, w_bytes, act_bytes, "")


def head_ops(m, tp: int, w_bytes: float, act_bytes: float, dense_dtype: str) -> List[Op]:
    """The ops after the decoder stack: final norm, LM head (vocabulary split over the tp chips, its
    logits all-gathered; 16-bit weights under quantized ones, components/ops.lm_head_dtype) and sampling."""
    d, v = m.d_model, m.vocab_size
    return [
        Op(
            "final_norm",
            "norm",
            stage="post",
            weight_bytes=d * w_bytes,
            flops_per_token=4.0 * d,
            act_bytes_per_token=2.0 * d * act_bytes,
        ),
        Op(
            "lm_head",
            "gemm",
            stage="post",
            weight_bytes=d * (v / tp) * lm_head_dtype(w_bytes)[0],
            gemm_dtype="bf16" if dense_dtype else lm_head_dtype(w_bytes)[1],
            flops_per_token=2.0 * d * v / tp,
            act_bytes_per_token=(d + v / tp) * act_bytes,
            link_bytes_per_token=(tp - 1) / tp * v * 4.0 if tp > 1 else 0.0,
            n_collectives=1 if tp > 1 else 0,
            gemm_n=v / tp,
            gemm_k=d,
            coll_kind="all_gather" if tp > 1 else "",
            coll_bytes_per_token=v * 4.0 if tp > 1 else 0.0,
        ),
        Op("sampling", "sample", stage="post", flops_per_token=5.0 * v, act_bytes_per_token=v * 4.0),
    ]

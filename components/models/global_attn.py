"""A GQA/MHA layer's attention block of every layer kind (gqa_block), with full-attention layers of a shape of
their own (Gemma 4: config.json `global_head_dim`,
`num_global_key_value_heads`, `attention_k_eq_v`, transformers modeling_gemma4.py Gemma4TextAttention;
MiMo-V2-Flash: its `swa_*` keys, hf_mimo_v2.py): a hybrid model's `full` layers attend with
`global_head_dim` and `global_kv_heads`, its `sliding` layers with head_dim and n_kv_heads, values of
v_head_dim where set (dense.v_dim). With `global_k_eq_v` the full layers' checkpoint has no v_proj (the
value is the key projection's output, normed without weight and not rotated); vLLM and SGLang load k_proj
into a v slot (vllm models/gemma4.py load_weights, SGLang gemma4_causal.py), so the GEMM and the cache keep
both K and V: only the parameter count drops it.

Each kind's attention ops carry their own shape and repeat = that kind's layers; the cache bytes per
token sum the kinds, and the read model's shares are a chip's byte shares (layers.kv_layer_mix: the KV
heads each chip holds, replicated where the chips outnumber them)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable, List

from decodelab.components.models import linear_attn, msa
from decodelab.components.models.dense import gqa_attention_ops, kv_heads_per_chip, qk_norm_reduce
from decodelab.components.ops import Op


def has_global_shape(m) -> bool:
    return bool(getattr(m, "global_head_dim", 0) or getattr(m, "global_kv_heads", 0))


def global_dims(m):
    """(head_dim, KV heads) of the full-attention layers."""
    return (getattr(m, "global_head_dim", 0) or m.head_dim, getattr(m, "global_kv_heads", 0) or m.n_kv_heads)


def kind_dims(m, kind: str):
    """(head dim, KV heads, value width) of a layer of `kind`: the full layers' own where the model gives them;
    values of v_head_dim where set, else of the kind's head dim."""
    hd, kvh = global_dims(m) if kind == "full" else (m.head_dim, m.n_kv_heads)
    return hd, kvh, getattr(m, "v_head_dim", 0) or hd


def kind_elems(m, kind: str, tp: int = 1) -> int:
    """KV elements per token of one layer of `kind` on one chip of `tp` (K and V of its KV heads, replicated
    where the chips outnumber them: dense.kv_heads_per_chip)."""
    hd, kvh, vd = kind_dims(m, kind)
    return kv_heads_per_chip(kvh, tp) * (hd + vd)


def split(ops: List[Op], m, n_full: int, n_sliding: int, full_ops: Callable[[object], List[Op]]) -> List[Op]:
    """`ops` (the sliding layers' attention, repeat set to n_sliding) and the full layers' own
    (`full_ops` of the model seen with the full layers' head_dim and KV heads, repeat n_full)."""
    for op in ops:
        op.repeat = n_sliding
    hd, kvh = global_dims(m)
    view = SimpleNamespace(
        **{k: getattr(m, k, 0) for k in ("d_model", "n_layers", "qkv_bias", "qk_norm", "v_head_dim")}
    )
    view.head_dim, view.n_kv_heads = hd, kvh
    extra = full_ops(view)
    for op in extra:
        op.repeat = n_full
        op.name = f"{op.name}_full"
    return ops + extra


def gqa_block(
    m, kinds, h: int, tp: int, gemm, elementwise, w_bytes, act_bytes, kv_bytes, separate_rope
) -> List[Op]:
    """A GQA/MHA layer's attention on one chip of `tp` (dense.gqa_attention_ops), the full layers at their own head
    dim and KV heads where the model gives them (`kinds`: every layer's, layers.layer_kinds), a block-sparse
    indexer (msa.py), then the linear layers' ops (linear_attn.py)."""
    kvh, o_bias = kv_heads_per_chip(m.n_kv_heads, tp), m.d_model if m.qkv_bias else 0
    a = gqa_attention_ops(m, h, kvh, gemm, elementwise, act_bytes, kv_bytes, o_bias, separate_rope)
    if has_global_shape(m):
        g_kvh = kv_heads_per_chip(global_dims(m)[1], tp)
        a = split(a, m, kinds.count("full"), kinds.count("sliding"), lambda v: gqa_attention_ops(
            v, h, g_kvh, gemm, elementwise, act_bytes, kv_bytes, o_bias, separate_rope))  # fmt: skip
    a += msa.indexer_ops(m, gemm, act_bytes, kv_bytes) if msa.is_msa(m) else []
    return linear_attn.attention(qk_norm_reduce(a, m, tp), m, h, tp, w_bytes, act_bytes, gemm, elementwise)

"""Shared builder of the non-dense architectures (moe.py, mla.py, hybrid.py): attention that is
GQA/MHA or MLA, FFN that is dense or mixture-of-experts, layers that are full, sliding-window or
constant-state. The operator list follows dense.py (one op per engine kernel, per-chip costs
under tensor parallel `tp`); docs/kv_policies.md, "Architectures", gives the formulas (MoE:
docs/model.md, "MoE decode step").

Mixture of experts: components/models/experts.py (gate, routing decision, expert weights read).
Multi-head latent attention: components/models/mla_attn.py (its block), mla_map.py (across chips).
"""

from __future__ import annotations

from typing import Dict, List

from decodelab.components.models.dense import head_ops, norm_ops
from decodelab.components.models import (
    attn_dp,
    attn_res,
    csa,
    dsa,
    global_attn,
    linear_attn,
    mla_attn,
    mla_map,
    msa,
)
from decodelab.components.models.experts import (
    a2a_bytes,
    expected_experts,
    ffn_ops,
    n_ffn_layers,
    n_moe_layers,
    routed_hidden,
)
from decodelab.components.ops import Op, op_builders

LAYER_KINDS = ("full", "sliding", "state", "linear", "none")


def is_mla(m) -> bool:
    return m.kv_lora_rank > 0


def layer_kinds(m) -> List[str]:
    """Kind of every decoder layer: layer_pattern repeated to n_layers (all full if empty)."""
    pat = list(m.layer_pattern) or ["full"]
    return [pat[i % len(pat)] for i in range(m.n_layers)]


def _attn_params(m) -> int:
    d = m.d_model
    if csa.is_csa(m):
        return csa.attn_params(m)
    if is_mla(m):
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (
            d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * m.n_heads * qk
            if m.q_lora_rank
            else d * m.n_heads * qk
        )
        kv = (
            d * (m.kv_lora_rank + m.qk_rope_head_dim)
            + m.kv_lora_rank
            + m.kv_lora_rank * m.n_heads * (m.qk_nope_head_dim + m.v_head_dim)
        )
        gate = d * m.n_heads * m.v_head_dim if m.attn_output_gate else 0  # Kimi-K3's g_proj
        return q + kv + m.n_heads * m.v_head_dim * d + gate + (dsa.indexer_params(m) if dsa.is_dsa(m) else 0)
    p = msa.indexer_params(m) if msa.is_msa(m) else 0
    if global_attn.has_global_shape(m):  # Gemma 4, MiMo-V2-Flash: the layer average of the two kinds
        kinds = [k for k in layer_kinds(m) if k not in ("linear", "none")]
        return p + sum(_gqa_params(m, k) for k in kinds) / len(kinds)
    return p + _gqa_params(m, "sliding")


def _gqa_params(m, kind: str) -> int:
    """A GQA/MHA layer's attention parameters at its kind's shape (global_attn.kind_dims): q (x 2 with an output
    gate), k, v (none in a full layer under global_k_eq_v), o, and their biases."""
    d, h = m.d_model, m.n_heads
    hd, kvh, vd = global_attn.kind_dims(m, kind)
    q_out = h * hd
    kv_out = kvh * hd + (0 if kind == "full" and getattr(m, "global_k_eq_v", False) else kvh * vd)  # k and v
    p = d * q_out * (2 if m.attn_output_gate else 1) + d * kv_out + h * vd * d  # gate: q_proj x 2
    return p + (q_out + kv_out + d if m.qkv_bias else 0)  # q/k/v (and o) biases


def _mats(m) -> int:
    return 3 if m.ffn_act == "swiglu" else 2


def expert_params(m) -> int:
    """One routed expert (at routed_hidden: d, or a latent MoE's latent width)."""
    return _mats(m) * routed_hidden(m) * m.expert_ffn_dim


def param_counts(m) -> Dict[str, float]:
    """Parameters (unsharded) by part; `active` = read for one token (k routed + shared experts;
    embedding and head included); `mtp` = the multi-token-prediction modules (not in total)."""
    d = m.d_model
    attn = _attn_params(m)
    norms = 2 * d + (2 * m.head_dim if m.qk_norm else 0)  # input and residual norms (+ q/k norms)
    dense_ffn = _mats(m) * d * m.ffn_dim
    moe_ffn = (m.n_experts + m.n_shared_experts) * expert_params(m) + d * m.n_experts
    if routed_hidden(m) != d:  # latent MoE: the shared expert at d, the two latent projections
        moe_ffn += (
            m.n_shared_experts * (_mats(m) * d * m.expert_ffn_dim - expert_params(m))
            + 2 * d * m.moe_latent_dim
        )
    moe_ffn += d if m.shared_expert_gate else 0
    n_moe = n_moe_layers(m)
    n_dense = n_ffn_layers(m) - n_moe
    embed = m.vocab_size * d
    head = 0 if m.tied_embeddings else m.vocab_size * d
    n_lin = linear_attn.n_linear(m)  # Gated DeltaNet / KDA / Mamba-2 layers: their own mixer, no q/k norms
    lin = linear_attn.params_per_layer(m) + 2 * d if n_lin else 0
    layers = linear_attn.n_attending(m) * (attn + norms) + n_lin * lin + n_dense * dense_ffn + n_moe * moe_ffn
    layers += attn_res.params(m)  # Kimi-K3's attention residuals
    # a layer without an FFN block has no pre-FFN norm; one without a mixer (`none`) only that norm
    layers -= getattr(m, "ffn_free_layers", 0) * d - linear_attn.n_kind(m, "none") * d
    total = embed + head + layers + d
    inactive = n_moe * max(m.n_experts - m.experts_per_token, 0) * expert_params(m)
    # an MTP module (DeepSeek-V3): one MoE decoder layer + eh_proj (2d -> d) + 3 norms; embedding
    # and output head shared with the main model
    mtp_layer = attn + norms + (moe_ffn if m.n_experts > 0 else dense_ffn)
    mtp = m.n_mtp_modules * (mtp_layer + 2 * d * d + 3 * d)
    return {
        "embed": embed,
        "lm_head": head,
        "layer": (layers / m.n_layers),
        "final_norm": d,
        "total": total,
        "active": total - inactive,
        "mtp": mtp,
    }


def streamed_params(m, tokens: float) -> float:
    """Parameters read by one step of `tokens` tokens (no embedding table: gathered by row)."""
    p = param_counts(m)
    n_moe = n_moe_layers(m)
    unread = max(m.n_experts - expected_experts(m.n_experts, m.experts_per_token, tokens), 0.0)
    table = 0 if m.tied_embeddings else p["embed"]  # tied: the head reads the table
    return p["total"] - table - n_moe * unread * expert_params(m)


def kv_elems_per_layer(m) -> int:
    """KV elements cached per token and layer (all KV heads; MLA: latent + rope key)."""
    if is_mla(m):
        return m.kv_lora_rank + m.qk_rope_head_dim
    return global_attn.kind_elems(m, "sliding")


def kv_bytes_per_token(m, kv_bytes: float) -> float:
    """KV bytes per token over all layers, as if every layer kept it (sliding and state layers
    keep less: kv_layer_mix; Gated DeltaNet layers keep no KV, linear_attn.py; sparse attention adds the index key:
    dsa.py)."""
    if csa.is_csa(m):
        return csa.kv_bytes_per_token(m, kv_bytes)
    if dsa.is_dsa(m):
        return m.n_layers * dsa.cache_bytes(m, kv_bytes)
    if is_mla(m):
        return linear_attn.n_attending(m) * kv_elems_per_layer(m) * kv_bytes
    index = msa.index_bytes(m, kv_bytes) if msa.is_msa(m) else 0.0
    kinds = [k for k in layer_kinds(m) if k not in ("linear", "none")]  # attending layers, each at its shape
    return sum(global_attn.kind_elems(m, k) for k in kinds) * kv_bytes + index


def kv_layer_mix(m, kv_bytes: float = 2.0, tp: int = 1) -> Dict[str, float]:
    """Shares of full / sliding / constant-state layers, the sliding window, and a state layer's
    state in token-equivalents (state bytes / one token's KV in one layer); over the layers that
    attend (Gated DeltaNet layers' state is their ops' own: linear_attn.py); sparse attention's
    index and latent shares (dsa.layer_mix)."""
    if csa.is_csa(m):
        return csa.layer_mix(m, kv_bytes)
    if dsa.is_dsa(m):
        return dsa.layer_mix(m, kv_bytes)
    if msa.is_msa(m):
        return msa.layer_mix(m, global_attn.kind_elems(m, "sliding", tp) * kv_bytes, kv_bytes)
    kinds = [k for k in layer_kinds(m) if k not in ("linear", "none")]
    b = {k: float(global_attn.kind_elems(m, k, tp)) for k in ("full", "sliding", "state")}  # a chip's bytes
    n = sum(b[k] for k in kinds)
    return {
        "full": kinds.count("full") * b["full"] / n,
        "sliding": kinds.count("sliding") * b["sliding"] / n,
        "state": kinds.count("state") * b["state"] / n,
        "window": float(m.sliding_window),
        "state_tokens": m.state_bytes_per_layer / (kv_elems_per_layer(m) * kv_bytes),
    }


def layer_norms(m, elementwise, fused_add_norm: bool, in_allreduce: bool):
    """dense.norm_ops (before the mixer, before the FFN, after it) with the input norm in the layers
    that have a mixer (kind `none` has none) and the pre-FFN norm in those with an FFN block
    (model.ffn_free_layers)."""
    pre, post, tail = norm_ops(elementwise, m.d_model, fused_add_norm, in_allreduce)
    for ops, n in ((pre, linear_attn.n_mixers(m)), (post, n_ffn_layers(m))):
        for op in ops:
            op.repeat = n
    return pre, post, tail


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
    dense_w_bytes: float = 0.0,
    dense_dtype: str = "",
    fused_add_norm: bool = False,
    separate_rope: bool = False,
    norm_in_allreduce: bool = False,
) -> List[Op]:
    """Per-chip operator list of one step (`dense_w_bytes` > 0: the weights outside the routed
    experts in `dense_dtype` at that many bytes, model.expert_only_dtypes); expert weights read are those `tokens_per_step`
    tokens activate (the decode batch), placed across the tp chips by `moe_mapping` over `moe_ep`
    expert-parallel groups (components/models/experts.py ep_groups); MLA attention mapped by `mla_mapping` (mla_map.py; data-
    parallel attention over all tp chips is its `data` mapping), GQA/MHA attention in
    `attention_dp` data-parallel groups (attn_dp.py). `group_tokens` (serving under data-parallel
    attention): the attention block is costed on one group's own tokens and the FFN with its
    collectives on every group's (Op.replica; attn_dp.py), balanced groups. `fused_add_norm`,
    `separate_rope`: the engine's kernels (components/models/dense.py; `separate_rope` concerns
    GQA/MHA attention, MLA attention keeps its own RoPE); `norm_in_allreduce`: under tensor-parallel
    all-reduces the layer's residual adds and norms run inside them (dense.norm_ops). DSA: dsa.py."""
    d, L = m.d_model, m.n_layers
    mapping = mla_mapping if is_mla(m) else "replicated"
    if is_mla(m) and attention_dp > 1:  # dp = tp (core/parallel.py checks it)
        mapping, attention_dp = "data", 1
    groups = tp if mapping == "data" else attention_dp
    group_tokens = group_tokens and groups > 1 and tp > 1
    # the busiest group's share of the step's sequences: the workload batch's in a static step;
    # serving costs one group's own tokens (share 1 in its attention) and 1/groups of the
    # replica's in the collectives (a batch of `groups` sequences gives exactly that share)
    share_batch = float(groups) if group_tokens else tokens_per_step
    h = mla_map.heads_per_chip(m, tp, mapping)
    ar_bytes = mla_map.collective_bytes(m, tp, mapping, act_bytes)
    coll = "all_gather" if mapping == "data" else "all_reduce"
    if attention_dp > 1:
        h = m.n_heads // (tp // attention_dp)
        before, after, n_before, n_after = attn_dp.collectives(m, tp, attention_dp, share_batch, act_bytes)
        coll = "data_parallel_attention"  # no fitted law: the link roofline (opcost/registry.py)
    own_tokens = mapping == "data" or (attention_dp > 1 and attention_dp == tp)  # a chip's own
    if moe_mapping == "a2a" and own_tokens and tp > 1 and n_moe_layers(m):
        # MoE layers: dispatch before the experts, combine after (experts.a2a_bytes), in place of
        # the all-gather and reduce-scatter the dense layers keep (layer average, as the FFN ops)
        f_moe = n_moe_layers(m) / L
        a2a = a2a_bytes(m, tp, share_batch, act_bytes)
        ar_bytes = (1.0 - f_moe) * ar_bytes + f_moe * a2a
        if attention_dp > 1:
            before, after = (1.0 - f_moe) * before + f_moe * a2a, (1.0 - f_moe) * after + f_moe * a2a
        coll = "all_to_all"  # no fitted law: the link roofline (opcost/registry.py)

    # dense_w_bytes > 0: the checkpoint quantizes only the experts (model.expert_only_dtypes)
    expert_wb, w_bytes = w_bytes, (dense_w_bytes if dense_w_bytes > 0 else w_bytes)
    dense_dtype = (dense_dtype or "bf16") if dense_w_bytes > 0 else ""
    gemm, elementwise = op_builders(L, w_bytes, act_bytes, dense_dtype)

    in_ar = norm_in_allreduce and tp > 1 and coll == "all_reduce"
    pre, post, tail = layer_norms(m, elementwise, fused_add_norm, in_ar)
    ops = [Op("embedding", "embed", stage="pre", act_bytes_per_token=2.0 * d * w_bytes), *pre]
    if csa.is_csa(m):  # DeepSeek-V4: hyper-connections, compressed attention
        ops += csa.hc_ops(m, act_bytes) + csa.attention_ops(
            m, h, tp // attention_dp, gemm, elementwise, act_bytes, kv_bytes
        )
    elif is_mla(m):
        # whether the decode op sees whole sequences, for a measured dense MLA table (mla_attn.decode_ops)
        table = not dsa.is_dsa(m) and (
            mapping == "replicated" or tp <= 1 or (mapping == "data" and group_tokens)
        )
        lin_tp = 1 if mapping == "data" else tp
        ops += mla_attn.mla_block(m, h, lin_tp, gemm, elementwise, w_bytes, act_bytes, kv_bytes, table)
        ops += mla_map.remap(ops[1:], m, tp, mapping, 1.0 if group_tokens else tokens_per_step, act_bytes)
    else:
        ops += global_attn.gqa_block(m, layer_kinds(m), h, tp // attention_dp, gemm, elementwise,
                                     w_bytes, act_bytes, kv_bytes, separate_rope)  # fmt: skip
    if tp > 1:
        ops.append(
            Op(
                "attn_allreduce",
                "collective",
                repeat=linear_attn.n_mixers(m),
                link_bytes_per_token=before if attention_dp > 1 else ar_bytes,
                n_collectives=n_before if attention_dp > 1 else 1,
                act_bytes_per_token=2.0 * d * act_bytes,
                coll_kind=coll,
                coll_bytes_per_token=d * act_bytes,
            )
        )
    ops += post
    ffn = ffn_ops(m, tp, expert_wb, act_bytes, tokens_per_step, moe_mapping, moe_ep, w_bytes)
    ops += ffn + attn_res.attn_res_ops(m, act_bytes)
    if tp > 1:
        ops.append(
            Op(
                "mlp_allreduce",
                "collective",
                repeat=n_ffn_layers(m),
                link_bytes_per_token=after if attention_dp > 1 else ar_bytes,
                n_collectives=n_after if attention_dp > 1 else 1,
                act_bytes_per_token=2.0 * d * act_bytes,
                coll_kind=coll,
                coll_bytes_per_token=d * act_bytes,
            )
        )
    if group_tokens:
        attn_dp.mark_replica(ffn + [op for op in ops if op.kind == "collective"])
    elif attention_dp > 1:
        attn_dp.remap(ops, attention_dp, tokens_per_step)
    return ops + tail + head_ops(m, tp, w_bytes, act_bytes, dense_dtype)

"""Multi-head latent attention's block of a decoder layer (arch mla: DeepSeek-V2/V3/R1, Kimi-K2, Kimi-K3;
components/models/layers.py builds the rest of the layer), absorbed-weight decode path: the cache holds one
latent c_kv (kv_lora_rank) + one RoPE key (qk_rope_head_dim) per token and layer, shared by all
heads; W_UK is folded into the query (q_absorb) and W_UV applied after attention (v_absorb), so
attention runs in the latent space: 2 h (2 kv_lora + rope) FLOPs per (query, key) pair.
Under tensor parallel every chip holds and reads the whole latent (heads are split, the latent is
not: the replication dense.py applies when tp > kv_heads); the down-projections are replicated
(ReplicatedLinear), q_b/kv_b/o split by heads. With a query LoRA (DeepSeek-V3/R1) the engines run
q_a and kv_a as one GEMM of n = q_lora_rank + kv_lora_rank + qk_rope_head_dim (2112 over 7168):
SGLang's `fused_qkv_a_proj_with_mqa` (ReplicatedLinear, srt/models/deepseek_v2.py), vLLM's
`fused_qkv_a_proj` (MergedColumnParallelLinear, disable_tp) and TensorRT-LLM's `kv_a_proj_with_mqa`
(Linear of q_lora_rank + kv_lora_rank + qk_rope_head_dim, _torch/modules/attention.py MLA): one
GEMM and one activation quantization a layer, op `qkv_a_proj`. Prefill takes the non-absorbed
path, as vLLM and SGLang do: kv_b_decompress expands every context token's latent into per-head
keys and values, then ordinary attention, 2 h (qk + v) FLOPs per pair (3.4x fewer than the
absorbed path's for DeepSeek-V3). Decode attention's op carries its shape for a measured MLA table
(hardware.op_tables.mla_decode, replicated mapping); prefill attention its heads per chip for the
chip's dense MLA prefill law (hardware.op_fit.mla_prefill, opcost/attention_prefill.py; DSA's sparse
prefill and chips without the law: the roofline).

Kimi-K3's MLA layers gate their output (model.attn_output_gate: a g_proj GEMM d -> h v_head_dim,
sigmoid x the attention output before o_proj; vLLM vllm/models/kimi_k3/nvidia/mla.py) and sit between
linear (KDA) layers (layer_pattern `linear`: linear_attn.py), so their ops run on the attending layers only.
DeepSeek Sparse Attention's indexer and latent: dsa.py; the mapping across chips: mla_map.py.
"""

from __future__ import annotations

from typing import List

from decodelab.components.models import dsa, linear_attn
from decodelab.components.ops import Op

# qk_nope_head_dim, kv_lora_rank, v_head_dim of AIConfigurator's mla_bmm tables (framework/opcost/mla_bmm.py)
DEEPSEEK_BMM = (128, 512, 128)


def mla_block(
    m,
    h: int,
    lin_tp: int,
    gemm,
    elementwise,
    w_bytes: float,
    act_bytes: float,
    kv_bytes: float,
    table_shape: bool,
) -> List[Op]:
    """One chip's MLA attention ops with `h` query heads (module docstring), gated where the model gates it,
    then the linear layers' ops with their heads split `lin_tp` ways (linear_attn.attention). `table_shape`: the
    decode attention op carries its shape for a measured dense MLA decode table (where it sees whole sequences)."""
    d, lat, rope, nope = m.d_model, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim
    if m.q_lora_rank:  # one GEMM for both down-projections (module docstring)
        ops = [
            gemm("qkv_a_proj", d, m.q_lora_rank + lat + rope),  # replicated on every chip
            elementwise("q_a_norm", "norm", m.q_lora_rank, m.q_lora_rank, m.q_lora_rank),
            gemm("q_b_proj", m.q_lora_rank, h * (nope + rope)),
        ]
    else:
        ops = [gemm("q_proj", d, h * (nope + rope)), gemm("kv_a_proj", d, lat + rope)]
    ops += dsa.indexer_ops(m, gemm, w_bytes, act_bytes) if dsa.is_dsa(m) else []  # its indexer
    kv_tok = dsa.latent_bytes(m, kv_bytes) if dsa.is_dsa(m) else (lat + rope) * kv_bytes  # on every chip
    kv_write = Op(
        "kv_norm_rope_write",
        "elementwise",
        repeat=m.n_layers,
        weight_bytes=lat * w_bytes,
        flops_per_token=4.0 * lat + 6.0 * (h + 1) * rope,
        act_bytes_per_token=2.0 * (lat + rope) * act_bytes,
        kv_write_per_token=kv_tok,
    )
    ops += [kv_write, *decode_ops(m, h, kv_tok, w_bytes, act_bytes, table_shape)]
    ops += [*prefill_ops(m, h, kv_tok, w_bytes, act_bytes), gemm("o_proj", h * m.v_head_dim, d)]
    return linear_attn.attention(ops, m, h, lin_tp, w_bytes, act_bytes, gemm, elementwise)


def decode_ops(m, h: int, kv_tok: float, w_bytes: float, act_bytes: float, table_shape: bool) -> List[Op]:
    """Decode (and verification): the absorbed path, attention over the latent itself (`kv_tok` bytes a token)."""
    lat, rope, nope, v, n = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim, m.n_layers
    # the attention op's shape for a measured dense MLA decode table (op_tables.mla_decode; not DSA's) where
    # the op sees whole sequences: replicated, or data-parallel attention in serving (not decode context
    # parallelism, nor a static data-parallel step's per-sequence share)
    shape = dict(attn_heads=h, attn_kv_heads=1, attn_head_dim=lat + rope) if table_shape else {}
    bmm = (nope, lat, v) == DEEPSEEK_BMM  # the measured absorbed BMMs' dims (opcost/mla_bmm.py)
    return [
        Op("q_absorb", "gemm", repeat=n, weight_bytes=h * nope * lat * w_bytes, flops_per_token=2.0 * h * nope * lat,
           path="decode", act_bytes_per_token=h * (nope + lat) * act_bytes, mla_bmm=("pre", h) if bmm else ()),
        Op("attention", "attention", repeat=n, kv_read_per_ctx=kv_tok, path="decode",
           attn_flops_per_ctx=2.0 * h * (2 * lat + rope), act_bytes_per_token=2.0 * h * (lat + rope) * act_bytes,
           **shape),
        Op("v_absorb", "gemm", repeat=n, weight_bytes=h * lat * v * w_bytes, path="decode", mla_bmm=("post", h) if bmm else (),
           flops_per_token=2.0 * h * lat * v, act_bytes_per_token=h * (lat + v) * act_bytes),
    ]  # fmt: skip


def prefill_ops(m, h: int, kv_tok: float, w_bytes: float, act_bytes: float) -> List[Op]:
    """Prefill: the latent of every context token is decompressed into per-head keys and values (kv_b_proj, the
    same weights the absorbed path folds in: held once), then ordinary attention with qk = nope + rope and v
    dimensions (DeepSeek-V2/V3 reference code; vLLM and SGLang prefill this way and decode absorbed)."""
    lat, rope, nope, v, n = m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim, m.n_layers
    return [
        Op("kv_b_decompress", "gemm", repeat=n, path="prefill", resident_bytes=0.0,
           weight_bytes=lat * h * (nope + v) * w_bytes, kv_read_per_ctx=kv_tok,
           flops_per_ctx=2.0 * lat * h * (nope + v), act_bytes_per_ctx=h * (nope + v) * act_bytes),
        Op("attention_prefill", "attention", repeat=n, path="prefill", attn_heads=0 if dsa.is_dsa(m) else h,
           attn_flops_per_ctx=2.0 * h * (nope + rope) + 2.0 * h * v,
           act_bytes_per_ctx=(h * (nope + v) + rope) * act_bytes,
           act_bytes_per_token=h * (nope + rope + v) * act_bytes),
    ]  # fmt: skip

"""Linear layers (layer_pattern kind `linear`) of hybrid models: Gated DeltaNet (model.linear_kind gdn:
Qwen3-Next, Qwen3.5 / Qwen3.6, three Gated DeltaNet layers, then one gated full-attention layer),
Kimi Delta Attention (kda: Kimi-K3, beside gated MLA layers) and Mamba-2 (linear_kind mamba2: Nemotron-H,
Nemotron 3), both described after the Gated DeltaNet.

A Gated DeltaNet layer (Yang et al., arXiv 2412.06464; HF transformers modeling_qwen3_5.py
Qwen3_5GatedDeltaNet, SGLang 0.5.9 srt/models/qwen3_5.py) on one chip of tensor parallel `tp` (key
heads K and value heads V split tp ways, replicated when tp exceeds them, as KV heads are):

    in_proj_qkv  d -> 2 K dk + V dv (q, k, v)     in_proj_z  d -> V dv (the output gate)
    in_proj_ba   d -> 2 V (beta and the decay's a; SGLang runs them as two GEMMs, vLLM as one)
    causal conv1d (kernel c, per channel) over q, k, v; SiLU; a conv state of (c - 1) x conv_dim
    the gated delta rule on a dk x dv state per value head:
        S <- g S;  S <- S + k (beta (v - S^T k))^T;  o = S^T q
    gated RMSNorm of o with z (per value head), out_proj  V dv -> d (row-parallel, then the layer's
    all-reduce)

Decode (one token per sequence; SGLang causal_conv1d_update + fused_sigmoid_gating_delta_rule_update)
reads and writes the whole state every step: 2 V dk dv state bytes per token, state in
model.linear_state_dtype (config.json mamba_ssm_dtype float32; SGLang --mamba-ssm-dtype may set
bf16), ~7 dk dv FLOPs per value head (decay dk dv, S^T k 2 dk dv, rank-1 update 2 dk dv, S^T q
2 dk dv). Prefill (FLA chunk_gated_delta_rule, chunks of C = 64 tokens, q and k repeated to the V
value heads) per token and value head: intra-chunk K K^T, W = A K, U = A V and the masked
(Q K^T) V_new: C (6 dk + 4 dv) FLOPs; the triangular solve C^2 / 3; inter-chunk V_new = U - W S,
S += K^T V_new and O = Q S: 6 dk dv; its bytes are those of FLA's five chunk kernels
(prefill_bytes_per_head).

The conv and recurrent states are per sequence, whatever its length: `state_bytes_per_seq`
(Op.state_bytes_per_seq, summed by core/build.py for the memory a sequence holds); the decode op
carries their traffic as bytes per token, so the KV read model (framework/core/kv_costs.py) sees no
`state` layers and counts only the full-attention layers' KV.

A Kimi Delta Attention layer (linear_kind kda: Kimi-K3; Moonshot's modeling_kimi_linear.py KimiDeltaAttention,
vLLM vllm/models/kimi_k3/nvidia/kda.py) is the gated delta rule with a decay per channel, not per head, on
K = V heads (linear_k_heads = linear_v_heads) of dk = dv:

    in_proj_qkvgfb  d -> q, k, v, the output gate g (full rank: V dv), the decay's low-rank f_a (dk,
                    replicated) and beta (V): vLLM's one in_proj_qkvgfab GEMM; f_b_proj  dk -> K dk
    causal conv1d (kernel c, weights fp32) over q, k, v; SiLU; q, k L2-normalised in the kernel
    S <- (I - beta k k^T) Diag(exp(g)) S + beta k v^T;  o = S^T q   (g = -5 sigmoid(exp(A) (f + dt_bias)))
    RMSNorm of o per head x sigmoid(g), o_proj  V dv -> d

Decode and prefill cost as the Gated DeltaNet's (the same products per head; the gate per channel adds its
elementwise work and, in the chunked prefill (FLA chunk_kda), its fp32 cumulative sums, dk per token and head
written and read: a stated assumption; no KDA kernel table is read). State as the Gated DeltaNet's (fp32 S, bf16
conv).

A Mamba-2 mixer (Dao & Gu, arXiv 2405.21060; transformers modeling_nemotron_h.py NemotronHMamba2Mixer, vLLM
MambaMixer2) maps onto the same fields: G groups of B and C (linear_k_heads) of state size N
(linear_k_head_dim), H heads (linear_v_heads) of P channels (linear_v_head_dim):

    in_proj      d -> H P (z) + H P + 2 G N (x, B, C) + H (dt): one GEMM
    causal conv1d over x, B, C (conv_dim = 2 G N + H P, the Gated DeltaNet's form); SiLU
    the selective scan on a P x N state per head: S <- exp(dt A) S + dt x B^T;  y = S C + D x
    gated group RMSNorm of y with z (weight H P), out_proj  H P -> d

Decode (selective_state_update) reads and writes the state, ~6 P N FLOPs per head (decay, the dt x B
outer product, the update, S C). Prefill runs the chunked SSD scan (chunks of C = 128, config.json
chunk_size; mamba_chunk_scan_combined), per token and head: the intra-chunk C B^T (shared by the H / G
heads of a group) 2 C N G / H, its product with x 2 C P, the chunk states 2 N P and the output from them
2 N P; bytes: x, z in and y out, B and C per group, the chunk states in fp32 (ssd_prefill_bytes_per_head).
"""

from __future__ import annotations

from typing import List, NamedTuple

from decodelab.components.ops import Op, op_builders

CHUNK = 64  # FLA chunk_gated_delta_rule's chunk size (BT = 64 in fla/ops/gated_delta_rule/chunk.py)
SSD_CHUNK = 128  # Mamba-2's SSD chunk (Nemotron-H / Nemotron 3 config.json chunk_size 128)
STATE_BYTES = {"fp32": 4.0, "bf16": 2.0}
CONV_STATE_BYTES = 2.0  # conv state in the model dtype, bf16 (SGLang MambaPool conv_dtype)


def n_kind(m, kind: str) -> int:
    """Decoder layers of one kind (layer_pattern repeated to n_layers)."""
    pat = list(m.layer_pattern) or ["full"]
    return sum(1 for i in range(m.n_layers) if pat[i % len(pat)] == kind)


def n_linear(m) -> int:
    return n_kind(m, "linear")


def n_mixers(m) -> int:
    """Layers with a mixer (attention or linear): all but kind `none` (DeciLM / Nemotron-NAS no-op attention)."""
    return m.n_layers - n_kind(m, "none")


def n_attending(m) -> int:
    """Layers that attend (and cache KV): all but `linear` and `none` ones."""
    return n_mixers(m) - n_linear(m)


def heads_per_chip(m, tp: int):
    """(key heads, value heads) of one chip: split tp ways, replicated when tp exceeds them."""
    return max(m.linear_k_heads // tp, 1), max(m.linear_v_heads // tp, 1)


def conv_dim(m, tp: int) -> int:
    nk, nv = heads_per_chip(m, tp)
    return 2 * nk * m.linear_k_head_dim + nv * m.linear_v_head_dim


def state_bytes_per_seq(m, tp: int) -> float:
    """Bytes one sequence holds in one linear layer on one chip: the recurrent state (V/tp heads of
    dk x dv in linear_state_dtype) and the conv state ((c - 1) x conv_dim in bf16)."""
    _, nv = heads_per_chip(m, tp)
    rec = nv * m.linear_k_head_dim * m.linear_v_head_dim * STATE_BYTES[m.linear_state_dtype]
    return rec + (m.linear_conv_kernel - 1) * conv_dim(m, tp) * CONV_STATE_BYTES


def params_per_layer(m) -> int:
    """Parameters of one linear layer's mixer (unsharded). Gated DeltaNet: in_proj_qkv, in_proj_z,
    in_proj_ba, conv1d, A_log and dt_bias, the gated norm's weight, out_proj. Mamba-2: in_proj (z, x B C,
    dt), conv1d with its bias, A_log, D and dt_bias, the gated norm's weight (H P), out_proj."""
    d, dk, dv = m.d_model, m.linear_k_head_dim, m.linear_v_head_dim
    key, val = m.linear_k_heads * dk, m.linear_v_heads * dv
    conv = 2 * key + val
    if m.linear_kind == "mamba2":
        h = m.linear_v_heads
        return d * (val + conv + h) + (m.linear_conv_kernel + 1) * conv + 3 * h + val + val * d
    if m.linear_kind == "kda":  # q k v, g, f_a, f_b, beta, conv1d, A_log, dt_bias, the norm's weight, o_proj
        v_heads = m.linear_v_heads
        f = d * dk + dk * key  # the decay gate's low-rank pair, of rank dk
        return (
            d * conv + d * val + f + d * v_heads + m.linear_conv_kernel * conv + v_heads + key + dv + val * d
        )
    return (
        d * conv
        + d * val
        + 2 * d * m.linear_v_heads
        + m.linear_conv_kernel * conv
        + 2 * m.linear_v_heads
        + dv
        + val * d
    )


def decode_flops_per_head(dk: int, dv: int) -> float:
    """Gated delta rule step of one value head: decay, S^T k, rank-1 update, S^T q (module doc)."""
    return 7.0 * dk * dv


def prefill_flops_per_head(dk: int, dv: int, chunk: int = CHUNK) -> float:
    """Chunked gated delta rule, FLOPs per token and value head (module docstring)."""
    return chunk * (6.0 * dk + 4.0 * dv) + chunk * chunk / 3.0 + 6.0 * dk * dv


def prefill_bytes_per_head(dk: int, dv: int, ab: float, chunk: int = CHUNK) -> float:
    """Bytes per token and value head FLA's chunked kernels move through memory (q, k repeated to the
    value heads): chunk_scaled_dot_kkt reads k, writes A (fp32, C per token); solve_tril reads A,
    writes its inverse (C); recompute_w_u reads k, v, A^-1, writes w, u; chunk_fwd_h reads k, w, u,
    writes v_new and the chunk states (dk dv per chunk); chunk_fwd_o reads q, k, v_new, the states,
    writes o: 7 dk + 6 dv elements, 8 C fp32 bytes + 2 C elements, 2 dk dv / C elements."""
    return (7.0 * dk + 6.0 * dv + 2.0 * chunk + 2.0 * dk * dv / chunk) * ab + 8.0 * chunk


def kernel(m, tp: int) -> tuple:
    """What a measured table of the model's linear-layer kernels is looked up by on one chip (Op.recurrence without
    its role): (linear_kind, key heads, value heads, dk, dv, conv kernel, recurrent state bytes per element)."""
    nk, nv = heads_per_chip(m, tp)
    dims = (m.linear_k_head_dim, m.linear_v_head_dim, m.linear_conv_kernel)
    return (m.linear_kind, nk, nv, *dims, STATE_BYTES[m.linear_state_dtype])


def role(key: tuple, name: str) -> tuple:
    """Op.recurrence of the kernel `key` (kernel()) in role `name` (conv_update, decode, conv, prefill)."""
    return (key[0], name, *key[1:])


def conv_ops(
    n: int, c: int, conv: float, conv_w: float, conv_state: float, ab: float, key: tuple
) -> List[Op]:
    """The causal conv1d of kernel `c` over `conv` channels, per linear layer (repeat `n`): decode's update
    reads and writes the (c - 1) x conv state (`conv_state` bytes), prefill's runs over the prompt; `key`:
    the layer's kernel()."""
    flops = 2.0 * c * conv + 4.0 * conv
    return [
        Op("conv1d_update", "elementwise", repeat=n, path="decode", weight_bytes=conv_w, flops_per_token=flops,
           act_bytes_per_token=2.0 * conv * ab + 2.0 * conv_state,  # state read + written
           recurrence=role(key, "conv_update")),
        Op("conv1d", "elementwise", repeat=n, path="prefill", weight_bytes=conv_w, flops_per_token=flops,
           act_bytes_per_token=2.0 * conv * ab, recurrence=role(key, "conv")),
    ]  # fmt: skip


def ssd_decode_flops_per_head(n: int, p: int) -> float:
    """Mamba-2 state update of one head: decay, dt x B outer product, update, S C (module docstring)."""
    return 6.0 * n * p


def ssd_prefill_flops_per_head(n: int, p: int, group_share: float, chunk: int = SSD_CHUNK) -> float:
    """Chunked SSD scan, FLOPs per token and head (module docstring); `group_share` = G / H."""
    return 2.0 * chunk * n * group_share + 2.0 * chunk * p + 4.0 * n * p


def ssd_prefill_bytes_per_head(
    n: int, p: int, group_share: float, ab: float, chunk: int = SSD_CHUNK
) -> float:
    """Bytes per token and head of the chunked SSD kernels: x and z read, y written (3 P elements), B and
    C per group (2 N G / H), the chunk states written and read back in fp32 (2 x 4 N P / C)."""
    return (3.0 * p + 2.0 * n * group_share) * ab + 8.0 * n * p / chunk


def mamba2_ops(m, tp: int, gemm, elementwise, act_bytes: float) -> List[Op]:
    """The ops of the model's Mamba-2 layers on one chip (module docstring)."""
    n = n_linear(m)
    d, ds, hd, c = m.d_model, m.linear_k_head_dim, m.linear_v_head_dim, m.linear_conv_kernel
    ng, nh = heads_per_chip(m, tp)
    val, conv, share = nh * hd, conv_dim(m, tp), ng / nh
    ab, sb = act_bytes, STATE_BYTES[m.linear_state_dtype]
    rec = nh * ds * hd * sb  # the SSM state of one sequence, this chip
    conv_state = (c - 1) * conv * CONV_STATE_BYTES
    conv_w = (c + 1) * conv * CONV_STATE_BYTES  # conv1d weights and bias, bf16
    io = (2 * val + 2 * ng * ds + nh) * ab + val * ab  # x, z, B, C, dt in; y out
    key = kernel(m, tp)
    return [
        gemm("in_proj", d, val + conv + nh),
        *conv_ops(n, c, conv, conv_w, conv_state, ab, key),
        Op("ssm_decode", "elementwise", repeat=n, path="decode",
           flops_per_token=nh * ssd_decode_flops_per_head(ds, hd) + 2.0 * val,  # + D x
           act_bytes_per_token=io + 2.0 * rec,  # the state read and written every step
           state_bytes_per_seq=rec + conv_state, recurrence=role(key, "decode")),
        Op("ssm_prefill", "elementwise", repeat=n, path="prefill",
           flops_per_token=nh * ssd_prefill_flops_per_head(ds, hd, share) + 2.0 * val,
           act_bytes_per_token=nh * ssd_prefill_bytes_per_head(ds, hd, share, ab), recurrence=role(key, "prefill")),
        elementwise("gated_norm", "norm", 2 * val, val, weights=val),
        gemm("out_proj", val, d),
    ]  # fmt: skip


class Delta(NamedTuple):
    """A delta-rule layer's shapes on one chip (Gated DeltaNet, KDA): layers n, nv value heads of dk x dv, the key,
    value and conv widths, conv kernel c, a sequence's recurrent and conv states in bytes."""

    n: int
    dk: int
    dv: int
    c: int
    nv: int
    key: int
    val: int
    conv: int
    rec: float
    conv_state: float


def delta_shapes(m, tp: int) -> Delta:
    nk, nv = heads_per_chip(m, tp)
    dk, dv, c, conv = m.linear_k_head_dim, m.linear_v_head_dim, m.linear_conv_kernel, conv_dim(m, tp)
    rec = nv * dk * dv * STATE_BYTES[m.linear_state_dtype]  # recurrent state of one sequence, this chip
    return Delta(n_linear(m), dk, dv, c, nv, nk * dk, nv * dv, conv, rec, (c - 1) * conv * CONV_STATE_BYTES)


def gdn_ops(m, tp: int, gemm, elementwise, ab: float) -> List[Op]:
    """The ops of the model's Gated DeltaNet layers on one chip (module docstring)."""
    x, key = delta_shapes(m, tp), kernel(m, tp)
    conv_w = x.c * x.conv * CONV_STATE_BYTES  # conv1d weights stay bf16 (quant_config=None)
    qkv_out = (2 * x.key + x.val) * ab + (x.val + 2 * x.nv) * ab  # q, k, v, o and beta, a through memory
    return [
        gemm("in_proj_qkv", m.d_model, x.conv),
        gemm("in_proj_z", m.d_model, x.val),
        gemm("in_proj_ba", m.d_model, 2 * x.nv),
        *conv_ops(x.n, x.c, x.conv, conv_w, x.conv_state, ab, key),
        Op("gdn_decode", "elementwise", repeat=x.n, path="decode",
           flops_per_token=x.nv * decode_flops_per_head(x.dk, x.dv) + 8.0 * x.key,  # + q/k L2 norms
           act_bytes_per_token=qkv_out + 2.0 * x.rec,  # the state read and written every step
           state_bytes_per_seq=x.rec + x.conv_state, recurrence=role(key, "decode")),
        Op("gdn_prefill", "elementwise", repeat=x.n, path="prefill",
           flops_per_token=x.nv * prefill_flops_per_head(x.dk, x.dv) + 8.0 * x.key,
           act_bytes_per_token=x.nv * prefill_bytes_per_head(x.dk, x.dv, ab) + 2.0 * x.nv * ab,
           recurrence=role(key, "prefill")),
        elementwise("gated_norm", "norm", 2 * x.val, x.val, weights=x.dv),
        gemm("out_proj", x.val, m.d_model),
    ]  # fmt: skip


def kda_ops(m, tp: int, gemm, elementwise, ab: float) -> List[Op]:
    """The ops of the model's Kimi Delta Attention layers on one chip (module docstring)."""
    x, key = delta_shapes(m, tp), kernel(m, tp)
    conv_w = x.c * x.conv * 4.0  # conv1d weights in fp32 (KimiDeltaAttention's ShortConvolution)
    io = (x.conv + 2 * x.val + x.key + x.nv) * ab  # q, k, v, g, f and beta in, o out
    extra = 8.0 * x.key + 6.0 * x.key  # q/k L2 norms; the decay gate per channel (exp, sigmoid, scale)
    return [
        gemm("in_proj_qkvgfb", m.d_model, x.conv + x.val + x.dk + x.nv),
        gemm("f_b_proj", x.dk, x.key),
        *conv_ops(x.n, x.c, x.conv, conv_w, x.conv_state, ab, key),
        Op("kda_decode", "elementwise", repeat=x.n, path="decode",
           flops_per_token=x.nv * decode_flops_per_head(x.dk, x.dv) + extra,
           act_bytes_per_token=io + 2.0 * x.rec,  # the state read and written every step
           state_bytes_per_seq=x.rec + x.conv_state, recurrence=role(key, "decode")),
        Op("kda_prefill", "elementwise", repeat=x.n, path="prefill",
           flops_per_token=x.nv * prefill_flops_per_head(x.dk, x.dv) + extra,
           act_bytes_per_token=x.nv * (prefill_bytes_per_head(x.dk, x.dv, ab) + 8.0 * x.dk) + (x.key + x.nv) * ab,
           recurrence=role(key, "prefill")),
        elementwise("gated_norm", "norm", 2 * x.val, x.val, weights=x.dv),
        gemm("out_proj", x.val, m.d_model),
    ]  # fmt: skip


def linear_layer_ops(m, tp: int, w_bytes: float, act_bytes: float, gemm_dtype: str = "") -> List[Op]:
    """The ops of the model's linear layers on one chip (repeat = those layers), between the input
    norm and the attention all-reduce the full-attention layers share: Gated DeltaNet, KDA or Mamba-2."""
    gemm, elementwise = op_builders(n_linear(m), w_bytes, act_bytes, gemm_dtype)
    kind = {"mamba2": mamba2_ops, "kda": kda_ops}.get(m.linear_kind, gdn_ops)
    return kind(m, tp, gemm, elementwise, act_bytes)


def gate_attention(ops: List[Op], m, h: int, gemm, elementwise) -> List[Op]:
    """Gated attention (config.json attn_output_gate; mla_use_output_gate): sigmoid(gate) x attention output before
    o_proj, the gate from q_proj, which yields one per query element too (SGLang qwen3_5.py: q_proj of 2 h hd), or
    under MLA from a GEMM of its own, d -> h v_head_dim (Kimi-K3's g_proj, column-parallel: vLLM
    vllm/models/kimi_k3/nvidia/mla.py)."""
    if not m.attn_output_gate:
        return ops
    mla = m.kv_lora_rank > 0
    width = h * (m.v_head_dim if mla else m.head_dim)
    out = []
    for op in ops:
        if op.name == "qkv_proj" and not mla:
            op = gemm("qkv_proj", m.d_model, op.gemm_n + width)
        if op.name == "o_proj":
            out += [gemm("g_proj", m.d_model, width)] if mla else []
            out.append(elementwise("attn_gate", "elementwise", 2 * width, width))
        out.append(op)
    return out


def attention(ops: List[Op], m, h: int, tp: int, w_bytes: float, act_bytes: float, gemm, elementwise,
                     gemm_dtype: str = "") -> List[Op]:  # fmt: skip
    """A layer's attention block of a model with linear or mixer-free (`none`) layers: the (gated)
    attention ops run on the attending layers only (repeat = those), then the linear layers' own ops,
    their GEMMs of the attention's weight dtype (BF16 under model.expert_only_dtypes). Models with
    neither: `ops` unchanged."""
    ops = gate_attention(ops, m, h, gemm, elementwise)
    if n_attending(m) == m.n_layers:
        return ops
    for op in ops:
        op.repeat = n_attending(m)
    lin = linear_layer_ops(m, tp, w_bytes, act_bytes, ops[0].gemm_dtype) if n_linear(m) else []
    return ops + lin

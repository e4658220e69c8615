"""The plain operator record every model component produces and every execution model groups.

An `Op` holds per-chip costs as linear coefficients, so the kernel can evaluate any batch and
context length without knowing which model produced it:

    flops      = tokens * flops_per_token + seqs * context * flops_per_ctx
                 + seqs * attn_flops_per_ctx * (causal query-key pairs)
    bytes      = weight_bytes + tokens * act_bytes_per_token + seqs * context * act_bytes_per_ctx
                 + seqs * context * kv_read_per_ctx + tokens * kv_write_per_token
    link bytes = tokens * link_bytes_per_token          (tensor-parallel collectives)
"""

from __future__ import annotations

from dataclasses import dataclass

from decodelab.errors import ConfigError

# Where an op sits: `pre` runs once per step before the decoder stack, `layer` once per decoder
# layer (the op's `repeat` says how many), `post` once after it.
STAGES = ("pre", "layer", "post")


# The Op fields that scale with the sequences an op runs for (per token, per context token): what
# a mapping that gives a chip a share of the batch's sequences scales (mla_map.py, attn_dp.py).
PER_SEQ_FIELDS = (
    "flops_per_token",
    "act_bytes_per_token",
    "kv_read_per_ctx",
    "kv_write_per_token",
    "attn_flops_per_ctx",
    "flops_per_ctx",
    "act_bytes_per_ctx",
)


@dataclass
class Op:
    name: str
    kind: str  # gemm | attention | norm | elementwise | collective | embed | sample
    stage: str = "layer"
    repeat: int = 1  # invocations per step (decoder layers for `layer` ops)
    weight_bytes: float = 0.0  # per invocation, per chip
    weight_tier: str = "hbm"  # set by memory placement
    resident_bytes: float = -1.0  # weights held per invocation when they differ from those read per
    # step (MoE: every expert is stored, the activated ones are read); -1: same
    flops_per_token: float = 0.0
    act_bytes_per_token: float = 0.0  # activations read + written through memory
    kv_read_per_ctx: float = 0.0  # KV bytes read per context token per sequence
    kv_write_per_token: float = 0.0
    attn_flops_per_ctx: float = 0.0  # FLOPs per (query token, key token) pair
    link_bytes_per_token: float = 0.0  # bytes each chip sends per token in collectives
    n_collectives: int = 0  # collective operations per invocation (latency terms)
    flops_per_ctx: float = 0.0  # FLOPs per context token per sequence (MLA decompression)
    act_bytes_per_ctx: float = 0.0  # activation bytes per context token per sequence
    path: str = "all"  # all | decode | prefill: the sequences the op runs for
    # (a model may attend one way decoding, another prefilling)
    # Shapes the per-shape laws need (decodelab.opcost; 0 / "" = not such an op):
    gemm_n: float = 0.0  # a plain GEMM: weight of n outputs x k inputs, per chip
    gemm_k: float = 0.0
    attn_heads: float = 0.0  # attention: query heads, KV heads, head dim, per chip (MLA: 1 KV head)
    attn_kv_heads: float = 0.0
    attn_head_dim: float = 0.0
    in_attention_call: bool = False  # the engine runs it inside the attention call of head dim
    # attn_head_dim (RoPE + KV write)
    gemm_dtype: str = ""  # the GEMM's weight dtype when not the workload's ("" = workload.weight_dtype)
    coll_kind: str = ""  # all_reduce | all_gather: the op's tensor-parallel collective
    coll_bytes_per_token: float = 0.0  # bytes of the collective's whole per-rank tensor per token
    route_point: bool = False  # a data-dependent routing decision: the weights the rest of the
    # layer reads are chosen by it (MoE top-k; components/models/experts.py)
    experts_read: tuple = ()  # MoE expert GEMMs: (bytes every step reads: dense layers, shared
    # experts; bytes per routed expert unit, experts, top-k, expert-parallel chips): the weights a step
    # reads depend on its tokens (experts.weight_read); weight_bytes is their value at the design's
    # tokens_per_step
    moe_block: tuple = ()  # an MoE layer's routed-expert block (components/models/experts.py):
    # (role "head" | "tail", hidden, expert ffn, top-k, experts, moe_tp, moe_ep, MoE layer share,
    # routed FLOPs per token of the head op, block / head op weights): a measured MoE table costs
    # the whole block on its head op (framework/opcost/moe.py), its tails inside it
    replica: bool = False  # serving under data-parallel attention: the op runs on the tokens of
    # every attention group (the FFN and the collectives around it), the rest on its own group's
    # (attn_dp.py); the kernel multiplies its tokens by the groups' share (Hw.DP_TOKENS)
    call: int = -1  # kernel call index, set by the execution model
    state_bytes_per_seq: float = 0.0  # bytes each sequence holds per invocation whatever its length
    # (Gated DeltaNet conv + recurrent state, components/models/linear_attn.py), per chip
    recurrence: tuple = ()  # a linear layer's kernel (components/models/linear_attn.py): (kind gdn | kda |
    # mamba2, role conv_update | decode | conv | prefill, key heads, value heads, key and value head dims, conv
    # kernel, recurrent state bytes per element), per chip: what a measured table of it is looked up by
    # (framework/opcost/linear_attn.py)
    mhc: tuple = ()  # a hyper-connection mixing op (components/models/csa.py hc_ops): (role pre | post, hc_mult,
    # hidden size): what a measured table of it is looked up by (framework/opcost/mhc.py)
    mla_bmm: tuple = ()  # MLA's absorbed decode BMM (components/models/mla_attn.py): (role pre | post, heads per
    # chip): what a measured table of it is looked up by (framework/opcost/mla_bmm.py)
    # The head of a routed-expert block whose layer's shared expert it costs (no op of its own:
    # components/models/experts.py): an eager engine launches that expert's kernels beside the block's
    # (engine.eager_kernels `shared_experts`, components/execution/gpu.py)
    shared_expert: bool = False


# The LM head keeps the 16-bit compute dtype when the other weights are quantized below 16 bits:
# TensorRT-LLM's PyTorch models build it as LMHead(dtype=pretrained_config.torch_dtype) and "lm_head
# Linear will not accept QuantConfig" (NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_utils.py,
# DecoderModelForCausalLM, @000a01de); vLLM's ParallelLMHead is an embedding layer, which its FP8
# method leaves unquantized. A Qwen3-32B FP8 step at TP1 reads 1.56 GB of LM head, not 0.78.
HEAD_BYTES = 2.0


def lm_head_dtype(w_bytes: float):
    """(bytes per weight, gemm_dtype) of the LM head for weights of `w_bytes` bytes."""
    return (HEAD_BYTES, "bf16") if w_bytes < HEAD_BYTES else (w_bytes, "")


def keep_bf16(ops, names, w_bytes: float):
    """`ops` with the ops named in `names` read as BF16 weights (a quantized checkpoint that leaves
    them unquantized: model.quant_bf16_ops): weights held and read scaled from `w_bytes` to 2 bytes,
    costed as BF16 GEMMs (gemm_dtype), as the LM head already is; the others unchanged. Raises
    ConfigError for a name no op has."""
    unknown = sorted(set(names) - {op.name for op in ops})
    if unknown:
        raise ConfigError(
            f"model.quant_bf16_ops names {', '.join(unknown)}, which this design has no op of "
            f"(ops: {', '.join(dict.fromkeys(op.name for op in ops))})"
        )
    if w_bytes >= HEAD_BYTES:  # weights already 16-bit or wider
        return ops
    names, scale = set(names), HEAD_BYTES / w_bytes
    for op in ops:
        if op.name in names:
            op.weight_bytes *= scale
            op.resident_bytes = op.resident_bytes * scale if op.resident_bytes > 0 else op.resident_bytes
            op.gemm_dtype = "bf16"
    return ops


def op_builders(repeat: int, w_bytes: float, act_bytes: float, gemm_dtype: str = ""):
    """(gemm, elementwise): makers of per-layer ops with `repeat` invocations per step, as every
    dense-style model component writes them. gemm(name, k, n, bias): a k x n weight matrix
    (+ bias) applied to each token, of `gemm_dtype` ("" = the workload's); elementwise(name, kind,
    n_in, n_out, weights): ~4 FLOPs per output element (norms, activations, residual adds)."""

    def gemm(name, k, n, bias=0):
        return Op(
            name,
            "gemm",
            repeat=repeat,
            weight_bytes=(k * n + bias) * w_bytes,
            flops_per_token=2.0 * k * n,
            act_bytes_per_token=(k + n) * act_bytes,
            gemm_n=n,
            gemm_k=k,
            gemm_dtype=gemm_dtype,
        )

    def elementwise(name, kind, n_in, n_out, weights=0):
        return Op(
            name,
            kind,
            repeat=repeat,
            weight_bytes=weights * w_bytes,
            flops_per_token=4.0 * n_out,
            act_bytes_per_token=(n_in + n_out) * act_bytes,
        )

    return gemm, elementwise

"""Typed schema of a model architecture (`model`: components/models/, the shapes a conf/model YAML states); part of
decodelab.core.schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

from omegaconf import MISSING


@dataclass
class ModelConfig:
    """Transformer shape. Dense GQA/MHA is implemented; the MoE, MLA and hybrid fields are
    part of the schema so those architectures are data, not a schema change."""

    name: str = MISSING
    arch: str = "dense"  # dense | moe | mla | hybrid
    n_layers: int = MISSING
    d_model: int = MISSING
    n_heads: int = MISSING
    n_kv_heads: int = MISSING
    head_dim: int = MISSING
    ffn_dim: int = MISSING
    vocab_size: int = MISSING
    ffn_act: str = "swiglu"  # swiglu (gate+up+down) | gelu (up+down)
    tied_embeddings: bool = False
    qkv_bias: bool = False
    # Per-head RMSNorm of q and k before RoPE (Qwen3's q_norm / k_norm): one more elementwise
    # kernel per layer on a GPU (components/models/dense.py)
    qk_norm: bool = False
    # What that norm normalises: head (each head's q and k: Qwen3) | layer (the layer's whole q and k,
    # config.json qk_norm_type per_layer: MiniMax-M2), which under tensor parallelism all-reduces the
    # sum of squares across the chips each layer (components/models/dense.py qk_norm_reduce)
    qk_norm_scope: str = "head"
    # Engine families (engine.family) whose implementation of this model runs each decoder layer's
    # residual add + RMSNorm inside its tensor-parallel all-reduce, one kernel (TensorRT-LLM's
    # AllReduceFusionOp.RESIDUAL_RMS_NORM): under tensor parallelism without data-parallel attention
    # the layer's norms are no kernels of their own (components/models/layers.py)
    allreduce_norm_engines: List[str] = field(default_factory=list)
    max_context: int = 131072
    # How the model's published FP8 checkpoint scales its weights: tensor (one scale per tensor,
    # e.g. NVIDIA ModelOpt) | block (one per 128 x 128 block: Qwen3-*-FP8, DeepSeek-V3/R1). A
    # measured row in FP8 runs with workload.weight_dtype=fp8_block for a block checkpoint
    # (decodelab validate), whose GEMMs run other kernels (opcost/gemm.py).
    fp8_checkpoint: str = "tensor"
    # Weight dtypes in which the published checkpoint quantizes only the routed experts and keeps
    # every other weight (attention projections, norms, router, embeddings, LM head) in BF16, e.g.
    # gpt-oss's MXFP4 (its model card): under workload.weight_dtype in this list the non-expert
    # weights are read and costed as BF16 GEMMs (components/models/layers.py)
    expert_only_dtypes: List[str] = field(default_factory=list)
    # The MoE kernel an engine family runs this checkpoint's experts with where its quantization format decides it
    # rather than the engine file (engine.family -> a backend of core/cost_setup.py MOE_BACKENDS; e.g. vLLM runs
    # compressed-tensors MXFP4 experts with Marlin): it replaces engine.moe_backend for that engine
    moe_backend_by_engine: Dict[str, str] = field(default_factory=dict)
    # Ops a quantized checkpoint leaves in BF16, per weight dtype: under workload.weight_dtype = a key,
    # the listed ops (components/models op names) read BF16 weights and are costed as BF16 GEMMs, as
    # the LM head already is (components/ops.py keep_bf16; e.g. NVIDIA's NVFP4 DeepSeek checkpoints
    # keep the MLA projections in BF16: conf/model/deepseek_r1.yaml)
    quant_bf16_ops: Dict[str, List[str]] = field(default_factory=dict)
    # Mixture of experts (arch=moe)
    n_experts: int = 0
    experts_per_token: int = 0
    n_shared_experts: int = 0
    expert_ffn_dim: int = 0
    # Layers with the dense FFN (ffn_dim) instead of experts: a count, wherever they sit (DeepSeek's leading
    # ones, Llama 4's interleaved ones), since every decoder-layer op carries the layer average
    first_dense_layers: int = 0
    # Multi-head latent attention (arch=mla)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    n_mtp_modules: int = 0
    # DeepSeek Sparse Attention (arch=mla; components/models/dsa.py): a lightning indexer of
    # index_n_heads heads of index_head_dim scores every cached token, the attention reads the
    # index_topk best (0 = dense MLA); index_layers: layers with their own indexer (0 = all)
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_layers: int = 0
    # Block-sparse GQA attention (MiniMax-M3; components/models/msa.py: index_topk tokens a KV head reads, an indexer
    # of index_n_heads x index_head_dim with one shared index key): its leading layers that attend densely
    dense_attention_layers: int = 0
    # Acceptance of each draft position when the MTP module drafts for speculative decoding (engine.mtp:
    # position j's draft accepted given positions 1..j-1 were; later positions take the last value)
    mtp_acceptance: List[float] = field(default_factory=list)
    # Static graphs a deployment compiles for this model: [max sequence, batch] pairs (a static graph
    # fixes both; workload.static_graph picks one, framework/modes/graphs.py)
    static_graphs: List[List[int]] = field(default_factory=list)
    # Hybrid / sliding-window layers (arch=hybrid): per-layer kinds, repeated to n_layers
    layer_pattern: List[str] = field(default_factory=list)  # e.g. [full, sliding]
    sliding_window: int = 0
    state_bytes_per_layer: int = 0
    # Gated DeltaNet layers (layer_pattern kind `linear`; components/models/linear_attn.py), from
    # config.json linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
    # linear_value_head_dim, linear_conv_kernel_dim, mamba_ssm_dtype (the recurrent state's dtype)
    linear_k_heads: int = 0
    linear_v_heads: int = 0
    linear_k_head_dim: int = 0
    linear_v_head_dim: int = 0
    linear_conv_kernel: int = 0
    linear_state_dtype: str = "fp32"  # fp32 | bf16
    # The recurrent mixer of the `linear` layers: gdn (Gated DeltaNet) | mamba2 (Mamba-2's selective state space,
    # Nemotron-H: linear_k_heads = n_groups, linear_k_head_dim = ssm_state_size, linear_v_heads = mamba_num_heads,
    # linear_v_head_dim = mamba_head_dim, linear_conv_kernel = conv_kernel)
    # kda (Kimi Delta Attention, Kimi-K3: linear_k_heads = linear_v_heads heads of one head dim, a decay per channel)
    linear_kind: str = "gdn"
    # Layers with no FFN block (Nemotron-H: an attention block is a layer of its own, its mixer only)
    ffn_free_layers: int = 0
    # Latent MoE (Nemotron 3 Super / Ultra: config.json moe_latent_size): the routed experts run on the token
    # projected d -> this width (and back); the shared expert stays at d. 0 = experts at d_model
    moe_latent_dim: int = 0
    # Full-attention layers of their own shape (Gemma 4, MiMo-V2-Flash; components/models/global_attn.py): head dim, KV heads
    # of the `full` layers (0: head_dim, n_kv_heads), and whether their checkpoint has no v_proj (K = V)
    global_head_dim: int = 0
    global_kv_heads: int = 0
    global_k_eq_v: bool = False
    # Compressed attention (arch=csa, DeepSeek-V4; components/models/csa.py): each decoder layer's KV
    # compression ratio (0: its sliding_window only; r > 0: also one cached entry per r tokens, the ratio-4
    # layers' read through the index_* indexer's top-k), the grouped low-rank output projection (o_groups
    # groups of heads, each to o_lora_rank) and the residual stream's hyper-connection copies (hc_mult)
    compress_ratios: List[int] = field(default_factory=list)
    o_groups: int = 0
    o_lora_rank: int = 0
    hc_mult: int = 0
    # The dtype the weights outside the routed experts keep under expert_only_dtypes (gpt-oss: bf16;
    # DeepSeek-V4: fp8_block, its experts MXFP4)
    expert_only_dense_dtype: str = "bf16"
    # Gated attention (config.json attn_output_gate): q_proj also yields a per-element output gate (MLA,
    # mla_use_output_gate: a g_proj GEMM of its own)
    attn_output_gate: bool = False
    # Block Attention Residuals (Kimi-K3 config.json attn_res_block_size; components/models/attn_res.py): layers per
    # block of the softmax mixes over depth that replace the residual adds (0: residual adds)
    attn_res_block_size: int = 0
    # A sigmoid gate (hidden -> 1) scaling the shared expert's output (Qwen2-MoE / Qwen3-Next / Qwen3.5)
    shared_expert_gate: bool = False
    # The checkpoint's generation_config.json sampling defaults (temperature, top_k, top_p, min_p,
    # repetition_penalty):
    # what an engine with engine.sampler.model_defaults samples with (framework/opcost/sampler.py)
    generation_defaults: Dict[str, float] = field(default_factory=dict)
    source: str = ""

"""Typed schemas of the per-shape operator laws (`hardware.op_fit`, hardware.op_model=fitted;
framework/opcost/ evaluates them, one module per operator family; framework/calibration/ fits
them; docs/model.md, "Per-shape operator laws"). The config schema stays in core: decodelab.opcost
imports no config code."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict

from omegaconf import MISSING


@dataclass
class GemmLaw:
    """Per-shape GEMM law of one weight dtype (framework/opcost/gemm.py): t = (Tc^p + Tm^p)^(1/p)
    + t0 with Tc = 2 n (k + k0) m / (P e_c), Tm = (n k wb + m (k ab + 2 n)) / (BW e_b)."""

    e_c: float = MISSING  # tensor-core efficiency (fraction of the dtype's dense peak)
    k0: float = 0.0  # per-output-tile prologue/epilogue, in extra k-depth
    e_b: float = MISSING  # HBM efficiency of the weight + activation stream
    t0_us: float = MISSING  # fixed per-call time inside a CUDA graph (kernel boundary + ramp)
    p: float = MISSING  # sharpness of the roofline knee (p -> inf: max(Tc, Tm))


@dataclass
class PrefillAttentionLaw:
    """Prefill (context) attention incl. RoPE and KV write: t = t0 + b h [pairs 4 hd / (P e_a)
    + s tau_tok + tau_seq] summed over the step's prefilling sequences."""

    e_a: float = MISSING
    tau_tok_ns: float = MISSING  # per (token, query head)
    tau_seq_ns: float = MISSING  # per (sequence, query head)
    t0_us: float = MISSING


@dataclass
class DecodeAttentionLaw:
    """Decode attention incl. RoPE and KV write: t = t0 + ((c_sk b kvh)^p + (B_kv / BW_kv)^p)^(1/p)."""

    c_sk_ns: float = MISSING  # per (sequence, KV head)
    bw_kv_tbs: float = MISSING  # achieved KV read bandwidth, TB/s
    t0_us: float = MISSING
    p: float = MISSING


@dataclass
class CollectiveLaw:
    """One collective at one GPU count: t = (S < S* ? a_lo : a_hi) + S / beta, S = bytes of
    the whole per-rank tensor."""

    a_lo_us: float = MISSING
    a_hi_us: float = MISSING
    s_switch_bytes: float = MISSING
    beta_gb_s: float = MISSING


@dataclass
class SamplerLaw:
    """The logits filter of an engine's sampler path on a batch of `rows` sampled tokens over a
    vocabulary of V entries (framework/opcost/sampler.py): t = t0 + ns_per_elem rows V, fitted to a
    microbenchmark of that path; the rest of the sampler (FP32 cast, temperature, softmax,
    exponential draw, argmax) is added as its passes over the logits at the HBM peak."""

    t0_us: float = MISSING
    ns_per_elem: float = MISSING
    # where the law is not this chip's own measurement, what it is here (e.g. another chip's law as
    # a lower bound): repeated in the note of every run that uses it ("" = measured on this chip)
    caveat: str = ""


@dataclass
class OpTablesConfig:
    """Measured operator tables (hardware.op_model=fitted; framework/opcost/gemm.py), each a path
    or a file shipped under decodelab/data/, CSV or Parquet; "" = no table. `gemm`: a GEMM
    microbenchmark table (gemm_dtype, m, n, k, latency_ms); a GEMM op inside its (n, k) grid is
    costed from the table at the op's own shape, not by the class law of `op_fit.gemm`.
    `all_reduce`: TensorRT-LLM's all-reduce table (allreduce_dtype, num_gpus, message_size,
    latency_ms); an all-reduce that `op_fit.all_reduce` would cost (not an engine's own law) at a
    GPU count the table has is costed from it (log-log between the measured sizes).
    `all_reduce_by_engine`: an engine's own all-reduce table by engine family (engine.family), the
    same schema: an all-reduce that engine's own law (`op_fit.all_reduce_by_engine`) would cost is
    costed from it instead, at a GPU count it has."""

    gemm: str = ""
    all_reduce: str = ""
    all_reduce_by_engine: Dict[str, str] = field(default_factory=dict)
    # an engine's own GEMM table by engine family, same schema as `gemm`: that engine's GEMMs are
    # costed from it (its kernels, e.g. vLLM's block-scaled FP8 path), `gemm` for other engines
    gemm_by_engine: Dict[str, str] = field(default_factory=dict)
    # a decode attention microbenchmark table (batch_size, num_heads, num_key_value_heads, head_dim,
    # window_size, kv_cache_dtype, step, latency_ms): a decode attention op at heads per chip it
    # holds is costed from it at the step's sequences and KV read, never faster than the KV read at
    # the chip's HBM peak (opcost/attention_decode.py), not by op_fit.attention_decode
    attention_decode: str = ""
    # an engine's own decode attention table by engine family, same schema (its attention kernels:
    # vLLM's and SGLang's FlashAttention), `attention_decode` for other engines and shapes it lacks
    attention_decode_by_engine: Dict[str, str] = field(default_factory=dict)
    # MLA decode attention over the latent, the same schema with num_key_value_heads 1 and head_dim
    # kv_lora_rank + qk_rope_head_dim (one latent per token, read once for keys and values): the
    # absorbed-path attention of an MLA model (replicated mapping; data in serving) at its heads
    # per chip is costed from it; `mla_decode_by_engine` an engine's own, `mla_decode` for others
    mla_decode: str = ""
    mla_decode_by_engine: Dict[str, str] = field(default_factory=dict)
    # an MoE microbenchmark table (moe_dtype, num_tokens, hidden_size, inter_size, topk, num_experts,
    # moe_tp_size, moe_ep_size, latency_ms): an MoE layer's routed-expert block at a shape it holds is
    # costed from it (opcost/moe.py); `moe_by_engine` an engine's own, the same schema
    moe: str = ""
    moe_by_engine: Dict[str, str] = field(default_factory=dict)
    # a table of a hybrid model's linear-layer kernels (kind, role, batch_size, seq_len, num_k_heads,
    # num_v_heads, head_k_dim, head_v_dim, d_conv, latency_ms): a Gated DeltaNet or KDA op at a shape it
    # holds is costed from it (opcost/linear_attn.py); `linear_attention_by_engine` an engine's own
    linear_attention: str = ""
    linear_attention_by_engine: Dict[str, str] = field(default_factory=dict)
    # a table of DeepSeek-V4's hyper-connection kernels (role pre | post, num_tokens, hc_mult, hidden_size,
    # num_sites, latency_ms): an hc_pre / hc_post op at a shape it holds is costed from it (opcost/mhc.py)
    mhc: str = ""
    mhc_by_engine: Dict[str, str] = field(default_factory=dict)
    # a table of MLA's absorbed decode BMMs (role pre | post, bmm_dtype, num_tokens, num_heads per GPU,
    # latency_ms): a q_absorb / v_absorb op at its heads is costed from it (opcost/mla_bmm.py)
    mla_bmm: str = ""
    mla_bmm_by_engine: Dict[str, str] = field(default_factory=dict)
    # An engine's tables per release, engine family -> release -> {gemm | attention_decode | mla_decode | moe:
    # path}: a design whose engine.version names its release reads each kind from the listed release nearest
    # it (opcost/versions.py) while `<kind>_by_engine` is one of them (a table of one's own there stands for
    # every release), `<kind>_by_engine` where it names none
    by_version: Dict[str, Dict[str, Dict[str, str]]] = field(default_factory=dict)
    # The chip the tables were measured on (0 = not stated: this chip): on a chip whose own HBM
    # bandwidth or dense peaks differ (e.g. a user chip that inherits this file and changes them)
    # each tabulated GEMM time is multiplied by the op_fit.gemm law's time on that chip over its
    # time on this one.
    hbm_gb_s: float = 0.0
    peak_tflops_bf16: float = 0.0
    peak_tflops_fp8: float = 0.0


@dataclass
class OpFitConfig:
    """Fitted per-shape operator laws (hardware.op_model=fitted; docs/model.md, "Per-shape operator
    laws"). Keys: gemm by weight dtype (bf16 | fp8); attention by `<kv dtype>_hd<head_dim>`;
    collectives by `tp<n>`. An op whose class is missing is costed by the roofline law."""

    source: str = ""
    gemm: Dict[str, GemmLaw] = field(default_factory=dict)
    attention_prefill: Dict[str, PrefillAttentionLaw] = field(default_factory=dict)
    attention_decode: Dict[str, DecodeAttentionLaw] = field(default_factory=dict)
    # MLA's prefill attention (the non-absorbed path: qk = nope + rope, v per head) by KV dtype (bf16 | fp8),
    # the prefill law with hd the mean of the qk and v head dims; `mla_prefill_by_engine.<family>` an
    # engine's own kernel in its place (framework/opcost/attention_prefill.py)
    mla_prefill: Dict[str, PrefillAttentionLaw] = field(default_factory=dict)
    mla_prefill_by_engine: Dict[str, Dict[str, PrefillAttentionLaw]] = field(default_factory=dict)
    all_reduce: Dict[str, CollectiveLaw] = field(default_factory=dict)
    all_gather: Dict[str, CollectiveLaw] = field(default_factory=dict)
    # An engine's own all-reduce kernel, by engine family (engine.family: vllm, sglang, ...) then
    # tp<n>: used for that engine's all-reduces in place of `all_reduce` (TensorRT-LLM's)
    all_reduce_by_engine: Dict[str, Dict[str, CollectiveLaw]] = field(default_factory=dict)
    # An engine's top-k / top-p sampler path by its name (engine.sampler.topk_topp: sort = the
    # PyTorch full-vocabulary sort of vLLM 0.12's forward_native): costs the sampling op of a
    # design whose engine takes that path (framework/opcost/sampler.py)
    sampler: Dict[str, SamplerLaw] = field(default_factory=dict)
